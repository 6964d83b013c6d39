//! What transactions cost on redelivery (review of transactions, finding 8): a transaction
//! whose requests live in part items does not write them again when it comes back, whether
//! its parts went with its header in one call or before it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::txn::{Coordinator, TxOutcome};

/// The coordinator's `CREATE_AT_ONCE_BYTES` (internal): requests up to this size are created
/// with their header in one call.
const CREATE_AT_ONCE_BYTES: usize = 64 * 1024;
use crate::txn::env::*;
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Value};

/// Part items (`Part = p#<nonce>#…`) the TX table holds for `tx_id`.
async fn part_items(client: &aws_sdk_dynamodb::Client, env: &Env, tx_id: &str) -> usize {
    let out = client
        .query()
        .table_name(env.tx())
        .key_condition_expression("TxId = :t AND begins_with(Part, :p)")
        .expression_attribute_values(":t", AttributeValue::S(tx_id.into()))
        .expression_attribute_values(":p", AttributeValue::S("p#".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("query parts");
    out.items().len()
}

/// A transaction whose requests need part items, run and then delivered twice again: the
/// parts of one creation only, `puts` part writes sent in all (`PutItem`s of a chunk).
async fn delivered_three_times(tx_id: &str, padding: usize) -> (usize, usize) {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    let puts = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&puts);
    let counting = FaultInjector::by_request(move |op, body| {
        if part_put(op, body) {
            seen.fetch_add(1, Ordering::SeqCst);
        }
        Fault::None
    });
    let c = env.coordinator(client_with(Some(counting), 3));
    let pad = "x".repeat(padding);
    let requests: Vec<Value> = (0..60)
        .map(
            |i| json!({"Put":{"TableName":table,"Item":{"PK":format!("p{i:02}"),"n":i,"pad":pad}}}),
        )
        .collect();
    let body = json!({"txId": tx_id, "requests": requests});
    let first = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert_eq!(first.outcome, TxOutcome::Committed);
    for _ in 0..2 {
        let again = c
            .run(&message(&c, &body), Deadline::none())
            .await
            .expect("again");
        assert_eq!(again.outcome, TxOutcome::AlreadyCommitted);
    }
    (
        part_items(&base, &env, tx_id).await,
        puts.load(Ordering::SeqCst),
    )
}

#[tokio::test]
async fn a_redelivered_large_transaction_writes_no_request_part_again() {
    // 60 items, ~5 KB of requests: one part, created with the header in one call (no
    // `PutItem`); a redelivery's call is refused on the header and writes nothing.
    let (parts, puts) = delivered_three_times("parted", 0).await;
    assert_eq!((parts, puts), (1, 0), "parts rewritten on redelivery");
    // ~120 KB of requests (over `CREATE_AT_ONCE_BYTES`): the header is read first, the part
    // written once, never again.
    const { assert!(60 * 2000 > CREATE_AT_ONCE_BYTES) };
    let (parts, puts) = delivered_three_times("parted-big", 2000).await;
    assert_eq!((parts, puts), (1, 1), "parts rewritten on redelivery");
}

/// The lock path's coordinator whose calls go through `faults`, and 60 puts (~5 KB of
/// requests: one part, created with the header in one call).
async fn sixty_puts(faults: FaultInjector) -> (Env, Coordinator, Value) {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    let c = env.coordinator(client_with(Some(faults), 3));
    let requests: Vec<Value> = (0..60)
        .map(|i| json!({"Put":{"TableName":table,"Item":{"PK":format!("p{i:02}"),"n":i}}}))
        .collect();
    (env, c, json!({"txId": "sixty", "requests": requests}))
}

/// Whether a request is a part's own `PutItem` (the read-first creation).
fn part_put(op: &str, body: &str) -> bool {
    op == "PutItem" && body.contains("\"Chunk\"")
}

/// Whether a request is the one-call creation of a record with its part.
fn creation(op: &str, body: &str) -> bool {
    op == "TransactWriteItems" && body.contains("\"Chunk\"")
}

#[tokio::test]
async fn a_creation_whose_answer_was_lost_is_still_the_creator() {
    // The creation lands, its answer is lost; the SDK sends it again.
    let lost = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&lost);
    let faults = FaultInjector::by_request(move |op, body| {
        if creation(op, body) && seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Fault::LoseResponse
        } else {
            Fault::None
        }
    });
    let (env, c, body) = sixty_puts(faults).await;
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert!(
        lost.load(Ordering::SeqCst) >= 2,
        "the creation was sent again"
    );
    // Committed by this run (not found as another delivery's record), its one part kept.
    assert_eq!(report.outcome, TxOutcome::Committed);
    let base = client();
    assert_eq!(part_items(&base, &env, "sixty").await, 1);
    assert_eq!(items(&base, env.accounts()).await.len(), 60);
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn a_creation_meeting_conflicts_is_sent_again_then_takes_the_read_first_way() {
    for conflicts in [2usize, 100] {
        let seen = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&seen);
        let puts = Arc::new(AtomicUsize::new(0));
        let parts = Arc::clone(&puts);
        let faults = FaultInjector::by_request(move |op, body| {
            if part_put(op, body) {
                parts.fetch_add(1, Ordering::SeqCst);
            }
            if creation(op, body) && counted.fetch_add(1, Ordering::SeqCst) < conflicts {
                Fault::TransactionCanceledByConflict
            } else {
                Fault::None
            }
        });
        let (env, c, body) = sixty_puts(faults).await;
        let report = c
            .run(&message(&c, &body), Deadline::none())
            .await
            .expect("run");
        assert_eq!(
            report.outcome,
            TxOutcome::Committed,
            "{conflicts} conflicts"
        );
        let base = client();
        assert_eq!(part_items(&base, &env, "sixty").await, 1);
        // Two conflicts are waited out; endless ones hand the creation to the read-first
        // way after 7 calls (the part then goes by `PutItem`).
        let expected = if conflicts == 2 { (3, 0) } else { (7, 1) };
        assert_eq!(
            (seen.load(Ordering::SeqCst), puts.load(Ordering::SeqCst)),
            expected,
            "{conflicts} conflicts"
        );
        assert_clean(&base, &env).await;
    }
}
