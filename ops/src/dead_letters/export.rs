//! Dead letters as the event their source delivered them in, for `cargo lambda invoke`.
//!
//! * **SQS** letters become an SQS event: the original `messageId`, body, queue ARN and the
//!   attributes the writers read (`SentTimestamp`, so the age guard sees the original arrival;
//!   `MessageGroupId` and `SequenceNumber` for FIFO).
//! * **Kinesis** letters become a Kinesis event: the exact payload (base64), partition key,
//!   shard and sequence number, and the original arrival time. A KPL user record is exported
//!   on its own, its sequence number followed by its 20-digit sub-sequence number (unique and
//!   the same in every export).
//! * **DynamoDB Streams** letters become a DynamoDB Streams event of the stored stream records.
//!
//! One kind and one deployment per export (as replay, letters of several deployments are
//! refused: name one with `--deployment`). The ids are those of the source (or derived from them), so a record
//! rejected again overwrites its own letter, never another's.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use dynamodb_exactly_once_lambda::__private::refuse_mixed_deployments;
use dynamodb_exactly_once_lambda::dead_letter::{DeadLetter, DeadLetters, LetterFilter};
use dynamodb_exactly_once_lambda::source::SourceKind;
use serde_json::{json, Value};

pub async fn run(letters: &DeadLetters, filter: &LetterFilter) -> Result<(), String> {
    let listing = letters.listing(filter).await.map_err(|e| e.to_string())?;
    let event = exportable(&listing.letters)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&event).map_err(|e| e.to_string())?
    );
    for letter in &listing.letters {
        letters
            .mark_exported(letter)
            .await
            .map_err(|e| e.to_string())?;
    }
    eprintln!(
        "{} letter(s) exported and marked (replay leaves them alone; `forget-exported` removes them)",
        listing.letters.len()
    );
    Ok(())
}

/// The letters as their source's event, refused when they are of several deployments (their
/// event invoked against one deployment would write the other's records into its table) or
/// of several source kinds.
pub fn exportable(letters: &[DeadLetter]) -> Result<Value, String> {
    forgettable(letters)?;
    event_of(letters)
}

/// Letters that may be removed as exported together: one deployment's.
pub fn forgettable(letters: &[DeadLetter]) -> Result<(), String> {
    refuse_mixed_deployments(letters)
        .map_err(|e| format!("{e}: name one with --deployment (as `list` shows it)"))
}

/// The letters (of one source kind) as that source's event.
pub fn event_of(letters: &[DeadLetter]) -> Result<Value, String> {
    let Some(first) = letters.first() else {
        return Ok(json!({ "Records": [] }));
    };
    let kind = first.position.kind;
    if letters.iter().any(|l| l.position.kind != kind) {
        return Err(
            "the letters come from several source kinds: export one --kind at a time".into(),
        );
    }
    if kind == SourceKind::Kafka {
        return kafka_event(letters);
    }
    let records: Result<Vec<Value>, String> = letters
        .iter()
        .map(|l| match kind {
            SourceKind::Sqs => Ok(sqs_record(l)),
            SourceKind::Kinesis => Ok(kinesis_record(l)),
            SourceKind::DynamoDb => serde_json::from_slice(&l.payload)
                .map_err(|e| format!("letter {}: the stream record is not JSON: {e}", l.id)),
            other => Err(format!("letters of {other:?} cannot be exported")),
        })
        .collect();
    Ok(json!({ "Records": records? }))
}

/// Kafka letters as one Amazon MSK (or self-managed) event: `records` keyed
/// `<topic>-<partition>`, each record with its key, headers and timestamp as kept. A letter
/// kept whole (`bad_kafka_record`) is its record's JSON as delivered.
fn kafka_event(letters: &[DeadLetter]) -> Result<Value, String> {
    let mut partitions: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    for l in letters {
        let Some(k) = &l.position.kafka else {
            return Err(format!(
                "letter {}: a Kafka letter without its position",
                l.id
            ));
        };
        let record = match &k.defect {
            Some(_) => serde_json::from_slice(&l.payload)
                .map_err(|e| format!("letter {}: the kept record is not JSON: {e}", l.id))?,
            None => {
                let headers: Vec<Value> = k
                    .headers
                    .iter()
                    .map(|h| json!({ h.name.clone(): h.value }))
                    .collect();
                json!({
                    "topic": k.topic, "partition": k.partition, "offset": k.offset,
                    "timestamp": k.timestamp_ms, "timestampType": k.timestamp_type,
                    "key": k.key.as_ref().map(|b| BASE64.encode(b)),
                    "value": BASE64.encode(&l.payload),
                    "headers": headers,
                })
            }
        };
        partitions
            .entry(k.topic_partition())
            .or_default()
            .push(record);
    }
    let arn = letters.first().and_then(|l| l.position.source_arn.clone());
    let source = if arn.is_some() {
        "aws:kafka"
    } else {
        "SelfManagedKafka"
    };
    Ok(json!({ "eventSource": source, "eventSourceArn": arn, "records": partitions }))
}

