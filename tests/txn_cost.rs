//! What transactions cost on redelivery (review of transactions, finding 8): a transaction
//! whose requests live in part items does not write them again when it comes back.

use crate::txn_env;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dynamo_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::txn::TxOutcome;
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Value};
use txn_env::*;

#[tokio::test]
async fn a_redelivered_large_transaction_writes_no_request_part_again() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    let parts = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&parts);
    let counting = FaultInjector::by_request(move |op, body| {
        if op == "PutItem" && body.contains("\"Chunk\"") {
            seen.fetch_add(1, Ordering::SeqCst);
        }
        Fault::None
    });
    let c = env.coordinator(client_with(Some(counting), 3));
    // 60 items: the requests (~5 KB) go to one part item
    let requests: Vec<Value> = (0..60)
        .map(|i| json!({"Put":{"TableName":table,"Item":{"PK":format!("p{i:02}"),"n":i}}}))
        .collect();
    let body = json!({"txId": "parted", "requests": requests});
    let first = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert_eq!(first.outcome, TxOutcome::Committed);
    assert_eq!(parts.load(Ordering::SeqCst), 1);
    // Delivered again twice: the record exists, its parts are not written again
    for _ in 0..2 {
        let again = c
            .run(&message(&c, &body), Deadline::none())
            .await
            .expect("again");
        assert_eq!(again.outcome, TxOutcome::AlreadyCommitted);
    }
    assert_eq!(
        parts.load(Ordering::SeqCst),
        1,
        "parts rewritten on redelivery"
    );
}
