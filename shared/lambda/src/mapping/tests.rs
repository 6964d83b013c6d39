use serde_json::{json, Value};

use super::*;
use crate::source::{SourceKind, SourcePosition, SourceRecord};

fn position(kind: SourceKind) -> SourcePosition {
    SourcePosition {
        kind,
        source_arn: Some("arn:aws:sqs:eu-west-1:1:orders".into()),
        id: "m-1".into(),
        shard_id: None,
        partition_key: Some("c1".into()),
        message_group_id: None,
        sqs_sequence_number: None,
        sub_record: None,
        event_id: None,
        arrived_at_ms: Some(1_700_000_000_123),
    }
}

fn record(kind: SourceKind, body: &str) -> SourceRecord {
    SourceRecord {
        position: position(kind),
        body: body.as_bytes().to_vec(),
    }
}

fn mapped(template: &str, kind: SourceKind, body: &str) -> Result<Value, Rejection> {
    let mapping = RecordMapping::new("X_RECORD_MAPPING", template).expect("valid template");
    let bytes = mapping.map(&record(kind, body))?;
    Ok(serde_json::from_slice(&bytes).expect("JSON"))
}

#[test]
fn a_template_builds_the_record_from_pointers_fields_texts_and_literals() {
    let template = r#"{"key":{"PK":"=customer#{/customer}","SK":"=totals"},
        "add":{"amount":"/amount","events":1},"idempotencyKey":"$id",
        "at":"$arrivalTime","tags":["/tags/0","=x{{y}}"],"whole":"$body"}"#;
    let body = r#"{"customer":"c1","amount":250,"tags":["t"],"a/b":1}"#;
    let out = mapped(template, SourceKind::Sqs, body).expect("mapped");
    assert_eq!(
        out,
        json!({"key":{"PK":"customer#c1","SK":"totals"},"add":{"amount":250,"events":1},
            "idempotencyKey":"m-1","at":1_700_000_000_123_u64,"tags":["t","x{y}"],
            "whole":{"customer":"c1","amount":250,"tags":["t"],"a/b":1}})
    );
    // A name with a slash through its escape; numbers go into texts in their JSON spelling.
    let out = mapped(r#"{"v":"/a~1b","t":"={/amount}"}"#, SourceKind::Sqs, body).expect("ok");
    assert_eq!(out, json!({"v":1,"t":"250"}));
}

#[test]
fn source_fields_follow_the_source_and_a_missing_one_fails_the_record() {
    let body = r#"{"v":1}"#;
    let sqs = mapped(r#"{"m":"$messageId"}"#, SourceKind::Sqs, body).expect("sqs");
    assert_eq!(sqs, json!({"m":"m-1"}));
    let kinesis = mapped(
        r#"{"k":"$partitionKey","s":"$sequenceNumber"}"#,
        SourceKind::Kinesis,
        body,
    )
    .expect("kinesis");
    assert_eq!(kinesis, json!({"k":"c1","s":"m-1"}));
    let err = mapped(r#"{"m":"$messageId"}"#, SourceKind::Kinesis, body).expect_err("no id");
    assert_eq!(err.code, RejectionCode::MappingFailed);
    assert!(err.message.contains("$messageId"), "{}", err.message);
}

#[test]
fn bodies_that_do_not_fit_are_mapping_failed_with_the_reason() {
    let t = r#"{"key":{"PK":"/customer"},"n":"=n{/nested}"}"#;
    let cases = [
        ("not json", "not JSON"),
        (r#"{"nested":1}"#, "no value at `/customer`"),
        (
            r#"{"customer":"c","nested":{"a":1}}"#,
            "an object, not a string or a number",
        ),
    ];
    for (body, why) in cases {
        let err = mapped(t, SourceKind::Sqs, body).expect_err(body);
        assert_eq!(err.code, RejectionCode::MappingFailed, "{body}");
        assert!(err.message.contains(why), "{body}: {}", err.message);
    }
}

#[test]
fn a_number_the_body_cannot_carry_exactly_is_refused_not_rounded() {
    let err = mapped(
        r#"{"n":"/n"}"#,
        SourceKind::Sqs,
        r#"{"n":1.00000000000000001}"#,
    )
    .expect_err("rounded");
    assert_eq!(err.code, RejectionCode::InvalidNumber);
    let big = mapped(
        r#"{"n":"/n"}"#,
        SourceKind::Sqs,
        r#"{"n":18446744073709551615}"#,
    )
    .expect("a 64-bit integer is exact");
    assert_eq!(big, json!({"n":18446744073709551615_u64}));
}

#[test]
fn templates_are_validated_at_start_up_naming_the_place() {
    let cases = [
        ("{", "not JSON"),
        (r#"{"key":{"PK":"customer"}}"#, "at `/key/PK`"),
        (r#"{"a":"$nope"}"#, "`$nope` is not a source field"),
        (r#"{"a":"/x~2"}"#, "not a JSON pointer"),
        (r#"{"a":"=x{/y"}"#, "not closed"),
        (r#"{"a":"=x}"}"#, "a lone `}`"),
        (r#"{"a":"={customer}"}"#, "in `{customer}`"),
    ];
    for (template, why) in cases {
        let err = RecordMapping::new("X_RECORD_MAPPING", template).expect_err(template);
        assert_eq!(err.setting, "X_RECORD_MAPPING");
        assert!(err.message.contains(why), "{template}: {}", err.message);
    }
}
