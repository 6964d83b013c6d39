//! A replica (ratchet-writer, `RATCHET_CHANGES=replicate`) never reinterprets a source
//! attribute that has the name of one of its protocol attributes: a soft-delete flag
//! `Deleted: true` on an ordinary item is not a tombstone, a `Timestamp` column is not dropped;
//! such a change is kept as `reserved_attribute` (rename the replica's attributes). A ratchet
//! source's own tombstone (flag, timestamp and tie-break together) still replicates as a delete.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use common::*;
use dynamo_testing::events::{stream_batch, stream_record};
use dynamo_testing::{client, template_tables};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig, Replication};
use dynamodb_exactly_once::{Deadline, RecordResult, RejectionCode};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::Writer;
use serde_json::{json, Value};

fn replica(client: Client, tables: &BTreeMap<String, String>) -> Writer<Ratchet> {
    let mut config = RatchetConfig::new(&tables["OrdersReplicaTable"]);
    config.replication = Some(Replication::default());
    Writer {
        function: "orders-replica".into(),
        protocol: Ratchet::try_new(client.clone(), config).expect("valid configuration"),
        dead_letters: DeadLetters::new(client, &tables["DeadLetterTable"], "orders-replica"),
        deadline_margin: Duration::from_secs(1),
        event_time: None,
    }
}

async fn replicate(
    w: &Writer<Ratchet>,
    event: &str,
    seq: &str,
    image: &Value,
) -> Option<RejectionCode> {
    let keys = json!({"PK": image["PK"], "SK": image["SK"]});
    let record = stream_record(&format!("e{seq}"), event, seq, &keys, Some(image), None);
    let report = w
        .handle_batch(&stream_batch(&[record]), Deadline::none())
        .await;
    match &report.results[0] {
        RecordResult::Rejected(r) => Some(r.code),
        RecordResult::Done(_) => None,
        other => panic!("not decided: {other:?}"),
    }
}

#[tokio::test]
async fn a_source_attribute_named_like_a_protocol_attribute_is_refused_not_reinterpreted() {
    let c = client();
    let tables = template_tables(&c, &["OrdersReplicaTable", "DeadLetterTable"]).await;
    let w = replica(c.clone(), &tables);
    // An ordinary item with a soft-delete flag is not a tombstone,
    let flagged = json!({"PK": "c#1", "SK": "o#1", "Deleted": true, "total": 5});
    assert_eq!(
        replicate(&w, "INSERT", "100", &flagged).await,
        Some(RejectionCode::ReservedAttribute)
    );
    // nor is a `Timestamp` column silently dropped.
    let stamped = json!({"PK": "c#1", "SK": "o#2", "Timestamp": 7, "total": 5});
    assert_eq!(
        replicate(&w, "INSERT", "101", &stamped).await,
        Some(RejectionCode::ReservedAttribute)
    );
    let items = scan(&c, &tables["OrdersReplicaTable"]).await;
    assert!(items.is_empty(), "{items:?}");
    // A ratchet source's tombstone (flag, timestamp and tie-break) is still a delete.
    let live = json!({"PK": "c#2", "SK": "o#1", "total": 5});
    assert_eq!(replicate(&w, "INSERT", "102", &live).await, None);
    let tombstone =
        json!({"PK": "c#2", "SK": "o#1", "Deleted": true, "Timestamp": 9, "TieBreak": "t"});
    assert_eq!(replicate(&w, "MODIFY", "103", &tombstone).await, None);
    let items = scan(&c, &tables["OrdersReplicaTable"]).await;
    assert_eq!(
        items["c#2|o#1"].get("Deleted"),
        Some(&json!(true)),
        "{items:?}"
    );
}
