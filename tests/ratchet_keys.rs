//! Keys checked against DynamoDB's limits before the write, in history mode too: the history
//! table's partition key is the item's canonical key (`{"PK":…,"SK":…}`), which can exceed the
//! 2,048 bytes a partition key may have although each key attribute is within its own limit.
//! Such a record is kept (`invalid_key`); the other records of its batch are applied.

use crate::common;

use std::time::Duration;

use common::*;
use dynamo_testing::{client, template_tables};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
use dynamodb_exactly_once::{Deadline, RecordResult, RejectionCode};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::Writer;
use serde_json::json;

#[tokio::test]
async fn a_history_key_over_the_partition_key_limit_is_kept_and_its_batch_applied() {
    let c = client();
    let tables = template_tables(
        &c,
        &["RatchetTable", "RatchetHistoryTable", "DeadLetterTable"],
    )
    .await;
    let mut config = RatchetConfig::new(&tables["RatchetTable"]);
    config.history_table = Some(tables["RatchetHistoryTable"].clone());
    let w = Writer {
        function: "ratchet-writer".into(),
        protocol: Ratchet::try_new(c.clone(), config).expect("valid configuration"),
        dead_letters: DeadLetters::new(c.clone(), &tables["DeadLetterTable"], "ratchet-writer"),
        deadline_margin: Duration::from_secs(1),
        event_time: None,
    };
    // PK of 1,500 bytes and SK of 900: each within its limit, together over 2,048.
    let long = put(&"p".repeat(1500), &"s".repeat(900), 1, json!({"v": 1}));
    let short = put("u1", "a", 1, json!({"v": 2}));
    let report = w
        .handle_batch(&sqs_batch(&[long, short], 0), Deadline::none())
        .await;
    match &report.results[0] {
        RecordResult::Rejected(r) => assert_eq!(r.code, RejectionCode::InvalidKey, "{r}"),
        other => panic!("the long key: {other:?}"),
    }
    assert_eq!(
        report.results[1].label(),
        "applied",
        "{:?}",
        report.results[1]
    );
    assert!(scan(&c, &tables["RatchetTable"]).await.contains_key("u1|a"));
}
