use super::*;
use crate::source::{Batch, BatchResponse};
use serde_json::json;

/// An MSK batch over two partitions of one topic, records out of offset order in `orders-1`.
fn msk_event() -> Value {
    json!({
        "eventSource": "aws:kafka",
        "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/demo/abc-1",
        "bootstrapServers": "b-1.demo:9092",
        "records": {
            "orders-0": [
                {"topic": "orders", "partition": 0, "offset": 15, "timestamp": 1763769600000_i64,
                 "timestampType": "CREATE_TIME", "key": "a2V5LTE=", "value": "eyJhIjoxfQ==",
                 "headers": [{"tenant": [97, 99, 109, 101]}, {"bin": [-1, 255, 0]}]}
            ],
            "orders-1": [
                {"topic": "orders", "partition": 1, "offset": 8, "timestamp": 1763769600500_i64,
                 "timestampType": "LOG_APPEND_TIME", "value": "eyJiIjoyfQ==", "headers": []},
                {"topic": "orders", "partition": 1, "offset": 7, "timestamp": 1763769600400_i64,
                 "timestampType": "LOG_APPEND_TIME", "value": "eyJiIjoxfQ==", "headers": []}
            ]
        }
    })
}

#[test]
fn msk_records_carry_their_partition_offset_key_and_headers() {
    let batch = Batch::from_event(msk_event()).expect("kafka event");
    assert_eq!(batch.kind, SourceKind::Kafka);
    let ids: Vec<&str> = batch
        .records
        .iter()
        .map(|r| r.position.id.as_str())
        .collect();
    // Each partition in offset order.
    assert_eq!(ids, ["orders-0:15", "orders-1:7", "orders-1:8"]);
    let first = &batch.records[0];
    assert_eq!(first.body, br#"{"a":1}"#);
    assert_eq!(first.position.shard_id.as_deref(), Some("orders-0"));
    assert_eq!(first.position.arrived_at_ms, Some(1_763_769_600_000));
    assert_eq!(
        first.position.source_arn.as_deref(),
        Some("arn:aws:kafka:us-east-1:123456789012:cluster/demo/abc-1")
    );
    let kafka = first.position.kafka.as_ref().expect("kafka position");
    assert_eq!((kafka.partition, kafka.offset), (0, 15));
    assert_eq!(kafka.timestamp_type.as_deref(), Some("CREATE_TIME"));
    assert_eq!(kafka.key.as_deref(), Some(&b"key-1"[..]));
    assert_eq!(kafka.header("tenant"), Some(&b"acme"[..]));
    // Java's signed bytes and unsigned ones read alike.
    assert_eq!(kafka.header("bin"), Some(&[0xff, 0xff, 0][..]));
    assert_eq!(
        first.position.delivery_id(),
        "kafka|arn:aws:kafka:us-east-1:123456789012:cluster/demo/abc-1|orders-0|orders-0:15"
    );
}

#[test]
fn self_managed_batches_are_detected_without_an_arn() {
    let mut event = msk_event();
    event["eventSource"] = json!("SelfManagedKafka");
    event.as_object_mut().map(|o| o.remove("eventSourceArn"));
    let batch = Batch::from_event(event).expect("self-managed kafka event");
    assert_eq!(batch.kind, SourceKind::Kafka);
    assert_eq!(batch.records.len(), 3);
    assert_eq!(batch.records[0].position.source_arn, None);
}

#[test]
fn a_record_that_cannot_be_read_is_kept_whole_not_the_batch_refused() {
    let mut event = msk_event();
    event["records"]["orders-1"][0]["value"] = json!("not base64!");
    event["records"]["orders-0"][0]["headers"] = json!([{"h": [300]}]);
    let batch = Batch::from_event(event).expect("kafka event");
    let defects: Vec<Option<RejectionCode>> = batch
        .records
        .iter()
        .map(|r| defect(r).map(|d| d.code))
        .collect();
    assert_eq!(
        defects,
        [
            Some(RejectionCode::BadKafkaRecord),
            None,
            Some(RejectionCode::BadKafkaRecord)
        ]
    );
    // Kept as delivered: the record's JSON.
    let kept: Value = serde_json::from_slice(&batch.records[2].body).expect("json body");
    assert_eq!(kept["value"], "not base64!");
}

#[test]
fn a_value_or_key_of_another_type_is_one_record_kept_not_the_batch_refused() {
    let mut event = msk_event();
    event["records"]["orders-1"][0]["value"] = json!(5);
    event["records"]["orders-0"][0]["key"] = json!({"not": "base64"});
    let batch = Batch::from_event(event).expect("kafka event");
    let defects: Vec<Option<String>> = batch
        .records
        .iter()
        .map(|r| defect(r).map(|d| d.message))
        .collect();
    assert_eq!(
        defects,
        [
            Some("the Kafka record cannot be read: its key is not a base64 string".into()),
            None,
            Some("the Kafka record cannot be read: its value is not a base64 string".into()),
        ]
    );
}

#[test]
fn a_record_without_an_offset_refuses_the_event() {
    let mut event = msk_event();
    event["records"]["orders-0"][0]
        .as_object_mut()
        .map(|o| o.remove("offset"));
    assert!(matches!(
        Batch::from_event(event),
        Err(EventError::Malformed {
            kind: SourceKind::Kafka,
            ..
        })
    ));
}

#[test]
fn failures_are_answered_by_partition_and_offset() {
    let response = BatchResponse::new(SourceKind::Kafka, ["orders-1:7", "my.topic-v2-12:40"]);
    assert_eq!(
        serde_json::to_value(&response).expect("json"),
        json!({"batchItemFailures":[
            {"itemIdentifier":{"partition":"orders-1","offset":7}},
            {"itemIdentifier":{"partition":"my.topic-v2-12","offset":40}}]})
    );
    assert_eq!(response.failed_ids(), ["orders-1:7", "my.topic-v2-12:40"]);
    let empty = BatchResponse::new(SourceKind::Kafka, Vec::<String>::new());
    assert_eq!(
        serde_json::to_value(&empty).expect("json"),
        json!({"batchItemFailures": []})
    );
}

#[test]
fn positions_round_trip_through_json_with_their_bytes() {
    let batch = Batch::from_event(msk_event()).expect("kafka event");
    let position = &batch.records[0].position;
    let text = serde_json::to_string(position).expect("json");
    let back: SourcePosition = serde_json::from_str(&text).expect("position");
    assert_eq!(&back, position);
}
