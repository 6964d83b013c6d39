use super::*;
use crate::source::SourceKind;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use dynamodb_exactly_once::RejectionCode;

/// A client of an endpoint nothing listens on: every call fails to connect, at once.
fn unreachable_client() -> Client {
    let conf = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("x", "x", None, None, "test"))
        .endpoint_url("http://127.0.0.1:1")
        .retry_config(RetryConfig::disabled())
        .build();
    Client::from_conf(conf)
}

fn record(kind: SourceKind, id: &str) -> SourceRecord {
    SourceRecord {
        position: SourcePosition {
            kind,
            source_arn: Some("arn:aws:sqs:us-east-1:1:orders.fifo".into()),
            id: id.into(),
            shard_id: None,
            partition_key: None,
            message_group_id: Some("customer-7".into()),
            sqs_sequence_number: Some("18880000000000000001".into()),
            sub_record: None,
            event_id: None,
            arrived_at_ms: Some(1_764_000_000_000),
            kafka: None,
        },
        body: b"not json".to_vec(),
    }
}

fn rejection() -> Rejection {
    Rejection::new(RejectionCode::BadJson, "expected value at line 1 column 1")
}

#[test]
fn a_fifo_group_is_the_records_own_group_or_partition_key() {
    let mut position = record(SourceKind::Sqs, "m-1").position;
    assert_eq!(fifo_group_id(&position), "customer-7");
    position.message_group_id = None;
    position.partition_key = Some("device/42".into());
    assert_eq!(fifo_group_id(&position), "device/42");
    position.partition_key = None;
    assert_eq!(fifo_group_id(&position), DEFAULT_GROUP_ID);
}

#[test]
fn a_key_sqs_would_refuse_as_a_group_becomes_its_hash() {
    let mut position = record(SourceKind::Kinesis, "49").position;
    position.message_group_id = None;
    for key in ["clé", "two words", "", &"k".repeat(129)] {
        position.partition_key = Some(key.to_string());
        let group = fifo_group_id(&position);
        assert!(is_fifo_token(&group), "{group}");
        assert!(group.starts_with("sha256-"), "{key:?} → {group}");
        assert_eq!(
            group,
            fifo_group_id(&position),
            "the same key, the same group"
        );
    }
}

#[test]
fn the_deduplication_id_is_the_same_for_a_redelivery_and_differs_per_record() {
    let sink = SqsDeadLetters::new(unreachable_client(), "https://q/orders.fifo", "orders");
    let id = |r: &SourceRecord| fifo_deduplication_id(&letter_id("orders", None, &r.position));
    let first = record(SourceKind::Sqs, "m-1");
    let again = record(SourceKind::Sqs, "m-1");
    let other = record(SourceKind::Sqs, "m-2");
    assert_eq!(id(&first), id(&again));
    assert_ne!(id(&first), id(&other));
    assert_eq!(id(&first).len(), 64);
    assert!(is_fifo_token(&id(&first)));
    assert!(sink.is_fifo());
    assert_eq!(sink.target(), "https://q/orders.fifo");
    let deployed = letter_id("orders", Some("Stack-Orders-1"), &first.position);
    assert_ne!(
        fifo_deduplication_id(&deployed),
        id(&first),
        "per deployment"
    );
}

#[test]
fn the_message_carries_what_the_table_keeps() {
    let sink = SqsDeadLetters::new(unreachable_client(), "https://q/dlq", "orders")
        .for_deployment(Some("Stack-Orders-1".into()));
    assert!(!sink.is_fifo());
    let record = record(SourceKind::Sqs, "m-1");
    // A stored reason longer than `Rejection::new` makes (a letter written by another version).
    let long: Rejection = serde_json::from_value(
        serde_json::json!({"code": "bad_json", "message": "x".repeat(5000)}),
    )
    .expect("a rejection");
    let message = sink.message(&record, &long).expect("encodes");
    let letter: SqsLetter = serde_json::from_str(&message).expect("a letter");
    assert_eq!(
        letter.id,
        letter_id("orders", Some("Stack-Orders-1"), &record.position)
    );
    assert_eq!(letter.function, "orders");
    assert_eq!(letter.deployment.as_deref(), Some("Stack-Orders-1"));
    assert_eq!(letter.position, record.position);
    assert_eq!(letter.reason.code, RejectionCode::BadJson);
    assert!(letter.reason.message.chars().count() < MAX_REASON_CHARS + 20);
    assert_eq!(letter.body.as_deref(), Some("not json"));
    assert!(letter.rejected_at > 1_700_000_000);
}

#[test]
fn the_message_limit_stays_within_what_a_queue_can_take() {
    let sink = SqsDeadLetters::new(unreachable_client(), "https://q/dlq", "orders");
    let mut record = record(SourceKind::Sqs, "m-1");
    record.body = vec![b'x'; 2 * MAX_MESSAGE_BYTES];
    for (asked, limit) in [
        (0, MIN_MESSAGE_BYTES),
        (usize::MAX, MAX_MESSAGE_BYTES),
        (300_000, 300_000),
    ] {
        let message = sink
            .clone()
            .max_message_bytes(asked)
            .message(&record, &rejection())
            .expect("encodes");
        assert!(
            message.len() <= limit && message.len() > limit - 8,
            "{asked}"
        );
    }
}

#[tokio::test]
async fn a_failed_send_is_an_external_failure_so_the_record_comes_back() {
    let sink = SqsDeadLetters::new(unreachable_client(), "http://127.0.0.1:1/1/dlq", "orders");
    let err = sink
        .keep(&record(SourceKind::Sqs, "m-1"), &rejection())
        .await
        .expect_err("nothing listens");
    assert!(err.is_retryable(), "{err}");
    let RecordFailure::External(inner) = &err else {
        panic!("not external: {err:?}");
    };
    let inner = inner
        .downcast_ref::<SqsDeadLetterError>()
        .expect("the sink's error");
    assert!(matches!(inner, SqsDeadLetterError::Send { .. }), "{inner}");
    assert!(
        std::error::Error::source(inner).is_some(),
        "keeps the SDK error"
    );
    assert!(
        err.to_string().contains("http://127.0.0.1:1/1/dlq"),
        "{err}"
    );
}
