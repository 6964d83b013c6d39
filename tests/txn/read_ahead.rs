//! The lock path's read-ahead (issue 18, the large path): items read by `BatchGetItem`s while
//! the record is created, and a commit of this run finalized without reading the items
//! again; what it costs in calls and round trips, and the cases where a finalize written
//! blind finds the item otherwise and is completed the read-based way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::txn::env::*;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::txn::{Coordinator, TxOutcome};
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Value};

fn ahead(env: &Env, client: aws_sdk_dynamodb::Client) -> Coordinator {
    lock_path_coordinator(env, client, 99, true)
}

#[tokio::test]
async fn a_transaction_of_150_items_reads_in_two_calls_and_finalizes_without_reads() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    for i in 0..150 {
        seed(&base, &table, &format!("k{i:03}"), 0).await;
    }
    let requests: Vec<Value> = (0..150)
        .map(|i| update(&table, &format!("k{i:03}"), 1))
        .collect();
    let counting = FaultInjector::counting();
    let c = ahead(&env, client_with(Some(counting.clone()), 3));
    // Warm: the coordinator has looked up the table's key schema (once per process).
    let warm = json!({"txId":"t-warm","requests":[update(&table, "k000", 0)]});
    let _ = c
        .run(&message(&c, &warm), Deadline::none())
        .await
        .expect("warm-up");
    counting.reset_counts();
    let body = json!({"txId":"t-ahead","requests":requests});
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert_eq!(report.outcome, TxOutcome::Committed);
    eprintln!("{counting:?}");
    assert_eq!(counting.calls_of("BatchGetItem"), 2, "150 keys: 100 + 50");
    assert_eq!(counting.calls_of("GetItem"), 0, "no item or header read");
    assert_eq!(
        counting.calls_of("PutItem"),
        0,
        "the record's part goes with its header"
    );
    assert_eq!(
        counting.calls_of("TransactWriteItems"),
        3,
        "the record (header and part), then 99 + 51 locks"
    );
    assert!(
        counting.calls_of("UpdateItem") >= 150,
        "150 finalize writes"
    );
    // The large path's bound: 4 + ⌈N/99⌉ (create with the reads, two lock chunks, commit,
    // finalize, complete).
    assert!(
        counting.round_trips() <= 4 + 150usize.div_ceil(99),
        "{} round trips",
        counting.round_trips()
    );
    let now = items(&base, &table).await;
    assert!((0..150).all(|i| balance(&now, &format!("k{i:03}")) == Some(1)));
    assert_clean(&base, &env).await;
}

/// The first finalize of an item of `table` (an `UpdateItem` that removes the lock there)
/// lands, but its answer is lost.
fn lose_first_finalize(table: String) -> FaultInjector {
    let fired = Arc::new(AtomicBool::new(false));
    FaultInjector::by_request(move |op, body| {
        let finalize = op == "UpdateItem" && body.contains(&table) && body.contains("REMOVE #txpl");
        if finalize && !fired.swap(true, Ordering::SeqCst) {
            Fault::LoseResponse
        } else {
            Fault::None
        }
    })
}

#[tokio::test]
async fn a_blind_finalize_whose_answer_was_lost_is_completed_from_a_read() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    for pk in ["alice", "bob"] {
        seed(&base, &table, pk, 100).await;
    }
    let faults = lose_first_finalize(table.clone());
    let c = ahead(&env, client_with(Some(faults.clone()), 3));
    let body = transfer(&table, "t-lost", "alice", "bob", 30);
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert_eq!(report.outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(130))
    );
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn a_condition_check_of_an_absent_item_leaves_nothing_behind() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    let c = ahead(&env, client());
    let body = json!({"txId":"t-check","requests":[
        update(&table, "alice", -5),
        {"ConditionCheck":{"TableName":table,"Key":{"PK":"nobody"},
            "ConditionExpression":"attribute_not_exists(PK)"}}]});
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert_eq!(report.outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(balance(&now, "alice"), Some(95));
    assert!(!now.contains_key("nobody"), "{now:?}");
    assert_clean(&base, &env).await;
}
