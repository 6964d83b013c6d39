//! The dead-letter table holds dead letters only: the ratchet's lifetime ledger lives in a
//! ledger table of its own (`RATCHET_LEDGER_TABLE`), and a ledger item an earlier version kept
//! among the dead letters is moved out, its promises kept, with no operator step.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::client;
use dev_testing::interleave::{At, Interleaving};
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once::ratchet::Ratchet;
use dynamodb_exactly_once::{Deadline, RecordResult, RejectionCode};
use dynamodb_exactly_once_lambda::settings::functions::RATCHET_WRITER;
use dynamodb_exactly_once_lambda::{writer_from_env, Writer};
use serde_json::json;

use crate::common::*;

const TABLES: [&str; 3] = ["RatchetTable", "DeadLetterTable", "RatchetLedgerTable"];

/// The ledger item of `ratchet_table` (in either table).
fn ledger_key(ratchet_table: &str) -> AttributeValue {
    AttributeValue::S(format!("ratchet-writer|lifetimes|{ratchet_table}"))
}

/// A ratchet writer built from the environment as the function is, with tombstone lifetime
/// `lifetime` (s), on `tables` (the stack's variables).
async fn writer(
    client: Client,
    tables: &BTreeMap<String, String>,
    lifetime: u64,
) -> Writer<Ratchet> {
    std::env::set_var("RATCHET_TABLE", &tables["RatchetTable"]);
    std::env::set_var("RATCHET_DEAD_LETTER_TABLE", &tables["DeadLetterTable"]);
    std::env::set_var("RATCHET_LEDGER_TABLE", &tables["RatchetLedgerTable"]);
    std::env::set_var("RATCHET_TOMBSTONE_TTL_SECONDS", lifetime.to_string());
    writer_from_env::<Ratchet>(client, RATCHET_WRITER)
        .await
        .expect("settings")
}

/// Every item's `Id` in `table`.
async fn ids(client: &Client, table: &str) -> Vec<String> {
    let page = client
        .scan()
        .table_name(table)
        .consistent_read(true)
        .send()
        .await
        .expect("scan");
    let mut ids: Vec<String> = page
        .items
        .unwrap_or_default()
        .iter()
        .filter_map(|i| i.get("Id").and_then(|v| v.as_s().ok()).cloned())
        .collect();
    ids.sort();
    ids
}

/// The ledger item an earlier version kept in the dead-letter table: lifetime 60 s promised
/// until `promise`, at version `version`.
async fn put_legacy(
    client: &Client,
    tables: &BTreeMap<String, String>,
    promise: u64,
    version: u64,
) {
    client
        .put_item()
        .table_name(&tables["DeadLetterTable"])
        .item("Id", ledger_key(&tables["RatchetTable"]))
        .item("LedgerVersion", AttributeValue::N(version.to_string()))
        .item("Lifetime_60", AttributeValue::N(promise.to_string()))
        .send()
        .await
        .expect("legacy ledger item");
}

/// The ledger table's promises (lifetime attribute -> epoch s).
async fn promises(client: &Client, tables: &BTreeMap<String, String>) -> BTreeMap<String, u64> {
    let item = client
        .get_item()
        .table_name(&tables["RatchetLedgerTable"])
        .key("Id", ledger_key(&tables["RatchetTable"]))
        .consistent_read(true)
        .send()
        .await
        .expect("get")
        .item
        .unwrap_or_default();
    item.iter()
        .filter(|(name, _)| name.starts_with("Lifetime_"))
        .filter_map(|(name, v)| Some((name.clone(), v.as_n().ok()?.parse().ok()?)))
        .collect()
}

