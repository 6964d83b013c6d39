//! Rejection codes of malformed messages, and which check wins when an input fails several
//! (pinned before the parser moved to `serde` raw structs: codes must not change).

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::parse_message;
use crate::txn::record::MAX_REQUESTS;
use crate::txn::request::MAX_TX_ID_LEN;

fn allowed() -> BTreeSet<String> {
    BTreeSet::from(["Accounts".to_string()])
}

fn code(body: Value) -> String {
    match parse_message(body.to_string().as_bytes(), &allowed()) {
        Ok(_) => "ok".into(),
        Err(r) => r.code.to_string(),
    }
}

fn update(extra: Value) -> Value {
    let mut u = json!({"TableName":"Accounts","Key":{"PK":"a"},"UpdateExpression":"SET b = :v","ExpressionAttributeValues":{":v":1}});
    if let (Some(u), Some(extra)) = (u.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            u.insert(k.clone(), v.clone());
        }
    }
    json!({"txId":"t","requests":[{"Update":u}]})
}

#[test]
fn each_invalid_message_has_its_code() {
    assert_eq!(code(update(json!({}))), "ok");
    assert_eq!(code(json!([1])), "not_an_object");
    assert_eq!(code(json!({"requests":[]})), "missing_tx_id");
    assert_eq!(code(json!({"txId":"t","requests":[]})), "no_requests");
    assert_eq!(
        code(update(json!({"TableName":"Other"}))),
        "table_not_allowed"
    );
    assert_eq!(
        code(update(json!({"UpdateExpression":"SET _txLock = :v"}))),
        "reserved_attribute"
    );
    assert_eq!(
        code(update(
            json!({"UpdateExpression":"SET #n = :v","ExpressionAttributeNames":{"#n":"_txVer"}})
        )),
        "reserved_attribute"
    );
    assert_eq!(
        code(update(
            json!({"UpdateExpression":"SET b = :txpv","ExpressionAttributeValues":{":txpv":1}})
        )),
        "reserved_placeholder"
    );
    assert_eq!(
        code(
            json!({"txId":"t","requests":[{"ConditionCheck":{"TableName":"Accounts","Key":{"PK":"a"}}}]})
        ),
        "invalid_request"
    );
    assert_eq!(
        code(
            json!({"txId":"t","requests":[{"Put":{"TableName":"Accounts","Item":{"PK":"a","_txLock":"x"}}}]})
        ),
        "reserved_attribute"
    );
}

/// A message of one request.
fn one(request: Value) -> Value {
    json!({"txId":"t","requests":[request]})
}

fn assert_codes(cases: &[(Value, &str)]) {
    for (body, expected) in cases {
        assert_eq!(code(body.clone()), *expected, "{body}");
    }
}

#[test]
fn message_level_checks() {
    assert_eq!(
        parse_message(b"{not json", &allowed()).map_err(|r| r.code.to_string()),
        Err("bad_json".to_string())
    );
    assert_codes(&[
        (json!({"txId":5,"requests":[]}), "invalid_tx_id"),
        (json!({"txId":null,"requests":[]}), "invalid_tx_id"),
        (json!({"txId":"","requests":[]}), "invalid_tx_id"),
        (json!({"txId":"a#b","requests":[]}), "invalid_tx_id"),
        (
            json!({"txId":"x".repeat(MAX_TX_ID_LEN + 1),"requests":[]}),
            "invalid_tx_id",
        ),
        (
            json!({"txId":"x".repeat(MAX_TX_ID_LEN),"requests":[]}),
            "no_requests",
        ),
        (json!({"txId":"t"}), "no_requests"),
        (json!({"txId":"t","requests":{}}), "no_requests"),
        (json!({"txId":"t","requests":null}), "no_requests"),
        (
            json!({"txId":"t","requests":vec![1; MAX_REQUESTS + 1]}),
            "too_many_requests",
        ),
        (
            json!({"txId":"t","extra":1,"requests":[{"Delete":{"TableName":"Accounts","Key":{"PK":"a"}}}]}),
            "ok",
        ),
    ]);
}

