//! `ops counter stream-events`: a journal table's stream as Lambda's event source mapping
//! delivers it to `counter-rollup` (every shard from `TRIM_HORIZON`, `INSERT`s only, one
//! tumbling window's event per shard). For the demo and for feeding a roll-up by hand: the
//! whole stream each time, which the watermarks make safe to deliver again.

use std::collections::HashMap;

use aws_sdk_dynamodbstreams::types::{AttributeValue, Record, ShardIteratorType};
use aws_sdk_dynamodbstreams::Client;
use base64::Engine;
use dynamodb_exactly_once_lambda::__private::sdk_config_from_env;
use serde_json::{json, Map, Value};

/// The DynamoDB Streams client of `config`: `AWS_ENDPOINT_URL_DYNAMODB_STREAMS` when set (the
/// SDK applies it), else the DynamoDB endpoint `AWS_ENDPOINT_URL_DYNAMODB` when that is set
/// (DynamoDB Local serves both APIs on one port), else AWS's own endpoint.
fn streams_client(config: &aws_config::SdkConfig) -> Client {
    let mut builder = aws_sdk_dynamodbstreams::config::Builder::from(config);
    if let Some(url) = streams_endpoint(
        std::env::var("AWS_ENDPOINT_URL_DYNAMODB_STREAMS").ok(),
        std::env::var("AWS_ENDPOINT_URL_DYNAMODB").ok(),
    ) {
        builder = builder.endpoint_url(url);
    }
    Client::from_conf(builder.build())
}

/// The endpoint the streams client is given explicitly: DynamoDB's when only that one is set.
fn streams_endpoint(streams: Option<String>, dynamodb: Option<String>) -> Option<String> {
    match streams.filter(|s| !s.is_empty()) {
        Some(_) => None,
        None => dynamodb.filter(|d| !d.is_empty()),
    }
}

/// One window event per shard of `table`'s latest stream.
pub async fn window_events(table: &str) -> Result<Vec<Value>, String> {
    let config = sdk_config_from_env().await.map_err(|e| e.to_string())?;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let streams = streams_client(&config);
    let described = ddb.describe_table().table_name(table).send().await;
    let arn = described
        .map_err(|e| format!("{table}: {e}"))?
        .table()
        .and_then(|t| t.latest_stream_arn())
        .map(str::to_string)
        .ok_or_else(|| format!("{table} has no stream"))?;
    let mut events = Vec::new();
    for shard in shard_ids(&streams, &arn).await? {
        let records = read(&streams, &arn, &shard).await?;
        if !records.is_empty() {
            events.push(window_event(&arn, &shard, &records));
        }
    }
    Ok(events)
}

async fn shard_ids(streams: &Client, arn: &str) -> Result<Vec<String>, String> {
    let mut ids = Vec::new();
    let mut start: Option<String> = None;
    loop {
        let out = streams
            .describe_stream()
            .stream_arn(arn)
            .set_exclusive_start_shard_id(start.take())
            .send()
            .await
            .map_err(|e| format!("DescribeStream: {e}"))?;
        let Some(description) = out.stream_description() else {
            return Ok(ids);
        };
        ids.extend(
            description
                .shards()
                .iter()
                .filter_map(|s| s.shard_id().map(str::to_string)),
        );
        match description.last_evaluated_shard_id() {
            Some(last) => start = Some(last.to_string()),
            None => return Ok(ids),
        }
    }
}

/// The shard's `INSERT`s, as Lambda's JSON records.
async fn read(streams: &Client, arn: &str, shard: &str) -> Result<Vec<Value>, String> {
    let mut iterator = streams
        .get_shard_iterator()
        .stream_arn(arn)
        .shard_id(shard)
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await
        .map_err(|e| format!("GetShardIterator: {e}"))?
        .shard_iterator;
    let mut records = Vec::new();
    while let Some(it) = iterator {
        let page = streams
            .get_records()
            .shard_iterator(it)
            .send()
            .await
            .map_err(|e| format!("GetRecords: {e}"))?;
        if page.records().is_empty() {
            break;
        }
        records.extend(
            page.records()
                .iter()
                .filter(|r| r.event_name().map(|n| n.as_str()) == Some("INSERT"))
                .map(|r| lambda_record(arn, r)),
        );
        iterator = page.next_shard_iterator().map(str::to_string);
    }
    Ok(records)
}

/// A whole window of `shard` in one invocation: its final one (the roll-up applies its keys).
fn window_event(arn: &str, shard: &str, records: &[Value]) -> Value {
    let now = now_rfc3339();
    json!({
        "Records": records,
        "window": {"start": now, "end": now},
        "state": {},
        "shardId": shard,
        "eventSourceARN": arn,
        "isFinalInvokeForWindow": true,
        "isWindowTerminatedEarly": false,
    })
}

/// Now as RFC 3339 (UTC, seconds).
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    chrono::DateTime::from_timestamp(i64::try_from(secs).unwrap_or(0), 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn lambda_record(arn: &str, record: &Record) -> Value {
    let change = record.dynamodb();
    let image = |m: Option<&HashMap<String, AttributeValue>>| {
        Value::Object(
            m.into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), attribute(v)))
                .collect(),
        )
    };
    json!({
        "eventID": record.event_id(),
        "eventName": record.event_name().map(|n| n.as_str()),
        "eventVersion": record.event_version(),
        "eventSource": "aws:dynamodb",
        "awsRegion": record.aws_region().unwrap_or("us-east-1"),
        "eventSourceARN": arn,
        "dynamodb": {
            "ApproximateCreationDateTime": change
                .and_then(|c| c.approximate_creation_date_time())
                .map_or(0, |t| t.secs()),
            "Keys": image(change.and_then(|c| c.keys())),
            "NewImage": image(change.and_then(|c| c.new_image())),
            "SequenceNumber": change.and_then(|c| c.sequence_number()),
            "SizeBytes": change.and_then(|c| c.size_bytes()),
            "StreamViewType": change.and_then(|c| c.stream_view_type()).map(|v| v.as_str()),
        }
    })
}

/// An attribute value in DynamoDB's JSON.
fn attribute(value: &AttributeValue) -> Value {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    match value {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::B(b) => json!({ "B": b64(b.as_ref()) }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(n) => json!({ "NULL": n }),
        AttributeValue::Ss(v) => json!({ "SS": v }),
        AttributeValue::Ns(v) => json!({ "NS": v }),
        AttributeValue::Bs(v) => {
            json!({ "BS": v.iter().map(|b| b64(b.as_ref())).collect::<Vec<_>>() })
        }
        AttributeValue::M(m) => {
            json!({ "M": m.iter().map(|(k, v)| (k.clone(), attribute(v))).collect::<Map<_, _>>() })
        }
        AttributeValue::L(l) => json!({ "L": l.iter().map(attribute).collect::<Vec<_>>() }),
        _ => json!({ "NULL": true }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_follow_the_dynamodb_endpoint_unless_given_their_own() {
        let local = Some("http://127.0.0.1:8000".to_string());
        assert_eq!(streams_endpoint(None, local.clone()), local);
        assert_eq!(
            streams_endpoint(Some("http://127.0.0.1:9000".into()), local),
            None,
            "the SDK applies AWS_ENDPOINT_URL_DYNAMODB_STREAMS itself"
        );
        assert_eq!(streams_endpoint(None, None), None);
    }
}
