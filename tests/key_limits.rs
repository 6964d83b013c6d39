//! History tables key each row by the item's canonical key (the JSON of its key attributes),
//! which is longer than the key itself: a key DynamoDB accepts in the latest table can exceed
//! its 2048-byte partition key limit as a history key. Refused before any write, as
//! `invalid_key`, never sent (a refused row would fail its whole `BatchWriteItem`).
//!
//! Every writer checks each key against the table's real key schema (names, types, the
//! 2,048-byte partition and 1,024-byte sort key limits, binary-keyed tables), described once
//! per process: a key the table would refuse is `invalid_key` before any write.

use dev_testing::client;
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::document::{Document, DocumentConfig};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
use dynamodb_exactly_once::versioning::{Revision, Versioning, VersioningConfig};
use dynamodb_exactly_once::{Deadline, Protocol, RecordResult};
use dynamodb_exactly_once::{ItemKey, StoreError};
use serde_json::{json, Value};

use crate::common::{scan, sqs_batch};

#[tokio::test]
async fn history_keys_over_the_partition_key_limit_are_refused_before_the_write() {
    let client = client();
    let tables = dev_testing::template_tables(
        &client,
        &[
            "RatchetTable",
            "RatchetHistoryTable",
            "DeadLetterTable",
            "VersionedTable",
            "VersionedHistoryTable",
        ],
    )
    .await;
    // Given a key within the latest table's limits (PK 1200 bytes, SK 1000) whose canonical
    // form, the history partition key, has more than 2048 bytes, next to an ordinary record.
    let writer = crate::common::ratchet_history_writer(client.clone(), &tables);
    let long = json!({"op": "put", "key": {"PK": "p".repeat(1200), "SK": "s".repeat(1000)},
        "ts": 5, "item": {"v": 1}});
    let short = json!({"op": "put", "key": {"PK": "u1", "SK": "a"}, "ts": 5, "item": {"v": 1}});
    // When both arrive in one batch
    let report = writer
        .handle_batch(&sqs_batch(&[long, short], 0), Deadline::none())
        .await;
    // Then the long one is kept as invalid_key and the ordinary one is applied: nothing is
    // reported for redelivery.
    assert!(
        report.response.failed_ids().is_empty(),
        "{:?}",
        report.summary
    );
    let kept = writer
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    let codes: Vec<&str> = kept.iter().map(|l| l.reason.code.as_str()).collect();
    let reasons: Vec<_> = kept.iter().map(|l| &l.reason).collect();
    assert_eq!(codes, ["invalid_key"], "{reasons:?}");
    assert!(scan(&client, &tables["RatchetTable"])
        .await
        .contains_key("u1|a"));
    assert_eq!(scan(&client, &tables["RatchetHistoryTable"]).await.len(), 1);

    // The versioning protocol's history has the same shape: refused when the change is built.
    let key = ItemKey::from_json(&json!({"PK": "d".repeat(2040)})).expect("a valid PK");
    let refused = Revision::create(&key, json!({"v": 1})).map(|_| ());
    let store = Versioning::new(
        client.clone(),
        VersioningConfig::builder(&tables["VersionedTable"], &tables["VersionedHistoryTable"])
            .build()
            .expect("valid configuration"),
    );
    let applied = match &refused {
        Ok(()) => Some(
            store
                .apply(&Revision::create(&key, json!({"v": 1})).expect("built"))
                .await,
        ),
        Err(_) => None,
    };
    assert_eq!(
        refused.as_ref().err().map(|r| r.code.as_str()),
        Some("invalid_key"),
        "built and applied as {applied:?}"
    );
}

// ------------------------------------------------- keys checked against the table's schema

/// A new table keyed by `PK` of type `t` alone (`S`, `N` or `B`).
async fn table_keyed_by(client: &aws_sdk_dynamodb::Client, name: &str, t: &str) -> String {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let table = format!("{}{name}", dev_testing::unique_prefix());
    client
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("PK")
                .attribute_type(ScalarAttributeType::from(t))
                .build()
                .expect("definition"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("PK")
                .key_type(KeyType::Hash)
                .build()
                .expect("schema"),
        )
        .send()
        .await
        .expect("create table");
    table
}

