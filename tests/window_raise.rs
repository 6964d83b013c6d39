//! Raising a window or a lifetime alone: the age guard comes from what the stored
//! state was written with, so a redelivery older than the state still covers is refused
//! (`too_old`) instead of counted twice or reviving an item; no operator step.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use crate::counter::{counters, writer_on, TABLES};
use dev_testing::client;
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once::counter::{Counter, CounterOutcome};
use dynamodb_exactly_once::ratchet::{LifetimeLedger, RatchetOutcome};
use dynamodb_exactly_once::ItemKey;
use dynamodb_exactly_once::{Deadline, RecordResult, RejectionCode};
use dynamodb_exactly_once_lambda::Writer;
use serde_json::json;

/// One counter record of key `k` (adding 1 to `n` of item a|d) that reached its source at
/// `arrived` (epoch s): its label, and its rejection code if it was kept.
async fn deliver(w: &Writer<Counter>, k: &str, arrived: u64) -> (String, Option<RejectionCode>) {
    let body = json!({"key":{"PK":"a","SK":"d"},"add":{"n":1},"idempotencyKey":k});
    let mut batch = sqs_batch(&[body], 0);
    batch.records[0].position.arrived_at_ms = Some(arrived * 1000);
    let report = w.handle_batch(&batch, Deadline::none()).await;
    let code = match &report.results[0] {
        RecordResult::Rejected(reason) => Some(reason.code),
        _ => None,
    };
    (report.results[0].label().to_string(), code)
}

#[tokio::test]
async fn raising_the_counter_window_from_3_to_30_s_alone_never_counts_a_key_twice() {
    let client = client();
    let tables: BTreeMap<String, String> = dev_testing::template_tables(&client, &TABLES).await;
    let now = epoch_millis() / 1000;
    let then = now - 10;
    let window = |secs: u64| {
        move |c: dynamodb_exactly_once::counter::CounterConfigBuilder| {
            c.window(Duration::from_secs(secs))
        }
    };
    let narrow = writer_on(
        client.clone(),
        &tables,
        window(3),
        Some(Arc::new(AtomicU64::new(then))),
    );
    let wide = writer_on(
        client.clone(),
        &tables,
        window(30),
        Some(Arc::new(AtomicU64::new(now))),
    );
    // Given key k counted 10 s ago under a 3 s window (its bucket is kept at most 6 s) ...
    // (applied by the protocol at its clock: the Lambda edge's own age check uses the real one)
    let body = json!({"key":{"PK":"a","SK":"d"},"add":{"n":1},"idempotencyKey":"k"});
    let k = narrow
        .protocol()
        .parse_record(body.to_string().as_bytes())
        .expect("valid record");
    let applied = narrow.protocol().add(&k.arrived_at(then * 1000)).await;
    assert_eq!(applied.expect("added"), CounterOutcome::Applied);
    // ... and the window raised to 30 s alone, another key rolling k's bucket out ...
    assert_eq!(deliver(&wide, "other", now).await.0, "applied");
    // ... when k is delivered again with its first arrival (10 s old: inside the new window),
    // then it is kept as too old, not counted twice.
    let (label, code) = deliver(&wide, "k", then).await;
    assert_eq!(
        (label.as_str(), code),
        ("invalid", Some(RejectionCode::TooOld))
    );
    assert_eq!(
        counters(&client, &tables["CounterTable"]).await["a|d"]["n"],
        2
    );
    // A key the item still holds stays a duplicate, whenever its record arrived.
    assert_eq!(deliver(&wide, "other", then).await.0, "duplicate");
    // A record that arrived after the removal is counted as usual.
    assert_eq!(deliver(&wide, "late", now).await.0, "applied");
    assert_eq!(
        counters(&client, &tables["CounterTable"]).await["a|d"]["n"],
        3
    );
}

/// An expired tombstone is deleted by TTL, so nothing of it says which lifetime it was written
/// with: the writers' lifetime ledger (in its own table) does.
#[tokio::test]
async fn raising_the_tombstone_lifetime_alone_never_revives_a_deleted_item() {
    let client = client();
    let tables = dev_testing::template_tables(
        &client,
        &["RatchetTable", "DeadLetterTable", "RatchetLedgerTable"],
    )
    .await;
    let ledger = LifetimeLedger::new(&tables["RatchetLedgerTable"], &tables["RatchetTable"]);
    let lifetime = |secs: u64| {
        let ledger = ledger.clone();
        move |c: dynamodb_exactly_once::ratchet::RatchetConfigBuilder| {
            c.tombstone_ttl(Duration::from_secs(secs))
                .lifetime_ledger(ledger)
        }
    };
    let short = ratchet_writer_with(client.clone(), &tables, lifetime(60));
    let long = ratchet_writer_with(client.clone(), &tables, lifetime(600));
    // Given item u deleted under a 60 s tombstone lifetime, its tombstone expired and deleted by
    // TTL (done here by hand, as DynamoDB's TTL process would) ...
    assert_eq!(
        write_one(&short, delete("u", "x", 2)).await,
        RatchetOutcome::Applied
    );
    let key = ItemKey::from_json(&json!({"PK":"u","SK":"x"})).expect("key");
    client
        .delete_item()
        .table_name(&tables["RatchetTable"])
        .set_key(Some(key.to_item().expect("key item")))
        .send()
        .await
        .expect("the tombstone deleted");
    // ... when the lifetime is raised to 600 s alone and an older put that reached its source
    // 100 s ago (before the delete) is delivered ...
    let mut batch = sqs_batch(&[put("u", "x", 1, json!({"v": 1}))], 0);
    batch.records[0].position.arrived_at_ms = Some(epoch_millis() - 100_000);
    let report = long.handle_batch(&batch, Deadline::none()).await;
    // ... then it is kept as too old, not applied (which would revive u).
    let code = match &report.results[0] {
        RecordResult::Rejected(reason) => Some(reason.code),
        _ => None,
    };
    assert_eq!(
        code,
        Some(RejectionCode::TooOld),
        "{:?}",
        report.results[0].label()
    );
    assert!(
        scan(&client, &tables["RatchetTable"]).await.is_empty(),
        "u stays deleted"
    );
    // A put inside the shorter lifetime is applied as usual.
    let mut batch = sqs_batch(&[put("v", "x", 1, json!({"v": 1}))], 0);
    batch.records[0].position.arrived_at_ms = Some(epoch_millis() - 10_000);
    let report = long.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(report.results[0].label(), "applied");
}

#[tokio::test]
async fn a_ratchet_whose_lifetime_ledger_cannot_be_written_writes_no_tombstone() {
    let client = client();
    let (_, tables) = ratchet_writer(client.clone()).await;
    let missing = LifetimeLedger::new("no-such-table", &tables["RatchetTable"]);
    let w = ratchet_writer_with(client.clone(), &tables, |c| c.lifetime_ledger(missing));
    // Given a ledger DynamoDB refuses, when a delete is delivered, then it fails (delivered
    // again) and no tombstone is written that no promise covers.
    let report = w
        .handle_batch(&sqs_batch(&[delete("u", "x", 2)], 0), Deadline::none())
        .await;
    assert_eq!(report.results[0].label(), "failed");
    assert!(scan(&client, &tables["RatchetTable"]).await.is_empty());
}