#[test]
fn a_request_is_one_known_kind_with_an_object_of_known_fields() {
    assert_codes(&[
        (one(json!(1)), "invalid_request"),
        (one(json!({})), "invalid_request"),
        (one(json!("Put")), "invalid_request"),
        (
            one(json!({"Upsert":{"TableName":"Accounts"}})),
            "invalid_request",
        ),
        (one(json!({"Put":["Accounts"]})), "invalid_request"),
        (one(json!({"Put":"Accounts"})), "invalid_request"),
        (
            one(json!({"Put":{"TableName":"Accounts","Item":{"PK":"a"}},
                "Delete":{"TableName":"Accounts","Key":{"PK":"a"}}})),
            "invalid_request",
        ),
        (update(json!({"Foo":1})), "invalid_request"),
        // Unknown fields are checked before the allow-list,
        (
            update(json!({"Foo":1,"TableName":"Other"})),
            "invalid_request",
        ),
        // the allow-list before the other fields' shapes and reserved names.
        (
            update(json!({"TableName":"Other","Key":"x"})),
            "table_not_allowed",
        ),
        (
            update(json!({"TableName":"Other","Key":{"_txLock":"a"}})),
            "table_not_allowed",
        ),
        (
            update(json!({"TableName":"Other","ExpressionAttributeValues":[1]})),
            "table_not_allowed",
        ),
        (update(json!({"TableName":5})), "invalid_request"),
        (update(json!({"TableName":"  "})), "invalid_request"),
        (update(json!({"TableName":null})), "invalid_request"),
    ]);
}

#[test]
fn fields_have_their_shapes_and_null_is_not_absent() {
    assert_codes(&[
        (update(json!({"Key":null})), "invalid_request"),
        (update(json!({"Key":[1]})), "invalid_request"),
        (
            update(json!({"ConditionExpression":null})),
            "invalid_request",
        ),
        (update(json!({"ConditionExpression":""})), "invalid_request"),
        (update(json!({"UpdateExpression":5})), "invalid_request"),
        (
            update(json!({"ExpressionAttributeNames":{"#b":1}})),
            "invalid_request",
        ),
        (
            update(json!({"ExpressionAttributeNames":["#b"]})),
            "invalid_request",
        ),
        (
            update(json!({"ExpressionAttributeValues":[1]})),
            "invalid_request",
        ),
        (
            update(json!({"ExpressionAttributeValues":null})),
            "invalid_request",
        ),
        (
            one(json!({"Put":{"TableName":"Accounts","Item":{"PK":"a"},"Key":null}})),
            "invalid_request",
        ),
        (
            one(json!({"Put":{"TableName":"Accounts","Item":null}})),
            "invalid_request",
        ),
        (
            one(json!({"Delete":{"TableName":"Accounts","Key":null}})),
            "invalid_request",
        ),
    ]);
}

#[test]
fn each_kind_has_its_parts() {
    let put = |extra: Value| {
        let mut body = json!({"TableName":"Accounts","Item":{"PK":"a"}});
        if let (Some(b), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(extra.clone());
        }
        one(json!({ "Put": body }))
    };
    assert_codes(&[
        (update(json!({"Item":{"PK":"a"}})), "invalid_request"),
        (update(json!({"Item":{"_txLock":"a"}})), "invalid_request"),
        (
            one(json!({"Update":{"TableName":"Accounts","Key":{"PK":"a"}}})),
            "invalid_request",
        ),
        (put(json!({"Key":{"PK":"a"}})), "invalid_request"),
        (
            put(json!({"UpdateExpression":"SET a = :a"})),
            "invalid_request",
        ),
        (
            one(json!({"Put":{"TableName":"Accounts"}})),
            "invalid_request",
        ),
        (
            one(json!({"Delete":{"TableName":"Accounts","Key":{"PK":"a"},"Item":{"PK":"a"}}})),
            "invalid_request",
        ),
        (
            one(
                json!({"Delete":{"TableName":"Accounts","Key":{"PK":"a"},"UpdateExpression":"SET a = :a"}}),
            ),
            "invalid_request",
        ),
        (
            one(
                json!({"ConditionCheck":{"TableName":"Accounts","Key":{"PK":"a"},"ConditionExpression":"   "}}),
            ),
            "invalid_request",
        ),
        (
            put(json!({"ConditionExpression":"attribute_not_exists(PK)"})),
            "ok",
        ),
        (
            one(json!({"Delete":{"TableName":"Accounts","Key":{"PK":"a"}}})),
            "ok",
        ),
        (
            one(
                json!({"ConditionCheck":{"TableName":"Accounts","Key":{"PK":"a"},"ConditionExpression":"attribute_exists(PK)"}}),
            ),
            "ok",
        ),
    ]);
}

