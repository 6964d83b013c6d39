//! Batches built from JSON record bodies, as the Lambda edge would decode them from a Kinesis
//! or SQS event: shared by the integration tests and the benchmarks.

use dynamo_lambda::source::{Batch, SourceKind, SourcePosition, SourceRecord};
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
            };
            SourceRecord {
                position: SourcePosition {
                    kind,
                    source_arn,
                    id,
                    shard_id: None,
                    partition_key: None,
                    message_group_id: None,
                    sub_record: None,
                    arrived_at_ms: None,
                },
                body: body.to_string().into_bytes(),
            }
        })
        .collect();
    Batch { kind, records }
}

/// An SQS batch of JSON bodies with message ids `m<offset + i>`.
pub fn sqs_batch(bodies: &[Value], offset: usize) -> Batch {
    batch(SourceKind::Sqs, bodies, offset)
}

/// A Kinesis batch of JSON bodies with sequence numbers `0…0`, `0…1`, ...
pub fn kinesis_batch(bodies: &[Value]) -> Batch {
    batch(SourceKind::Kinesis, bodies, 0)
}

/// A stored sample event as if its records reached the source now: Kinesis
/// `approximateArrivalTimestamp` and SQS `SentTimestamp` set to the current time (the
/// writers keep records older than their protocol applies safely as `too_old` dead letters).
pub fn arriving_now(mut event: Value) -> Value {
    let now_ms = dynamo_protocols::ddb::clock::epoch_millis();
    let records = event.get_mut("Records").and_then(Value::as_array_mut);
    for record in records.into_iter().flatten() {
        if let Some(kinesis) = record.get_mut("kinesis").and_then(Value::as_object_mut) {
            #[allow(clippy::cast_precision_loss)]
            let secs = now_ms as f64 / 1000.0;
            kinesis.insert("approximateArrivalTimestamp".into(), secs.into());
        }
        if let Some(attributes) = record.get_mut("attributes").and_then(Value::as_object_mut) {
            attributes.insert("SentTimestamp".into(), now_ms.to_string().into());
        }
    }
    event
}