fn sqs_record(l: &DeadLetter) -> Value {
    let p = &l.position;
    let mut attributes = serde_json::Map::new();
    attributes.insert("ApproximateReceiveCount".into(), json!("1"));
    if let Some(ms) = p.arrived_at_ms {
        attributes.insert("SentTimestamp".into(), json!(ms.to_string()));
    }
    if let Some(group) = &p.message_group_id {
        attributes.insert("MessageGroupId".into(), json!(group));
    }
    if let Some(seq) = &p.sqs_sequence_number {
        attributes.insert("SequenceNumber".into(), json!(seq));
    }
    json!({
        "eventSource": "aws:sqs",
        "messageId": p.id,
        // SQS bodies are text; a letter kept from SQS always is.
        "body": String::from_utf8_lossy(&l.payload),
        "eventSourceARN": p.source_arn,
        "attributes": attributes,
    })
}

fn kinesis_record(l: &DeadLetter) -> Value {
    let p = &l.position;
    let sequence = match &p.sub_record {
        Some(sub) => format!("{}{:020}", p.id, sub.sub_sequence_number),
        None => p.id.clone(),
    };
    let shard = p.shard_id.as_deref().unwrap_or("shardId-000000000000");
    let arrived = p.arrived_at_ms.map_or(0.0, |ms| ms as f64 / 1000.0);
    json!({
        "eventSource": "aws:kinesis",
        "eventID": format!("{shard}:{sequence}"),
        "eventSourceARN": p.source_arn,
        "kinesis": {
            "data": BASE64.encode(&l.payload),
            "partitionKey": p.partition_key.clone().unwrap_or_else(|| "replay".into()),
            "sequenceNumber": sequence,
            "approximateArrivalTimestamp": arrived,
            "kinesisSchemaVersion": "1.0",
        },
    })
}

#[cfg(test)]
mod tests {
    use dynamodb_exactly_once::{Rejection, RejectionCode};
    use dynamodb_exactly_once_lambda::source::{SourcePosition, SubRecord};
    use dynamodb_exactly_once_lambda::Batch;

    use super::*;

    fn letter(kind: SourceKind, id: &str, sub: Option<u64>, payload: &[u8]) -> DeadLetter {
        let mut position = SourcePosition::new(kind, id);
        position.source_arn = Some("arn:aws:sqs:us-east-1:1:q.fifo".into());
        position.shard_id = (kind == SourceKind::Kinesis).then(|| "shardId-7".to_string());
        position.partition_key = (kind == SourceKind::Kinesis).then(|| "p".to_string());
        position.message_group_id = (kind == SourceKind::Sqs).then(|| "g1".to_string());
        position.sqs_sequence_number =
            (kind == SourceKind::Sqs).then(|| "18850000000000000002".to_string());
        position.sub_record = sub.map(SubRecord::new);
        position.arrived_at_ms = Some(1_700_000_000_123);
        serde_json::from_value::<DeadLetter>(json!({
            "Id": format!("f|{id}"), "Function": "f",
            "Reason": Rejection::new(RejectionCode::BadJson, "x"),
            "Position": position,
            "RejectedAt": 0,
        }))
        .map(|mut l| {
            l.payload = payload.to_vec();
            l
        })
        .expect("a letter")
    }

