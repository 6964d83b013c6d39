//! What DynamoDB does beside a transaction that DynamoDB Local never does: a plain write on an
//! item that an in-flight `TransactWriteItems` holds is refused with
//! `TransactionConflictException` (injected by the SDK interceptor). The coordinator's plain
//! writes (locks' finalize and undo, header transitions, heartbeats, completion) retry it.

use crate::txn_env;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use dynamo_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::txn::TxOutcome;
use dynamodb_exactly_once::Deadline;
use txn_env::*;

/// Every plain write (`PutItem`, `UpdateItem`, `DeleteItem`) is refused once with a
/// `TransactionConflictException` the first time it is sent; its retry goes through.
fn conflict_once_per_write() -> FaultInjector {
    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    FaultInjector::by_request(move |op, body| {
        let plain = matches!(op, "PutItem" | "UpdateItem" | "DeleteItem");
        let first = seen
            .lock()
            .map(|mut s| s.insert(body.to_string()))
            .unwrap_or(false);
        if plain && first {
            Fault::TransactionConflict
        } else {
            Fault::None
        }
    })
}

#[tokio::test]
async fn a_transfer_commits_although_each_plain_write_meets_a_transaction_conflict_once() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    let faults = conflict_once_per_write();
    let c = env.coordinator(client_with(Some(faults.clone()), 3));
    let body = transfer(&table, "t-conflict", "alice", "bob", 30);
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("the run ends without an error");
    assert_eq!(report.outcome, TxOutcome::Committed);
    assert!(
        faults.injected() >= 3,
        "{} conflicts injected",
        faults.injected()
    );
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(30))
    );
    assert_clean(&base, &env).await;
}