#[tokio::test]
async fn after_a_valid_workload_and_its_redelivery_the_dead_letter_table_holds_nothing() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let w = writer(client.clone(), &tables, 600).await;
    // Given a valid workload of puts and deletes over three items ...
    let bodies = [
        put("a", "x", 1, json!({"v": 1})),
        put("b", "x", 1, json!({"v": 1})),
        delete("a", "x", 2),
        put("c", "x", 3, json!({"v": 3})),
    ];
    let batch = sqs_batch(&bodies, 0);
    // ... when it is delivered, and then delivered again ...
    for _ in 0..2 {
        let report = w.handle_batch(&batch, Deadline::none()).await;
        assert!(
            report
                .results
                .iter()
                .all(|r| !matches!(r, RecordResult::Rejected(_) | RecordResult::Failed(_))),
            "{:?}",
            report
                .results
                .iter()
                .map(RecordResult::label)
                .collect::<Vec<_>>()
        );
    }
    // ... then the dead-letter table holds nothing, and the ledger is in its own table.
    assert_eq!(
        ids(&client, &tables["DeadLetterTable"]).await,
        Vec::<String>::new()
    );
    assert_eq!(
        ids(&client, &tables["RatchetLedgerTable"]).await,
        [format!(
            "ratchet-writer|lifetimes|{}",
            tables["RatchetTable"]
        )]
    );
}

#[tokio::test]
async fn a_ledger_kept_among_the_dead_letters_by_an_earlier_version_is_moved_with_its_promises() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let now = epoch_millis() / 1000;
    // Given an earlier version's writers promised tombstones of 60 s in the dead-letter table ...
    put_legacy(&client, &tables, now + 1800, 7).await;
    // ... when this version's writer, its lifetime raised to 600 s, takes a batch ...
    let w = writer(client.clone(), &tables, 600).await;
    let mut batch = sqs_batch(&[put("u", "x", 1, json!({"v": 1}))], 0);
    batch.records[0].position.arrived_at_ms = Some(epoch_millis() - 100_000);
    let report = w.handle_batch(&batch, Deadline::none()).await;
    // ... then the promise moved to the ledger table with its own, the dead letters hold no
    // ledger, and the 60 s guard still holds (a put 100 s old is refused, not applied: its
    // dead letter is the table's only item).
    let letters = ids(&client, &tables["DeadLetterTable"]).await;
    assert!(
        letters.len() == 1 && !letters[0].starts_with("ratchet-writer|lifetimes|"),
        "{letters:?}"
    );
    let kept = promises(&client, &tables).await;
    assert_eq!(kept.get("Lifetime_60"), Some(&(now + 1800)), "{kept:?}");
    assert!(kept.contains_key("Lifetime_600"), "{kept:?}");
    let code = match &report.results[0] {
        RecordResult::Rejected(reason) => Some(reason.code),
        _ => None,
    };
    assert_eq!(code, Some(RejectionCode::TooOld));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_ledger_renewed_while_it_is_moved_is_kept_and_moved_at_the_next_renewal() {
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &TABLES).await;
    let now = epoch_millis() / 1000;
    put_legacy(&setup, &tables, now + 600, 1).await;
    // Given a writer held just before it deletes the legacy item it has moved ...
    let il = Interleaving::new();
    let w = writer(il.client("A", 1), &tables, 600).await;
    il.pause_before("A", At::op("DeleteItem").table(&tables["DeadLetterTable"]));
    let batch = sqs_batch(&[put("v", "x", 1, json!({"v": 1}))], 0);
    let task = tokio::spawn(async move { w.handle_batch(&batch, Deadline::none()).await });
    il.wait_paused("A")
        .await
        .expect("A paused before its DeleteItem");
    // ... when a writer of the earlier version renews it meanwhile (a rolling deploy) ...
    put_legacy(&setup, &tables, now + 3600, 2).await;
    il.release("A");
    let report = task.await.expect("task");
    assert_eq!(report.results[0].label(), "applied");
    // ... then the renewed promise is not deleted unseen ...
    assert_eq!(
        ids(&setup, &tables["DeadLetterTable"]).await,
        [format!(
            "ratchet-writer|lifetimes|{}",
            tables["RatchetTable"]
        )]
    );
    // ... and the next renewal (a new process) moves it, the later promise kept.
    let next = writer(setup.clone(), &tables, 600).await;
    let batch = sqs_batch(&[put("w", "x", 1, json!({"v": 1}))], 0);
    assert_eq!(
        next.handle_batch(&batch, Deadline::none()).await.results[0].label(),
        "applied"
    );
    assert_eq!(
        ids(&setup, &tables["DeadLetterTable"]).await,
        Vec::<String>::new()
    );
    assert_eq!(
        promises(&setup, &tables).await.get("Lifetime_60"),
        Some(&(now + 3600))
    );
}