    #[test]
    fn kafka_letters_export_as_the_event_they_came_in() {
        // Given letters decoded from an MSK event over two partitions (one value not JSON)
        let event = json!({"eventSource": "aws:kafka",
            "eventSourceArn": "arn:aws:kafka:us-east-1:1:cluster/c/x",
            "records": {"t-0": [{"topic": "t", "partition": 0, "offset": 4,
                "timestamp": 1_700_000_000_123_i64, "timestampType": "LOG_APPEND_TIME",
                "key": "azE=", "value": "e25vdA==", "headers": [{"h": [1, 255]}]}],
                "t-1": [{"topic": "t", "partition": 1, "offset": 9, "timestamp": 1,
                "timestampType": "CREATE_TIME", "value": "e30=", "headers": []}]}});
        let batch = Batch::from_event(event).expect("kafka event");
        let letters: Vec<DeadLetter> = batch
            .records
            .iter()
            .map(|r| {
                let mut l = letter(SourceKind::Kafka, &r.position.id, None, &r.body);
                l.position = r.position.clone();
                l
            })
            .collect();

        // When they are exported, the event decodes to the same positions and payloads
        let again = Batch::from_event(event_of(&letters).expect("an event")).expect("kafka");
        assert_eq!(again.kind, SourceKind::Kafka);
        let pairs = |b: &Batch| -> Vec<(SourcePosition, Vec<u8>)> {
            b.records
                .iter()
                .map(|r| (r.position.clone(), r.body.clone()))
                .collect()
        };
        assert_eq!(pairs(&again), pairs(&batch));
    }

    #[test]
    fn export_keeps_every_byte_of_binary_and_text_payloads() {
        for (kind, payloads) in [
            (
                SourceKind::Sqs,
                vec![b"{\"op\":\"put\"}".to_vec(), "é text".as_bytes().to_vec()],
            ),
            (
                SourceKind::Kinesis,
                vec![vec![0xff, 0x00, 0xfe, b'{'], b"text".to_vec()],
            ),
        ] {
            let letters: Vec<DeadLetter> = payloads
                .iter()
                .enumerate()
                .map(|(i, p)| letter(kind, &format!("{}", 10 + i), None, p))
                .collect();
            let event = event_of(&letters).expect("one kind");
            let batch = Batch::from_event(event).expect("a writer accepts it");
            let bodies: Vec<Vec<u8>> = batch.records.into_iter().map(|r| r.body).collect();
            assert_eq!(bodies, payloads);
        }
    }

    #[test]
    fn export_keeps_arrival_times_fifo_attributes_and_source_ids() {
        let sqs = letter(SourceKind::Sqs, "m-1", None, b"{}");
        let batch = Batch::from_event(event_of(std::slice::from_ref(&sqs)).expect("sqs"))
            .expect("sqs event");
        assert_eq!(batch.records[0].position, sqs.position);
        let kinesis = letter(SourceKind::Kinesis, "49", None, b"{}");
        let batch = Batch::from_event(event_of(std::slice::from_ref(&kinesis)).expect("kinesis"))
            .expect("event");
        let p = &batch.records[0].position;
        assert_eq!(
            (p.id.as_str(), p.arrived_at_ms),
            ("49", Some(1_700_000_000_123))
        );
        assert_eq!(p.shard_id.as_deref(), Some("shardId-7"));
    }

    #[test]
    fn exported_ids_are_unique_per_letter_and_stable_across_exports() {
        let letters: Vec<DeadLetter> = (0..3)
            .map(|n| letter(SourceKind::Kinesis, "49", Some(n), b"{}"))
            .collect();
        let ids = |event: Value| -> Vec<String> {
            Batch::from_event(event)
                .expect("event")
                .records
                .into_iter()
                .map(|r| r.position.id)
                .collect()
        };
        let first = ids(event_of(&letters).expect("export"));
        let again = ids(event_of(&letters[1..]).expect("export"));
        assert_eq!(first.len(), 3);
        assert!(first[0] != first[1] && first[1] != first[2]);
        assert_eq!(&first[1..], &again[..], "the same letter, the same id");
    }

    #[test]
    fn letters_of_several_deployments_are_not_exported_or_forgotten_together() {
        let of = |deployment: &str, id: &str| {
            let mut l = letter(SourceKind::Sqs, id, None, b"{}");
            l.deployment = Some(deployment.into());
            l
        };
        let mixed = [of("writer-main", "m1"), of("writer-replica", "m2")];
        let err = exportable(&mixed).expect_err("mixed deployments");
        assert!(
            err.contains("writer-main") && err.contains("--deployment"),
            "{err}"
        );
        let err = forgettable(&mixed).expect_err("mixed deployments");
        assert!(err.contains("writer-replica"), "{err}");
        let one = [of("writer-main", "m1"), of("writer-main", "m3")];
        assert!(exportable(&one).is_ok());
        assert!(forgettable(&one).is_ok());
    }

    #[test]
    fn letters_of_several_kinds_are_not_exported_together() {
        let mixed = [
            letter(SourceKind::Sqs, "m", None, b"{}"),
            letter(SourceKind::Kinesis, "1", None, b"{}"),
        ];
        assert!(event_of(&mixed).is_err());
    }
}
