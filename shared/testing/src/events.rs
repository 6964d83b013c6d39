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
