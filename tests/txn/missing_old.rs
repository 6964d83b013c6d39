//! A failed condition whose cancellation reason carries no item (DynamoDB may leave `ALL_OLD`
//! out; the fault interceptor sends the request without asking for it): neither path may take
//! it for a final failed condition before reading the item (review finding 10).

use crate::txn::env::*;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::txn::TxOutcome;
use dynamodb_exactly_once::Deadline;

fn without_old_items() -> FaultInjector {
    FaultInjector::new(|_, op| match op {
        "TransactWriteItems" => Fault::WithoutOldItems,
        _ => Fault::None,
    })
}

/// alice (100) and bob (0), both held by a lock-path transfer whose coordinator died.
async fn held_pair(env: &Env, base: &aws_sdk_dynamodb::Client) -> String {
    let table = env.accounts().to_string();
    seed(base, &table, "alice", 100).await;
    seed(base, &table, "bob", 0).await;
    abandon(env, &transfer(&table, "t-held", "alice", "bob", 30)).await;
    table
}

async fn assert_transferred(base: &aws_sdk_dynamodb::Client, table: &str) {
    let now = items(base, table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(95), Some(5))
    );
}

#[tokio::test]
async fn a_fast_path_call_meeting_a_lock_without_its_item_reads_it_and_commits() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    // Given a lock-path transfer whose coordinator died holding both items,
    let table = held_pair(&env, &base).await;
    // when a fast-path transfer on the same items meets the locks and DynamoDB's cancellation
    // reasons carry no item,
    let faults = without_old_items();
    let fast = env
        .clone_with_fast_path(true)
        .coordinator(client_with(Some(faults.clone()), 3));
    let body = transfer(&table, "t-after", "alice", "bob", 5);
    let report = fast.run(&message(&fast, &body), Deadline::none()).await;
    // then it reads the item, meets the lock (rolls the silent holder back) and commits,
    // instead of recording a failed condition it never had.
    assert!(faults.injected() >= 1);
    assert_eq!(report.expect("run").outcome, TxOutcome::Committed);
    assert_transferred(&base, &table).await;
}

#[tokio::test]
async fn a_lock_chunk_meeting_a_lock_without_its_item_reads_it_and_commits() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = held_pair(&env, &base).await;
    let faults = without_old_items();
    let c = lock_path_coordinator(
        &env,
        client_with(Some(faults.clone()), 3),
        2,
        env.config().read_ahead(),
    );
    let body = transfer(&table, "t-after", "alice", "bob", 5);
    let report = c.run(&message(&c, &body), Deadline::none()).await;
    assert!(faults.injected() >= 1);
    assert_eq!(report.expect("run").outcome, TxOutcome::Committed);
    assert_transferred(&base, &table).await;
}