#[test]
fn reserved_attributes_and_placeholders_in_their_order() {
    let names = |map: Value| update(json!({ "ExpressionAttributeNames": map }));
    assert_codes(&[
        (
            one(json!({"Delete":{"TableName":"Accounts","Key":{"_txLock":"a"}}})),
            "reserved_attribute",
        ),
        (
            one(json!({"Delete":{"TableName":"Accounts","Key":{"PK":"a"},
                "ExpressionAttributeNames":{"#a":"ok","#txpb":"x"}}})),
            "reserved_placeholder",
        ),
        (names(json!({"b":"x"})), "reserved_placeholder"),
        // Per entry of the names map (in key order): the attribute, then the placeholder.
        (names(json!({"#a":"_txX","#txp":"y"})), "reserved_attribute"),
        (names(json!({"#a":"x","#txp":"_tx"})), "reserved_attribute"),
        (names(json!({"#a":"x","#txp":"y"})), "reserved_placeholder"),
        (
            update(json!({"ExpressionAttributeValues":{"v":1}})),
            "reserved_placeholder",
        ),
        (
            update(json!({"UpdateExpression":"SET #txpz = :v"})),
            "reserved_placeholder",
        ),
        (
            update(json!({"ConditionExpression":"attribute_exists(_txVer)"})),
            "reserved_attribute",
        ),
        // The values map before the expressions.
        (
            update(
                json!({"UpdateExpression":"SET _txVer = :txpv","ExpressionAttributeValues":{":txpv":1}}),
            ),
            "reserved_placeholder",
        ),
    ]);
}

#[test]
fn a_rejection_names_its_request() {
    let body = json!({"txId":"t","requests":[
        {"Delete":{"TableName":"Accounts","Key":{"PK":"a"}}},
        {"Delete":{"TableName":"Other","Key":{"PK":"b"}}}]});
    assert_eq!(code(body), "table_not_allowed");
    let body = json!({"txId":"t","requests":[
        {"Delete":{"TableName":"Accounts","Key":{"PK":"a"}}}, {"Delete":{"TableName":"Accounts"}}]});
    let r = parse_message(body.to_string().as_bytes(), &allowed()).expect_err("refused");
    assert!(r.message.starts_with("request 1: "), "{r}");
}

/// The requests are stored as canonical JSON: the same text for the same message (the
/// `txId` idempotency check compares it).
#[test]
fn requests_json_is_canonical() {
    let body = r#"{"txId":"t","requests":[{"Update":{"UpdateExpression":"SET b = :v","TableName":"Accounts","Key":{"SK":2,"PK":"a"},"ExpressionAttributeValues":{":v":{"y":[1,2.5,"x"],"a":null}}}}]}"#;
    let message = parse_message(body.as_bytes(), &allowed()).expect("valid");
    assert_eq!(
        message.requests_json(),
        r#"[{"Update":{"ExpressionAttributeValues":{":v":{"a":null,"y":[1,2.5,"x"]}},"Key":{"PK":"a","SK":2},"TableName":"Accounts","UpdateExpression":"SET b = :v"}}]"#
    );
}

/// Recorded requests are re-parsed for their shape only: a rule tightened by an upgrade (as
/// the expression parser was) must not leave a record written before it undrivable.
#[test]
fn recorded_requests_are_checked_for_their_shape_only() {
    // An expression today's parser refuses, recorded by a version that accepted it.
    let raw = vec![json!({"Update":{"TableName":"Accounts","Key":{"PK":"a"},
        "UpdateExpression":"SET #b = #b + :d) OR (1 = 1","ExpressionAttributeNames":{"#b":"b"},
        "ExpressionAttributeValues":{":d":1}}})];
    let body = json!({"txId":"t","requests":raw.clone()});
    assert_eq!(
        code(body),
        "malformed_expression",
        "a new message is refused"
    );
    let recorded = super::recorded_requests(&raw).expect("a recorded request still parses");
    assert_eq!(recorded[0].table, "Accounts");
    // Its shape is still required.
    let shapeless = vec![json!({"Update":{"TableName":"Accounts","Key":{"PK":"a"}}})];
    assert!(super::recorded_requests(&shapeless).is_err());
}
