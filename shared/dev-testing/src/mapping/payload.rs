//! Lambda's JSON for DynamoDB stream records, batches and tumbling-window invocations
//! (<https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-windows.html>), and the
//! on-failure destination's message.

use std::collections::HashMap;

use aws_sdk_dynamodbstreams::types::{AttributeValue, Record};
use aws_smithy_types::date_time::Format;
use aws_smithy_types::DateTime;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value};

/// A record read from the stream: Lambda's JSON of it, and what the mapping needs to know.
#[derive(Debug, Clone)]
pub(crate) struct StreamRecord {
    /// `SequenceNumber` as a number (ordering).
    pub seq: u128,
    /// `SequenceNumber` as the stream spells it.
    pub seq_text: String,
    /// `ApproximateCreationDateTime`, epoch ms.
    pub created_ms: u64,
    /// The partition key's value (typed JSON text): lanes keep its order.
    pub partition_key: String,
    /// The record as Lambda sends it.
    pub json: Value,
}

/// Lambda's JSON of one SDK record (`eventSourceARN` added, as Lambda does).
pub(crate) fn record_json(
    record: &Record,
    stream_arn: &str,
    hash_key: Option<&str>,
) -> Result<StreamRecord, String> {
    let ddb = record
        .dynamodb()
        .ok_or_else(|| format!("record {:?} without dynamodb", record.event_id()))?;
    let seq_text = ddb
        .sequence_number()
        .ok_or("record without SequenceNumber")?
        .to_string();
    let seq = seq_text
        .parse::<u128>()
        .map_err(|e| format!("SequenceNumber {seq_text}: {e}"))?;
    let created = ddb.approximate_creation_date_time();
    let created_ms = created
        .and_then(|t| t.to_millis().ok())
        .and_then(|ms| u64::try_from(ms).ok())
        .unwrap_or(0);
    let mut body = Map::new();
    if let Some(t) = created {
        body.insert("ApproximateCreationDateTime".into(), epoch_seconds(t));
    }
    for (name, image) in [
        ("Keys", ddb.keys()),
        ("NewImage", ddb.new_image()),
        ("OldImage", ddb.old_image()),
    ] {
        if let Some(m) = image {
            body.insert(name.into(), item_json(m));
        }
    }
    body.insert("SequenceNumber".into(), json!(seq_text));
    body.insert("SizeBytes".into(), json!(ddb.size_bytes().unwrap_or(0)));
    if let Some(v) = ddb.stream_view_type() {
        body.insert("StreamViewType".into(), json!(v.as_str()));
    }
    let partition_key = match (hash_key, ddb.keys()) {
        (Some(k), Some(keys)) => keys.get(k).map(|v| value_json(v).to_string()),
        (None, Some(keys)) => Some(item_json(keys).to_string()),
        _ => None,
    }
    .unwrap_or_default();
    let mut out = json!({
        "eventID": record.event_id().unwrap_or_default(),
        "eventName": record.event_name().map(|n| n.as_str()).unwrap_or_default(),
        "eventVersion": record.event_version().unwrap_or("1.1"),
        "eventSource": record.event_source().unwrap_or("aws:dynamodb"),
        "awsRegion": record.aws_region().unwrap_or("us-east-1"),
        "dynamodb": Value::Object(body),
        "eventSourceARN": stream_arn,
    });
    if let Some(who) = record.user_identity() {
        out["userIdentity"] = json!({
            "type": who.r#type().unwrap_or_default(),
            "principalId": who.principal_id().unwrap_or_default(),
        });
    }
    Ok(StreamRecord {
        seq,
        seq_text,
        created_ms,
        partition_key,
        json: out,
    })
}

/// Whole seconds as an integer, as DynamoDB Streams gives them; a fraction otherwise.
fn epoch_seconds(t: &DateTime) -> Value {
    if t.subsec_nanos() == 0 {
        json!(t.secs())
    } else {
        json!(t.as_secs_f64())
    }
}

/// An item as DynamoDB's typed JSON (`{"a": {"N": "1"}}`): numbers keep their text.
pub(crate) fn item_json(item: &HashMap<String, AttributeValue>) -> Value {
    Value::Object(
        item.iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect(),
    )
}

