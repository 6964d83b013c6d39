//! Batches built from JSON record bodies, as the Lambda edge would decode them from a Kinesis,
//! SQS or DynamoDB Streams event: shared by the integration tests and the benchmarks.

use dynamodb_exactly_once_lambda::source::{Batch, SourceKind, SourcePosition, SourceRecord};
use serde_json::Value;

/// A batch of JSON bodies from `kind`, with record ids numbered from `offset`: SQS message
/// ids `m<offset + i>`, Kinesis sequence numbers `<offset + i>` on 20 digits.
pub fn batch(kind: SourceKind, bodies: &[Value], offset: usize) -> Batch {
    let records = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            let n = offset + i;
            let (id, source_arn) = match kind {
                SourceKind::Sqs => (format!("m{n}"), Some("arn:aws:sqs:us-east-1:1:q".into())),
                SourceKind::Kinesis => (format!("{n:020}"), None),
                SourceKind::DynamoDb => (
                    body.pointer("/dynamodb/SequenceNumber")
                        .and_then(Value::as_str)
                        .map_or_else(|| format!("{n:021}"), str::to_string),
                    Some(STREAM_ARN.into()),
                ),
                _ => (format!("r{n}"), None),
            };
            SourceRecord::new(
                {
                    let mut position = SourcePosition::new(kind, id);
                    position.source_arn = source_arn;
                    position
                },
                body.to_string().into_bytes(),
            )
        })
        .collect();
    Batch::new(kind, records)
}

/// An SQS batch of JSON bodies with message ids `m<offset + i>`.
pub fn sqs_batch(bodies: &[Value], offset: usize) -> Batch {
    batch(SourceKind::Sqs, bodies, offset)
}

/// A Kinesis batch of JSON bodies with sequence numbers `0…0`, `0…1`, ...
pub fn kinesis_batch(bodies: &[Value]) -> Batch {
    batch(SourceKind::Kinesis, bodies, 0)
}

/// The stream ARN of [`stream_record`]s.
pub const STREAM_ARN: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/Orders/stream/2026-11-22T00:00:00.000";

/// A DynamoDB stream record as Lambda delivers it (view `NEW_AND_OLD_IMAGES`, created now):
/// `event_name` `INSERT`, `MODIFY` or `REMOVE`; `keys` and the images as plain JSON,
/// marshalled to attribute values.
pub fn stream_record(
    event_id: &str,
    event_name: &str,
    sequence_number: &str,
    keys: &Value,
    new_image: Option<&Value>,
    old_image: Option<&Value>,
) -> Value {
    let typed = |v: &Value| -> Value {
        v.as_object()
            .and_then(|map| dynamodb_exactly_once::ddb::item::json_to_item(map).ok())
            .and_then(|item| serde_json::to_value(serde_dynamo::Item::from(item)).ok())
            .unwrap_or(Value::Null)
    };
    #[allow(clippy::cast_precision_loss)]
    let now_secs = (dynamodb_exactly_once::ddb::clock::epoch_millis() / 1000) as f64;
    let mut change = serde_json::json!({
        "ApproximateCreationDateTime": now_secs,
        "Keys": typed(keys),
        "SequenceNumber": sequence_number,
        "SizeBytes": 100,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    });
    if let Some(image) = new_image {
        change["NewImage"] = typed(image);
    }
    if let Some(image) = old_image {
        change["OldImage"] = typed(image);
    }
    serde_json::json!({
        "eventID": event_id,
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": change,
        "eventSourceARN": STREAM_ARN,
    })
}

/// A batch of DynamoDB stream records (see [`stream_record`]), positions as the source gives
/// them.
pub fn stream_batch(records: &[Value]) -> Batch {
    batch(SourceKind::DynamoDb, records, 0)
}

/// A stored sample event as if its records reached the source now: Kinesis
/// `approximateArrivalTimestamp` and SQS `SentTimestamp` set to the current time (the
/// writers keep records older than their protocol applies safely as `too_old` dead letters).
pub fn arriving_now(mut event: Value) -> Value {
    let now_ms = dynamodb_exactly_once::ddb::clock::epoch_millis();
    let records = event.get_mut("Records").and_then(Value::as_array_mut);
    for record in records.into_iter().flatten() {
        if let Some(kinesis) = record.get_mut("kinesis").and_then(Value::as_object_mut) {
            #[allow(clippy::cast_precision_loss)]
            let secs = now_ms as f64 / 1000.0;
            kinesis.insert("approximateArrivalTimestamp".into(), secs.into());
        }
        if let Some(change) = record.get_mut("dynamodb").and_then(Value::as_object_mut) {
            #[allow(clippy::cast_precision_loss)]
            let secs = (now_ms / 1000) as f64;
            change.insert("ApproximateCreationDateTime".into(), secs.into());
        }
        if let Some(attributes) = record.get_mut("attributes").and_then(Value::as_object_mut) {
            attributes.insert("SentTimestamp".into(), now_ms.to_string().into());
        }
    }
    event
}