/// Parse and apply `bodies` as one batch: each record's label, rejections as their code.
async fn codes<P: Protocol>(protocol: &P, bodies: &[Value]) -> Vec<String> {
    let mut labels = vec![String::new(); bodies.len()];
    let mut records = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        match protocol.parse(body.to_string().as_bytes()) {
            Ok(record) => records.push((i, record)),
            Err(r) => labels[i] = r.code.as_str().to_string(),
        }
    }
    for (i, result) in protocol.apply(records, Deadline::none()).await.results {
        labels[i] = match result {
            RecordResult::Rejected(r) => r.code.as_str().to_string(),
            other => other.label().to_string(),
        };
    }
    labels
}

/// The keys a numeric-keyed, a binary-keyed and a `PK`/`SK` string table refuse: each is
/// `invalid_key` (not `rejected_by_dynamodb` after a write), next to a key that fits.
fn refused_keys(numeric: &str, binary: &str) -> Vec<(String, Value, &'static str)> {
    vec![
        (numeric.to_string(), json!({"PK": "a"}), "invalid_key"),
        (numeric.to_string(), json!({"PK": 7}), "applied"),
        (binary.to_string(), json!({"PK": "a"}), "invalid_key"),
    ]
}

#[tokio::test]
async fn every_writer_refuses_keys_its_table_would_refuse_before_writing() {
    let c = client();
    let numeric = table_keyed_by(&c, "KeyN", "N").await;
    let binary = table_keyed_by(&c, "KeyB", "B").await;
    let tables = dev_testing::template_tables(&c, &["RatchetTable"]).await;
    let pk_sk = &tables["RatchetTable"];
    let mut cases = refused_keys(&numeric, &binary);
    cases.push((
        pk_sk.clone(),
        json!({"PK": "a", "SK": "s".repeat(1100)}),
        "invalid_key",
    ));
    cases.push((pk_sk.clone(), json!({"PK": "a"}), "invalid_key"));
    for (table, key, want) in cases {
        let ratchet = Ratchet::new(
            c.clone(),
            RatchetConfig::builder(&table).build().expect("config"),
        );
        let put = json!({"op": "put", "key": key, "ts": 1, "item": {"v": 1}});
        assert_eq!(codes(&ratchet, &[put]).await, [want], "ratchet {key}");
        let counter = Counter::new(
            c.clone(),
            CounterConfig::builder(&table)
                .build()
                .expect("valid configuration"),
        );
        let add = json!({"key": key, "add": {"n": 1}, "idempotencyKey": "k"});
        assert_eq!(codes(&counter, &[add]).await, [want], "counter {key}");
        let docs = Document::new(
            c.clone(),
            DocumentConfig::builder(&table).build().expect("config"),
        );
        let append = json!({"op": "list_append", "key": key, "path": "l", "values": [1]});
        assert_eq!(codes(&docs, &[append]).await, [want], "document {key}");
    }
}

#[tokio::test]
async fn a_versioned_write_refuses_a_key_its_table_would_refuse_before_writing() {
    let c = client();
    let numeric = table_keyed_by(&c, "VerKeyN", "N").await;
    let tables = dev_testing::template_tables(&c, &["VersionedHistoryTable"]).await;
    let store = Versioning::new(
        c.clone(),
        VersioningConfig::builder(&numeric, &tables["VersionedHistoryTable"])
            .build()
            .expect("valid configuration"),
    );
    let key = ItemKey::from_json(&json!({"PK": "a"})).expect("key");
    let change = Revision::create(&key, json!({"v": 1})).expect("revision");
    match store.apply(&change).await {
        Err(StoreError::InvalidKey(reason)) => assert!(reason.contains("has it as N"), "{reason}"),
        other => panic!("expected invalid_key, got {other:?}"),
    }
}