fn value_json(v: &AttributeValue) -> Value {
    let b64 = |b: &aws_smithy_types::Blob| json!(STANDARD.encode(b.as_ref()));
    match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::B(b) => json!({ "B": b64(b) }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(b) => json!({ "NULL": b }),
        AttributeValue::Ss(v) => json!({ "SS": v }),
        AttributeValue::Ns(v) => json!({ "NS": v }),
        AttributeValue::Bs(v) => json!({ "BS": v.iter().map(b64).collect::<Vec<_>>() }),
        AttributeValue::L(v) => json!({ "L": v.iter().map(value_json).collect::<Vec<_>>() }),
        AttributeValue::M(m) => json!({ "M": item_json(m) }),
        _ => json!({ "NULL": true }),
    }
}

/// RFC 3339 in whole seconds, UTC (`2020-12-09T07:04:00Z`), as Lambda writes times.
pub(crate) fn rfc3339(ms: u64) -> String {
    DateTime::from_millis(i64::try_from(ms).unwrap_or(i64::MAX))
        .fmt(Format::DateTime)
        .unwrap_or_default()
}

/// The window fields of a tumbling-window invocation.
#[derive(Debug, Clone)]
pub(crate) struct WindowFields<'a> {
    pub start_ms: u64,
    pub end_ms: u64,
    pub state: &'a Value,
    pub shard_id: &'a str,
    pub is_final: bool,
    pub terminated_early: bool,
}

/// The event of one invocation.
pub(crate) fn event(
    records: &[StreamRecord],
    stream_arn: &str,
    window: Option<WindowFields<'_>>,
) -> Value {
    let mut out = json!({ "Records": records.iter().map(|r| r.json.clone()).collect::<Vec<_>>() });
    if let Some(w) = window {
        out["window"] = json!({ "start": rfc3339(w.start_ms), "end": rfc3339(w.end_ms) });
        out["state"] = w.state.clone();
        out["shardId"] = json!(w.shard_id);
        out["eventSourceARN"] = json!(stream_arn);
        out["isFinalInvokeForWindow"] = json!(w.is_final);
        out["isWindowTerminatedEarly"] = json!(w.terminated_early);
    }
    out
}

/// Why a batch was discarded (`requestContext.condition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Condition {
    /// `MaximumRetryAttempts` reached.
    RetryAttemptsExhausted,
    /// `MaximumRecordAgeInSeconds` passed.
    RecordAgeExceeded,
}

impl Condition {
    /// Lambda's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::RetryAttemptsExhausted => "RetryAttemptsExhausted",
            Condition::RecordAgeExceeded => "RecordAgeExceeded",
        }
    }
}

/// The on-failure destination's message for a discarded batch (the "invocation record" of
/// <https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html#services-dynamodb-errors>).
pub(crate) fn on_failure_message(
    condition: Condition,
    invokes: u32,
    shard_id: &str,
    stream_arn: &str,
    records: &[StreamRecord],
    now_ms: u64,
    error: Option<&str>,
) -> Value {
    let first = records.first();
    let last = records.last();
    json!({
        "requestContext": {
            "requestId": format!("emulator-{now_ms}-{}", first.map_or("", |r| r.seq_text.as_str())),
            "functionArn": "arn:aws:lambda:us-east-1:000000000000:function:emulated",
            "condition": condition.as_str(),
            "approximateInvokeCount": invokes,
        },
        "responseContext": {
            "statusCode": 200,
            "executedVersion": "$LATEST",
            "functionError": if error.is_some() { "Unhandled" } else { "" },
        },
        "version": "1.0",
        "timestamp": rfc3339(now_ms),
        "DDBStreamBatchInfo": {
            "shardId": shard_id,
            "startSequenceNumber": first.map(|r| r.seq_text.clone()),
            "endSequenceNumber": last.map(|r| r.seq_text.clone()),
            "approximateArrivalOfFirstRecord": first.map(|r| rfc3339(r.created_ms)),
            "approximateArrivalOfLastRecord": last.map(|r| rfc3339(r.created_ms)),
            "batchSize": records.len(),
            "streamArn": stream_arn,
        },
    })
}
