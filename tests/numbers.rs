//! Numbers as DynamoDB has them, through every writer: a 20-digit numeric key
//! (`18446744073709551617`, 2^64 + 1) and a 38-digit amount are stored exactly, never refused
//! and never rounded through `f64`; a number DynamoDB itself refuses is an `invalid_number`
//! rejection naming the rule.

use crate::txn::env;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::client;
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::document::{Document, DocumentConfig};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
use dynamodb_exactly_once::txn::{Coordinator, TxOutcome};
use dynamodb_exactly_once::versioning::VersioningConfig;
use dynamodb_exactly_once::versioning::{Latest, Revision, VersionOutcome, Versioning};
use dynamodb_exactly_once::{Deadline, ItemKey, Protocol, RecordResult, RejectionCode};
use serde_json::{json, Value};

/// 2^64 + 1: beyond every 64-bit integer, and not an `f64`.
const KEY: &str = "18446744073709551617";
/// 38 significant digits, DynamoDB's precision.
const AMOUNT: &str = "12345678901234567890.123456789012345678";

/// A JSON number holding `text` exactly.
fn number(text: &str) -> Value {
    Value::Number(text.parse().expect("a JSON number"))
}

/// The raw item of a table whose partition key `PK` is a number.
async fn raw(client: &Client, table: &str, pk: &str) -> HashMap<String, AttributeValue> {
    client
        .get_item()
        .table_name(table)
        .key("PK", AttributeValue::N(pk.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get")
        .item
        .unwrap_or_else(|| panic!("no item {pk} in {table}"))
}

/// Parse and apply raw bodies (each body's text is kept: the numbers are spelled in it).
async fn apply<P: Protocol>(protocol: &P, bodies: &[String]) -> Vec<String> {
    let mut labels = vec![String::new(); bodies.len()];
    let mut records = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        match protocol.parse(body.as_bytes()) {
            Ok(record) => records.push((i, record)),
            Err(r) => labels[i] = format!("rejected {}: {}", r.code.as_str(), r.message),
        }
    }
    for (i, result) in protocol.apply(records, Deadline::none()).await.results {
        labels[i] = match result {
            RecordResult::Rejected(r) => format!("rejected {}: {}", r.code.as_str(), r.message),
            other => other.label().to_string(),
        };
    }
    labels
}

fn n(text: &str) -> AttributeValue {
    AttributeValue::N(text.into())
}

#[tokio::test]
async fn the_ratchet_stores_a_20_digit_key_and_a_38_digit_amount_exactly() {
    let c = client();
    let table = crate::common::numeric_key_table(&c, "NumRatchet", "PK").await;
    let ratchet = Ratchet::new(
        c.clone(),
        RatchetConfig::builder(&table).build().expect("config"),
    );
    let body = format!(
        r#"{{"op":"put","key":{{"PK":{KEY}}},"ts":1,"item":{{"amount":{AMOUNT},"l":[{AMOUNT}]}}}}"#
    );
    assert_eq!(apply(&ratchet, &[body]).await, ["applied"]);
    let item = raw(&c, &table, KEY).await;
    assert_eq!(item["amount"], n(AMOUNT));
    assert_eq!(item["l"], AttributeValue::L(vec![n(AMOUNT)]));
}

#[tokio::test]
async fn the_counter_adds_38_digit_deltas_exactly_on_a_20_digit_key() {
    let c = client();
    let table = crate::common::numeric_key_table(&c, "NumCounter", "PK").await;
    let counter = Counter::new(
        c.clone(),
        CounterConfig::builder(&table)
            .build()
            .expect("valid configuration"),
    );
    let record = |id: &str, delta: &str| {
        format!(r#"{{"key":{{"PK":{KEY}}},"add":{{"n":{delta}}},"idempotencyKey":"{id}"}}"#)
    };
    // Two deltas in one batch (summed in process), then the amount again in the next.
    let labels = apply(
        &counter,
        &[
            record("a", "12345678901234567890.123456789012345677"),
            record("b", "0.000000000000000001"),
        ],
    )
    .await;
    assert_eq!(labels, ["applied", "applied"]);
    assert_eq!(raw(&c, &table, KEY).await["n"], n(AMOUNT));
    assert_eq!(apply(&counter, &[record("c", AMOUNT)]).await, ["applied"]);
    let twice = "24691357802469135780.246913578024691356";
    assert_eq!(raw(&c, &table, KEY).await["n"], n(twice));
}

#[tokio::test]
async fn the_document_writer_stores_a_20_digit_key_and_a_38_digit_amount_exactly() {
    let c = client();
    let table = crate::common::numeric_key_table(&c, "NumDocument", "PK").await;
    let docs = Document::new(
        c.clone(),
        DocumentConfig::builder(&table).build().expect("config"),
    );
    let bodies = [
        format!(r#"{{"op":"replace","key":{{"PK":{KEY}}},"document":{{"amount":{AMOUNT}}}}}"#),
        format!(r#"{{"op":"list_append","key":{{"PK":{KEY}}},"path":"l","values":[{AMOUNT}]}}"#),
        format!(r#"{{"op":"set_add","key":{{"PK":{KEY}}},"path":"s","values":[{AMOUNT},1]}}"#),
    ];
    assert_eq!(apply(&docs, &bodies).await, ["applied"; 3]);
    let item = raw(&c, &table, KEY).await;
    assert_eq!(item["amount"], n(AMOUNT));
    assert_eq!(item["l"], AttributeValue::L(vec![n(AMOUNT)]));
    let key = ItemKey::from_json(&json!({"PK": number(KEY)})).expect("key");
    let read = docs.get_json(&key).await.expect("get").expect("document");
    assert_eq!(read["amount"], number(AMOUNT));
    assert_eq!(read["PK"], number(KEY));
}

#[tokio::test]
async fn versioned_writes_store_a_20_digit_key_and_a_38_digit_amount_exactly() {
    let c = client();
    let table = crate::common::numeric_key_table(&c, "NumVersioned", "PK").await;
    let history = dev_testing::template_tables(&c, &["VersionedHistoryTable"]).await
        ["VersionedHistoryTable"]
        .clone();
    let store = Versioning::new(
        c.clone(),
        VersioningConfig::builder(&table, &history)
            .build()
            .expect("config"),
    );
    let key = ItemKey::from_json(&json!({"PK": number(KEY)})).expect("key");
    let change = Revision::create(&key, json!({"amount": number(AMOUNT)})).expect("revision");
    assert!(matches!(
        store.apply(&change).await.expect("apply"),
        VersionOutcome::Written { version: 1 }
    ));
    let item = raw(&c, &table, KEY).await;
    assert_eq!(item["amount"], n(AMOUNT));
    let Latest::Live(latest) = store.get(&key).await.expect("get") else {
        panic!("expected a live item");
    };
    assert_eq!(latest.item["amount"], number(AMOUNT));
}

#[tokio::test]
async fn the_coordinator_commits_a_38_digit_amount_on_a_20_digit_key_exactly() {
    let base = client();
    let env = env::Env::new(&base).await.without_heartbeats();
    let table = crate::common::numeric_key_table(&base, "NumAccounts", "PK").await;
    let config = env
        .builder()
        .allowed_tables([env.accounts(), table.as_str()])
        .build()
        .expect("config");
    let c = Coordinator::new(client(), config);
    let body = format!(
        r##"{{"txId":"big","requests":[
            {{"Put":{{"TableName":"{table}","Item":{{"PK":{KEY},"amount":{AMOUNT}}}}}}},
            {{"Update":{{"TableName":"{table}","Key":{{"PK":1}},"UpdateExpression":"ADD #b :a",
              "ExpressionAttributeNames":{{"#b":"bal"}},"ExpressionAttributeValues":{{":a":{AMOUNT}}}}}}}
        ]}}"##
    );
    let message = c.parse_message(body.as_bytes()).expect("valid message");
    let report = c.run(&message, Deadline::none()).await.expect("run");
    assert_eq!(report.outcome, TxOutcome::Committed);
    assert_eq!(raw(&base, &table, KEY).await["amount"], n(AMOUNT));
    assert_eq!(raw(&base, &table, "1").await["bal"], n(AMOUNT));
}

#[tokio::test]
async fn numbers_dynamodb_refuses_are_invalid_number_naming_the_rule() {
    let c = client();
    let table = crate::common::numeric_key_table(&c, "NumRefused", "PK").await;
    let docs = Document::new(
        c.clone(),
        DocumentConfig::builder(&table).build().expect("config"),
    );
    let too_precise = "1234567890123456789012345678901234567890";
    for (value, rule) in [
        (too_precise, "at most 38"),
        ("1e126", "range"),
        ("1e-131", "range"),
    ] {
        let body =
            format!(r#"{{"op":"list_append","key":{{"PK":1}},"path":"l","values":[{value}]}}"#);
        let label = apply(&docs, &[body]).await.remove(0);
        let code = RejectionCode::InvalidNumber.as_str();
        assert!(label.starts_with(&format!("rejected {code}")), "{label}");
        assert!(label.contains(rule), "{label}");
    }
}
