//! The fast path's edges: contention never changes a
//! transaction's outcome (a large item commits after conflicts as it does uncontended);
//! `ThrottlingError` cancellation reasons are sent again locally, on the fast path and on a
//! lock chunk; a call refused as a whole for another reason than its size is recorded
//! `invalid_request` in one write, not run through the lock path.

use crate::txn::env::*;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::txn::{TxError, TxOutcome};
use dynamodb_exactly_once::{Deadline, RejectionCode};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A fault on the first `n` requests `pick` chooses, then none.
fn first(n: usize, fault: Fault, pick: fn(&str, &str) -> bool) -> FaultInjector {
    let seen = Arc::new(AtomicUsize::new(0));
    FaultInjector::by_request(move |op, body| {
        if pick(op, body) && seen.fetch_add(1, Ordering::SeqCst) < n {
            fault
        } else {
            Fault::None
        }
    })
}

/// The fast path's call: the only one that puts a header with `DecidedBy`.
fn fast_call(op: &str, body: &str) -> bool {
    op == "TransactWriteItems" && body.contains("DecidedBy")
}

/// A lock write of the lock path (it sets `_txLock`), one item or a chunk.
fn lock_write(op: &str, body: &str) -> bool {
    op == "TransactWriteItems" && body.contains("_txLock") && !body.contains("DecidedBy")
}

async fn seed_large(client: &aws_sdk_dynamodb::Client, table: &str, pk: &str, bytes: usize) {
    client
        .put_item()
        .table_name(table)
        .item("PK", aws_sdk_dynamodb::types::AttributeValue::S(pk.into()))
        .item(
            "balance",
            aws_sdk_dynamodb::types::AttributeValue::N("0".into()),
        )
        .item(
            "pad",
            aws_sdk_dynamodb::types::AttributeValue::S("p".repeat(bytes)),
        )
        .send()
        .await
        .expect("seed");
}

#[tokio::test]
async fn a_large_item_commits_after_conflicts_as_it_does_uncontended() {
    let base = client();
    let env = Env::new(&base).await.fast();
    let table = env.accounts().to_string();
    // Given a 250 KB item (its image and new value together exceed 400 KB) and a small one
    seed_large(&base, &table, "big", 250_000).await;
    seed(&base, &table, "small", 0).await;
    // When 13 fast-path calls in a row meet a conflict (a burst of writers)
    let c = env.coordinator(client_with(
        Some(first(13, Fault::TransactionCanceledByConflict, fast_call)),
        3,
    ));
    let body =
        json!({"txId":"t-big","requests":[update(&table, "big", 1), update(&table, "small", 1)]});
    let report = c.run(&message(&c, &body), Deadline::none()).await;
    // Then it commits, as it does uncontended: never `invalid_request` by contention
    assert_eq!(report.expect("run").outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "big"), balance(&now, "small")),
        (Some(1), Some(1))
    );
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn throttling_reasons_are_sent_again_within_the_run_on_both_paths() {
    let base = client();
    let env = Env::new(&base).await;
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    // The fast path's call throttled once
    let faults = first(1, Fault::TransactionCanceledByThrottling, fast_call);
    let c = env
        .clone_with_fast_path(true)
        .coordinator(client_with(Some(faults.clone()), 3));
    let body = transfer(&table, "t-throttled-fast", "alice", "bob", 10);
    let report = c.run(&message(&c, &body), Deadline::none()).await;
    assert_eq!(faults.injected(), 1);
    assert_eq!(report.expect("fast path").outcome, TxOutcome::Committed);
    // A lock chunk throttled once
    let faults = first(1, Fault::TransactionCanceledByThrottling, lock_write);
    let c = lock_path_coordinator(&env, client_with(Some(faults.clone()), 3), 2, false);
    let body = transfer(&table, "t-throttled-chunk", "alice", "bob", 10);
    let report = c.run(&message(&c, &body), Deadline::none()).await;
    assert_eq!(faults.injected(), 1);
    assert_eq!(report.expect("lock chunk").outcome, TxOutcome::Committed);
    // A single lock write throttled once
    let faults = first(1, Fault::TransactionCanceledByThrottling, lock_write);
    let c = lock_path_coordinator(&env, client_with(Some(faults.clone()), 3), 1, false);
    let body = transfer(&table, "t-throttled-one", "alice", "bob", 10);
    let report = c.run(&message(&c, &body), Deadline::none()).await;
    assert_eq!(faults.injected(), 1);
    assert_eq!(report.expect("lock write").outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(30))
    );
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn a_call_refused_whole_for_an_invalid_expression_is_recorded_in_one_write() {
    let base = client();
    let env = Env::new(&base).await.fast();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    let counting = FaultInjector::counting();
    let c = env.coordinator(client_with(Some(counting.clone()), 3));
    // Two document paths overlap: DynamoDB refuses the whole call
    let bad = json!({"Update":{"TableName":table,"Key":{"PK":"alice"},
        "UpdateExpression":"SET #b = :one REMOVE #b","ExpressionAttributeNames":{"#b":"balance"},
        "ExpressionAttributeValues":{":one":1}}});
    let body = json!({"txId":"t-overlap","requests":[update(&table, "bob", 1), bad]});
    let result = c.run(&message(&c, &body), Deadline::none()).await;
    assert!(
        matches!(&result, Err(TxError::Rejected(r)) if r.code == RejectionCode::RejectedByDynamodb),
        "{result:?}"
    );
    let calls = counting.calls() - counting.calls_of("DescribeTable");
    assert_eq!(
        (
            calls,
            counting.calls_of("TransactWriteItems"),
            counting.calls_of("PutItem")
        ),
        (2, 1, 1),
        "the refused call and the record: {counting:?}"
    );
    let now = items(&base, &table).await;
    assert!(!now.contains_key("bob"), "nothing applied");
    assert_clean(&base, &env).await;
    // Redelivered: the same rejection, from the record
    let again = c.run(&message(&c, &body), Deadline::none()).await;
    assert!(matches!(&again, Err(TxError::Rejected(_))), "{again:?}");
}
