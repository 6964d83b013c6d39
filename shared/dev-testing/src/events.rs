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
            .and_then(|map| dynamodb_exactly_once::__private::json_to_item(map).ok())
            .and_then(|item| serde_json::to_value(serde_dynamo::Item::from(item)).ok())
            .unwrap_or(Value::Null)
    };
    #[allow(clippy::cast_precision_loss)]
    let now_secs = (dynamodb_exactly_once::__private::epoch_millis() / 1000) as f64;
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
/// `approximateArrivalTimestamp`, SQS `SentTimestamp` and Kafka `timestamp` set to the current
/// time (the writers keep records older than their protocol applies safely as `too_old` dead
/// letters).
pub fn arriving_now(mut event: Value) -> Value {
    let now_ms = dynamodb_exactly_once::__private::epoch_millis();
    let partitions = event.get_mut("records").and_then(Value::as_object_mut);
    for record in partitions.into_iter().flat_map(|p| p.values_mut()) {
        for record in record.as_array_mut().into_iter().flatten() {
            record["timestamp"] = now_ms.into();
        }
    }
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

/// The cluster ARN of [`kafka_event`]s.
pub const KAFKA_CLUSTER_ARN: &str =
    "arn:aws:kafka:us-east-1:123456789012:cluster/orders/6f0c0b7e-1111-2222-3333-444455556666-1";

/// One partition of a [`kafka_event`]: topic, partition, and its records as
/// `(offset, value)`.
pub type KafkaPartition<'a> = (&'a str, i64, &'a [(i64, Value)]);

/// An Amazon MSK event as Lambda delivers it: `partitions` are `(topic, partition, records)`,
/// each record `(offset, value)` with its value's JSON as the base64 value, timestamped now
/// (`LOG_APPEND_TIME`), a key `k<offset>` and one header `source: test`. A value that is a
/// JSON string is sent as that string's bytes (so a test can send a value that is not JSON).
pub fn kafka_event(partitions: &[KafkaPartition<'_>]) -> Value {
    use base64::engine::general_purpose::STANDARD as BASE64;
    use base64::Engine;
    let now_ms = dynamodb_exactly_once::__private::epoch_millis();
    let mut records = serde_json::Map::new();
    for (topic, partition, batch) in partitions {
        let list: Vec<Value> = batch
            .iter()
            .map(|(offset, value)| {
                let bytes = match value {
                    Value::String(text) => text.clone().into_bytes(),
                    other => other.to_string().into_bytes(),
                };
                serde_json::json!({
                    "topic": topic, "partition": partition, "offset": offset,
                    "timestamp": now_ms, "timestampType": "LOG_APPEND_TIME",
                    "key": BASE64.encode(format!("k{offset}")),
                    "value": BASE64.encode(bytes),
                    "headers": [{"source": [116, 101, 115, 116]}],
                })
            })
            .collect();
        records.insert(format!("{topic}-{partition}"), Value::Array(list));
    }
    serde_json::json!({
        "eventSource": "aws:kafka",
        "eventSourceArn": KAFKA_CLUSTER_ARN,
        "bootstrapServers": "b-1.orders.kafka.us-east-1.amazonaws.com:9098",
        "records": records,
    })
}

/// A Kafka batch as the Lambda edge decodes [`kafka_event`].
pub fn kafka_batch(partitions: &[KafkaPartition<'_>]) -> Batch {
    match Batch::from_event(kafka_event(partitions)) {
        Ok(batch) => batch,
        Err(err) => panic!("a kafka_event is a Kafka batch: {err}"),
    }
}
