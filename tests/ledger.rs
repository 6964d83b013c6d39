//! The dead-letter table holds dead letters only: the ratchet's lifetime ledger lives in a
//! ledger table of its own (`RATCHET_LEDGER_TABLE`).

use std::collections::BTreeMap;

use aws_sdk_dynamodb::Client;
use dev_testing::client;
use dynamodb_exactly_once::ratchet::Ratchet;
use dynamodb_exactly_once::{Deadline, RecordResult};
use dynamodb_exactly_once_lambda::settings::functions::RATCHET_WRITER;
use dynamodb_exactly_once_lambda::{writer_from_env, Writer};
use serde_json::json;

use crate::common::*;

const TABLES: [&str; 3] = ["RatchetTable", "DeadLetterTable", "RatchetLedgerTable"];

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
