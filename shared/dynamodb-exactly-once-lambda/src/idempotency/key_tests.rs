use std::error::Error;

use serde_json::{json, Value};

use super::*;
use crate::source::kpl::SubRecord;
use crate::source::{SourceKind, SourcePosition};

fn position(kind: SourceKind, id: &str) -> SourcePosition {
    SourcePosition {
        kind,
        source_arn: Some("arn:aws:sqs:eu-west-1:1:orders".into()),
        id: id.into(),
        shard_id: None,
        partition_key: None,
        message_group_id: None,
        sqs_sequence_number: None,
        sub_record: None,
        event_id: None,
        arrived_at_ms: None,
        kafka: None,
    }
}

fn sqs(body: &str) -> Record<Value> {
    let value = serde_json::from_str(body).unwrap_or(Value::Null);
    Record::new(value, position(SourceKind::Sqs, "m-1"), body.into())
}

fn key(source: &str, body: &str) -> Result<String, KeySourceError> {
    KeySource::<Value>::expression(source)
        .expect("valid")
        .key_of(&sqs(body))
}

#[test]
fn source_ids_are_the_message_id_or_the_sequence_number_of_each_user_record() {
    let record = sqs("{}");
    assert_eq!(KeySource::Id.key_of(&record).ok().as_deref(), Some("m-1"));
    assert_eq!(
        KeySource::DeliveryId.key_of(&record).ok(),
        Some(record.delivery_id())
    );
    // An SQS standard message has no sequence number: a clear per-record error.
    let err = KeySource::SequenceNumber
        .key_of(&record)
        .expect_err("no sequence number");
    assert_eq!(
        err.to_string(),
        "no idempotency key at `$sequenceNumber`: a sqs record has no `$sequenceNumber`"
    );
    let mut fifo = position(SourceKind::Sqs, "m-2");
    fifo.sqs_sequence_number = Some("1870000".into());
    let fifo = Record::new(json!({}), fifo, b"{}".to_vec());
    assert_eq!(
        KeySource::SequenceNumber.key_of(&fifo).ok().as_deref(),
        Some("1870000")
    );
    // Two user records of one KPL aggregate share its sequence number, not their keys.
    let mut user = position(SourceKind::Kinesis, "4960");
    user.sub_record = Some(SubRecord {
        sub_sequence_number: 3,
        explicit_hash_key: None,
    });
    let user = Record::new(json!({}), user, b"{}".to_vec());
    for source in [KeySource::Id, KeySource::SequenceNumber] {
        assert_eq!(source.key_of(&user).ok().as_deref(), Some("4960:3"));
    }
}

#[test]
fn a_pointer_reads_strings_numbers_and_objects_from_the_body() {
    let body = r#"{"orderId":"o-1","n":12.50,"order":{"b":2,"a":1},"a/b":"slash"}"#;
    assert_eq!(key("/orderId", body).ok().as_deref(), Some("o-1"));
    assert_eq!(key("/n", body).ok().as_deref(), Some("12.5"));
    assert_eq!(
        key("/order", body).ok().as_deref(),
        Some(r#"{"a":1,"b":2}"#)
    );
    assert_eq!(key("/a~1b", body).ok().as_deref(), Some("slash"));
    assert_eq!(
        key("=order#{/orderId}:{$id}", body).ok().as_deref(),
        Some("order#o-1:m-1")
    );
    let pointer = KeySource::<Value>::pointer("/order/a").expect("valid");
    assert_eq!(pointer.key_of(&sqs(body)).ok().as_deref(), Some("1"));
}

#[test]
fn a_record_the_pointer_finds_nothing_in_is_a_clear_error() {
    let missing = key("/orderId", r#"{"order":1}"#).expect_err("absent");
    assert!(
        matches!(missing, KeySourceError::Unreadable { .. }),
        "{missing}"
    );
    assert_eq!(
        missing.to_string(),
        "no idempotency key at `/orderId`: the body has no value at `/orderId`"
    );
    let null = key("/orderId", r#"{"orderId":null}"#).expect_err("null");
    assert!(null.to_string().contains("null"), "{null}");
    let empty = key("/orderId", r#"{"orderId":""}"#).expect_err("empty");
    assert!(matches!(empty, KeySourceError::Empty { .. }), "{empty}");
    let not_json = key("/orderId", "not json").expect_err("not JSON");
    assert!(
        matches!(not_json, KeySourceError::NotJson { .. }),
        "{not_json}"
    );
    assert!(
        Error::source(&not_json).is_some(),
        "the parser's error is kept"
    );
    // Source fields need no JSON body.
    assert_eq!(key("$id", "not json").ok().as_deref(), Some("m-1"));
    assert_eq!(key("=m#{$id}", "not json").ok().as_deref(), Some("m#m-1"));
}

#[test]
fn bad_pointers_and_expressions_are_refused_when_built() {
    for bad in ["orderId", "", "/a~2", "$nope", "=x{/a"] {
        let err = KeySource::<Value>::expression(bad)
            .and_then(|_| KeySource::<Value>::pointer(bad))
            .expect_err(bad);
        assert_eq!(err.setting, KEY_SETTING, "{bad}");
    }
    let err = KeySource::<Value>::pointer("$id").expect_err("not a pointer");
    assert!(
        err.message.contains("not a JSON pointer"),
        "{}",
        err.message
    );
}

#[test]
fn a_key_function_sees_the_whole_record() {
    let source = KeySource::<Value>::from_fn(|record| match record.body["customer"].as_str() {
        Some(c) => Ok(format!("{c}/{}", record.id())),
        None => Err(KeySourceError::function("no customer")),
    });
    let record = sqs(r#"{"customer":"c1"}"#);
    assert_eq!(source.key_of(&record).ok().as_deref(), Some("c1/m-1"));
    let err = source.key_of(&sqs("{}")).expect_err("refused");
    assert_eq!(
        err.to_string(),
        "the key function found no idempotency key: no customer"
    );
    assert_eq!(format!("{source:?}"), "Function(..)");
}
