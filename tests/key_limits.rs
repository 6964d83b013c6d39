//! History tables key each row by the item's canonical key (the JSON of its key attributes),
//! which is longer than the key itself: a key DynamoDB accepts in the latest table can exceed
//! its 2048-byte partition key limit as a history key. Refused before any write, as
//! `invalid_key`, never sent (a refused row would fail its whole `BatchWriteItem`).

use std::collections::BTreeMap;
use std::time::Duration;

use dynamo_testing::client;
use dynamodb_exactly_once::ddb::ItemKey;
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
use dynamodb_exactly_once::versioning::{Revision, Versioning, VersioningConfig};
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::Writer;
use serde_json::json;

use crate::common::{scan, sqs_batch};

fn history_writer(
    client: aws_sdk_dynamodb::Client,
    tables: &BTreeMap<String, String>,
) -> Writer<Ratchet> {
    let mut config = RatchetConfig::new(&tables["RatchetTable"]);
    config.history_table = Some(tables["RatchetHistoryTable"].clone());
    Writer::new(
        "ratchet-writer",
        Ratchet::try_new(client.clone(), config).expect("valid configuration"),
        DeadLetters::new(client, &tables["DeadLetterTable"], "ratchet-writer"),
    )
    .with_deadline_margin(Duration::from_secs(1))
}

#[tokio::test]
async fn history_keys_over_the_partition_key_limit_are_refused_before_the_write() {
    let client = client();
    let tables = dynamo_testing::template_tables(
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
    let writer = history_writer(client.clone(), &tables);
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
    let kept = writer.dead_letters.list().await.expect("dead letters");
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
    let store = Versioning::try_new(
        client.clone(),
        VersioningConfig::new(&tables["VersionedTable"], &tables["VersionedHistoryTable"]),
    )
    .expect("valid configuration");
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
