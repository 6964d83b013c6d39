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
        kafka: None,
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
fn numbers_are_carried_exactly_and_those_dynamodb_refuses_are_invalid_number() {
    for n in [
        "1.00000000000000001",
        "18446744073709551617",
        "12345678901234567890.123456789",
    ] {
        let body = format!(r#"{{"n":{n}}}"#);
        let out = mapped(r#"{"n":"/n"}"#, SourceKind::Sqs, &body).expect(n);
        assert_eq!(out["n"].to_string(), n);
    }
    let err = mapped(
        r#"{"n":"/n"}"#,
        SourceKind::Sqs,
        r#"{"n":1.00000000000000000000000000000000000001}"#,
    )
    .expect_err("39 digits");
    assert_eq!(err.code, RejectionCode::InvalidNumber);
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

#[test]
fn numbers_go_into_texts_in_one_canonical_spelling() {
    let template = r#"{"key":{"PK":"=customer#{/customer}"}}"#;
    for body in [
        r#"{"customer":1}"#,
        r#"{"customer":1.0}"#,
        r#"{"customer":1e0}"#,
        r#"{"customer":10E-1}"#,
    ] {
        let out = mapped(template, SourceKind::Sqs, body).expect(body);
        assert_eq!(out, json!({"key":{"PK":"customer#1"}}), "{body}");
    }
    let out = mapped(template, SourceKind::Sqs, r#"{"customer":1e2}"#).expect("1e2");
    assert_eq!(out, json!({"key":{"PK":"customer#100"}}));
    let out = mapped(template, SourceKind::Sqs, r#"{"customer":1.50}"#).expect("1.50");
    assert_eq!(out, json!({"key":{"PK":"customer#1.5"}}));
}

#[test]
fn filters_read_embedded_json_numbers_in_strings_times_defaults_and_negation() {
    // An SNS envelope delivered to SQS without raw delivery: JSON inside a string.
    let sns = r#"{"Type":"Notification","MessageId":"sns-1",
        "Message":"{\"customer\":\"c1\",\"amount\":\"250\",\"refund\":true,\"at\":\"2024-05-01T12:00:00.250+02:00\"}"}"#;
    let template = r#"{"c":"/Message|json|/customer","n":"/Message|json|/amount|number",
        "neg":"/Message|json|/amount|number|neg","at":"/Message|json|/at|epoch_ms",
        "missing":"/Message|json|/nope|default(0)","pk":"=c#{/Message|json|/customer}",
        "s":"/Message|json|/amount|number|string"}"#;
    let out = mapped(template, SourceKind::Sqs, sns).expect("mapped");
    assert_eq!(
        out,
        json!({"c":"c1","n":250,"neg":-250,"at":1_714_557_600_250_i64,"missing":0,
            "pk":"c#c1","s":"250"})
    );
    // Exact: a number string beyond f64 becomes that number, every digit kept.
    let out = mapped(
        r#"{"n":"/n|number"}"#,
        SourceKind::Sqs,
        r#"{"n":"12345678901234567.5"}"#,
    )
    .expect("carried");
    assert_eq!(out["n"].to_string(), "12345678901234567.5");
    let err = mapped(
        r#"{"t":"/t|epoch_ms"}"#,
        SourceKind::Sqs,
        r#"{"t":"yesterday"}"#,
    )
    .expect_err("not a time");
    assert!(err.message.contains("RFC 3339"), "{}", err.message);
    // A raw SNS delivery (already an object) passes `json` unchanged: one template for both.
    let out = mapped(
        r#"{"c":"/Message|json|/customer"}"#,
        SourceKind::Sqs,
        r#"{"Message":{"customer":"c2"}}"#,
    )
    .expect("raw");
    assert_eq!(out, json!({"c":"c2"}));
}

#[test]
fn computed_keys_and_a_match_choose_fields_and_the_op() {
    let template = r#"{"key":{"PK":"=user#{/user}"},"add":{"={/type}":1},
        "op":{"$match":"/deleted|default(false)","cases":{"true":"=delete"},"else":"=put"}}"#;
    let login = mapped(template, SourceKind::Sqs, r#"{"user":"u1","type":"login"}"#).expect("a");
    assert_eq!(
        login,
        json!({"key":{"PK":"user#u1"},"add":{"login":1},"op":"put"})
    );
    let gone = mapped(
        template,
        SourceKind::Sqs,
        r#"{"user":"u1","type":"logout","deleted":true}"#,
    )
    .expect("b");
    assert_eq!(gone["op"], json!("delete"));
    assert_eq!(gone["add"], json!({"logout":1}));
    let err = mapped(
        r#"{"op":{"$match":"/kind","cases":{"a":"=put"}}}"#,
        SourceKind::Sqs,
        r#"{"kind":"b"}"#,
    )
    .expect_err("no case");
    assert!(err.message.contains("no case"), "{}", err.message);
}

#[test]
fn filters_and_matches_are_validated_at_start_up_naming_the_place() {
    let cases = [
        (r#"{"a":"/x|nope"}"#, "`|nope` is not a filter"),
        (r#"{"a":"/x|default(oops)"}"#, "the default is a JSON value"),
        (r#"{"a":{"$match":"/x","cases":{},"when":1}}"#, "not `when`"),
        (r#"{"a":{"$match":"x","cases":{}}}"#, "at `/a/$match`"),
        (r#"{"={/x":1}"#, "in the computed key"),
    ];
    for (template, why) in cases {
        let err = RecordMapping::new("X_RECORD_MAPPING", template).expect_err(template);
        assert!(err.message.contains(why), "{template}: {}", err.message);
    }
}

#[test]
fn a_template_of_the_wrong_shape_for_its_protocol_refuses_to_start() {
    use dynamodb_exactly_once::counter::Counter;
    use dynamodb_exactly_once::ratchet::Ratchet;
    let check =
        |template: &str| RecordMapping::for_protocol::<Counter>("COUNTER_RECORD_MAPPING", template);
    check(r#"{"key":{"PK":"/customer"},"add":{"n":1},"idempotencyKey":"$id"}"#).expect("fits");
    let cases = [
        (
            r#"{"key":{"PK":"/customer"},"add":{"n":1},"idempotency_key":"$id"}"#,
            "`idempotency_key` is not a field of the counter's record (did you mean `idempotencyKey`?)",
        ),
        (r#"{"key":{"PK":"/c"},"add":{"n":1}}"#, "needs `idempotencyKey`"),
        (r#"{"key":{"PK":"/c"},"add":"=n","idempotencyKey":"$id"}"#, "is an object, not a string"),
        (r#""=x""#, "is an object"),
    ];
    for (template, why) in cases {
        let err = check(template).expect_err(template);
        assert_eq!(err.setting, "COUNTER_RECORD_MAPPING");
        assert!(err.message.contains(why), "{template}: {}", err.message);
    }
    let ratchet = |t: &str| RecordMapping::for_protocol::<Ratchet>("R", t);
    let err = ratchet(r#"{"op":"=upsert","key":{"PK":"/u"},"ts":"/v"}"#).expect_err("op");
    assert!(
        err.message.contains("one of put, delete"),
        "{}",
        err.message
    );
    let err = ratchet(
        r#"{"op":{"$match":"/d","cases":{"true":"=delete"},"else":"=upsert"},"key":{},"ts":1}"#,
    )
    .expect_err("else op");
    assert!(err.message.contains("not \"upsert\""), "{}", err.message);
    ratchet(r#"{"op":{"$match":"/d","cases":{"true":"=delete"},"else":"=put"},"key":{"PK":"/u"},"ts":"/t|epoch_ms"}"#)
        .expect("a conditional op");
    // `$body` or a pointer as the whole record: checked per record by the protocol.
    check(r#""$body""#).expect("unchecked");
}

#[test]
fn every_template_in_the_mapping_page_compiles_and_gives_a_writers_record() {
    use dynamodb_exactly_once::counter::Counter;
    use dynamodb_exactly_once::document::Document;
    use dynamodb_exactly_once::ratchet::Ratchet;
    let page = include_str!("../../../../docs/mapping.md");
    let templates: Vec<&str> = page
        .split("```json\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .collect();
    assert!(templates.len() >= 4, "{}", templates.len());
    for template in templates {
        let fits = [
            RecordMapping::for_protocol::<Counter>("M", template).is_ok(),
            RecordMapping::for_protocol::<Ratchet>("M", template).is_ok(),
            RecordMapping::for_protocol::<Document>("M", template).is_ok(),
        ];
        assert!(
            fits.contains(&true),
            "{template}: {:?}",
            RecordMapping::new("M", template)
        );
    }
}

#[test]
fn kafka_fields_read_topic_partition_offset_timestamp_key_and_headers() {
    use crate::source::{KafkaHeader, KafkaPosition};
    let mut kafka = KafkaPosition::new("orders", 3, 41);
    kafka.timestamp_ms = Some(1_700_000_000_500);
    kafka.timestamp_type = Some("LOG_APPEND_TIME".into());
    kafka.key = Some(b"customer-7".to_vec());
    kafka.headers = vec![
        KafkaHeader::new("tenant", b"old".to_vec()),
        KafkaHeader::new("tenant", b"acme".to_vec()),
        KafkaHeader::new("blob", vec![0xff, 0xfe]),
    ];
    let record = SourceRecord::new(kafka.into_position(None), br#"{"v":1}"#.to_vec());
    let template = r#"{"t":"$topic","p":"$partition","o":"$offset","ts":"$timestamp",
        "tt":"$timestampType","k":"$key","h":"$headers","tenant":"$headers|/tenant",
        "id":"=order#{$topic}/{$partition}/{$offset}","seq":"$sequenceNumber|default(null)"}"#;
    let mapping = RecordMapping::new("X_RECORD_MAPPING", template).expect("valid template");
    let out: Value = serde_json::from_slice(&mapping.map(&record).expect("mapped")).expect("json");
    assert_eq!(
        out,
        json!({"t":"orders","p":3,"o":41,"ts":1_700_000_000_500_i64,"tt":"LOG_APPEND_TIME",
            "k":"customer-7","h":{"tenant":"acme"},"tenant":"acme","id":"order#orders/3/41",
            "seq":null})
    );
    // On another source the Kafka fields are absent: the record fails the mapping.
    let sqs = mapped(r#"{"t":"$topic"}"#, SourceKind::Sqs, r#"{"v":1}"#);
    assert_eq!(
        sqs.expect_err("no topic").code,
        RejectionCode::MappingFailed
    );
}
