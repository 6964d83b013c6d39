//! The fast path (issue 18): a transaction that fits one `TransactWriteItems` is that one call
//! (its requests and its completed header), against DynamoDB Local; lost answers, conflicts
//! (injected), redeliveries, a failed condition, and interplay with lock-path transactions
//! (one holding an item; one that read an item before a fast-path commit).

use std::time::Duration;

use crate::txn::env::*;
use dev_testing::{client, client_with, At, Fault, FaultInjector, Interleaving};
use dynamodb_exactly_once::batch::{Applied, Protocol};
use dynamodb_exactly_once::txn::{Coordinator, TxError, TxMessage, TxOutcome};
use dynamodb_exactly_once::{Deadline, RejectionCode};
use serde_json::{json, Value};

use crate::common::scan;

/// The TX header of `tx_id`, raw.
async fn header(base: &aws_sdk_dynamodb::Client, env: &Env, tx_id: &str) -> Option<Value> {
    scan(base, env.tx())
        .await
        .into_values()
        .find(|i| i["TxId"] == json!(tx_id) && i["Part"] == json!("#"))
        .map(Value::Object)
}

#[tokio::test]
async fn a_transfer_is_one_call_and_a_redelivery_a_duplicate() {
    let base = client();
    let env = Env::new(&base).await.fast();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    let counting = FaultInjector::counting();
    let c = env.coordinator(client_with(Some(counting.clone()), 3));
    let body = transfer(&table, "t-fast", "alice", "bob", 30);
    let report = c.run(&message(&c, &body), Deadline::none()).await;
    let report = report.expect("run");
    assert_eq!(report.outcome, TxOutcome::Committed);
    // One round trip: DescribeTable (once per table and process) aside, one write.
    assert_eq!(report.write_calls, 1, "{report:?}");
    assert_eq!(counting.calls_of("TransactWriteItems"), 1);
    assert_eq!(counting.calls_of("GetItem"), 0, "no read");
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(30))
    );
    assert!(now["alice"].contains_key("_txVer"), "a fresh version token");
    let recorded = header(&base, &env, "t-fast").await.expect("a header");
    assert_eq!(recorded["State"], json!("completed"));
    assert_eq!(recorded["Decision"], json!("committed"));
    assert_clean(&base, &env).await;

    // A redelivery is told by the header: nothing applies again, one (failed) call.
    let again = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("again");
    assert_eq!(again.outcome, TxOutcome::AlreadyCommitted);
    assert_eq!(again.write_calls, 1);
    // Another body under the same id is refused.
    let other = transfer(&table, "t-fast", "alice", "bob", 31);
    let refused = c.run(&message(&c, &other), Deadline::none()).await;
    assert!(
        matches!(&refused, Err(TxError::Rejected(r)) if r.code == RejectionCode::TxIdReused),
        "{refused:?}"
    );
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(30))
    );
}

#[tokio::test]
async fn a_failed_condition_stays_failed_on_redelivery() {
    let base = client();
    let env = Env::new(&base).await.fast();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 10).await;
    seed(&base, &table, "bob", 0).await;
    let c = env.coordinator(client());
    let body = transfer(&table, "t-over", "alice", "bob", 30);
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert_eq!(report.outcome, TxOutcome::RolledBack { request: 0 });
    // The call and the record of the failure.
    assert_eq!(report.write_calls, 2, "{report:?}");
    // Once alice could pay, a redelivery still reports the first outcome and applies nothing.
    seed(&base, &table, "alice", 100).await;
    let again = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("again");
    assert_eq!(again.outcome, TxOutcome::AlreadyRolledBack { request: 0 });
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(100), Some(0))
    );
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn a_lost_answer_is_applied_once_and_reported_committed() {
    let base = client();
    let env = Env::new(&base).await.fast();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    // The call applies, its answer is lost, the SDK sends it again (same token).
    let lossy = FaultInjector::new(|i, op| match (i, op) {
        (1, "TransactWriteItems") => Fault::LoseResponse,
        _ => Fault::None,
    });
    let c = env.coordinator(client_with(Some(lossy.clone()), 3));
    let body = transfer(&table, "t-lost", "alice", "bob", 30);
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert_eq!(lossy.injected(), 1);
    assert_eq!(report.outcome, TxOutcome::Committed, "{report:?}");
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(30))
    );

    // An answer lost on every attempt: the run fails (retried by the source), and the
    // redelivery finds the transaction applied once.
    let always = FaultInjector::new(|_, op| match op {
        "TransactWriteItems" => Fault::LoseResponse,
        _ => Fault::None,
    });
    let lost = env.coordinator(client_with(Some(always), 2));
    let body = transfer(&table, "t-lost-2", "alice", "bob", 5);
    assert!(lost
        .run(&message(&lost, &body), Deadline::none())
        .await
        .is_err());
    let again = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("again");
    assert_eq!(again.outcome, TxOutcome::AlreadyCommitted);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(65), Some(35))
    );
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn transaction_conflicts_are_sent_again() {
    let base = client();
    let env = Env::new(&base).await.fast();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    // DynamoDB cancels the first three calls: another transaction was on an item.
    let conflicts = FaultInjector::new(|i, op| match (i, op) {
        (1..=3, "TransactWriteItems") => Fault::TransactionCanceledByConflict,
        _ => Fault::None,
    });
    let c = env.coordinator(client_with(Some(conflicts.clone()), 3));
    let body = transfer(&table, "t-conflict", "alice", "bob", 30);
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert_eq!(conflicts.injected(), 3);
    assert_eq!(report.outcome, TxOutcome::Committed);
    assert_eq!(
        report.write_calls, 4,
        "three cancelled calls and the one that applied"
    );

    // Conflicts on every call: sent again until the deadline, then delivered again; never
    // handed to the lock path (whose item-size rule differs).
    let hot = FaultInjector::by_request(|op, body| {
        // The fast path's call is the only one that puts a header (`DecidedBy`).
        if op == "TransactWriteItems" && body.contains("DecidedBy") {
            Fault::TransactionCanceledByConflict
        } else {
            Fault::None
        }
    });
    let c = env.coordinator(client_with(Some(hot.clone()), 3));
    let body = transfer(&table, "t-hot", "alice", "bob", 10);
    let deadline = Deadline::after(Duration::from_millis(300));
    let result = c.run(&message(&c, &body), deadline).await;
    assert!(matches!(result, Err(TxError::Deferred)), "{result:?}");
    assert!(hot.injected() > 3, "{} conflicts", hot.injected());
    assert_eq!(
        hot.calls_of("TransactWriteItems"),
        hot.injected(),
        "no lock path"
    );
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(30))
    );
    assert!(header(&base, &env, "t-hot").await.is_none(), "no record");
}

#[tokio::test]
async fn a_lock_path_transaction_holding_an_item_is_met_then_the_call_is_sent_again() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    // Given a lock-path transfer whose coordinator died holding both items
    // (DescribeTable, create, two reads, two lock writes: 6 calls),
    let dying = env.coordinator(client_with(Some(FaultInjector::fail_from(6)), 1));
    let held = transfer(&table, "t-held", "alice", "bob", 30);
    assert!(dying
        .run(&message(&dying, &held), Deadline::none())
        .await
        .is_err());
    assert!(items(&base, &table).await["alice"].contains_key("_txLock"));
    // when a fast-path transfer on the same items runs,
    let fast = env.clone_with_fast_path(true).coordinator(client());
    let body = transfer(&table, "t-after", "alice", "bob", 5);
    let report = fast.run(&message(&fast, &body), Deadline::none()).await;
    // then it rolls the silent holder back (after the patience), undoes its changes and
    // commits on the items' committed values,
    assert_eq!(report.expect("run").outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(95), Some(5))
    );
    // and the held transfer, delivered again, restarts and applies once.
    let lock = env.coordinator(client());
    let again = lock.run(&message(&lock, &held), Deadline::none()).await;
    assert_eq!(again.expect("again").outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(65), Some(35))
    );
    assert_clean(&base, &env).await;
}

/// A lock-path transaction U reads an item, then a fast-path transaction T commits on it
/// before U's lock write: U's write (guarded by the token it read) must fail and U read again,
/// so that the image U saves is T's committed state. U then rolls back (its other request's
/// condition fails): restoring a stale image would erase T's change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_path_transaction_that_read_before_a_fast_commit_reads_again() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    seed(&base, &table, "carol", 0).await;
    let il = Interleaving::new();
    let u = env.sequential(il.client("U", 1));
    // U holds before its first lock write (alice; its reads done).
    il.pause_before("U", At::op("TransactWriteItems").containing("_txLock"));
    let u_body = json!({"txId":"t-u","requests":[
        debit(&table, "alice", 40), debit(&table, "carol", 1000)]});
    let u_message = message(&u, &u_body);
    let u_task = tokio::spawn(async move { u.run(&u_message, Deadline::none()).await });
    il.wait_paused("U").await.expect("U holds after its reads");
    let t = env.clone_with_fast_path(true).coordinator(client());
    let t_message = message(&t, &transfer(&table, "t-t", "alice", "bob", 50));
    let report = t.run(&t_message, Deadline::none()).await;
    assert_eq!(report.expect("T").outcome, TxOutcome::Committed);
    il.release_all("U");
    let u_report = u_task.await.expect("task").expect("U");
    assert_eq!(u_report.outcome, TxOutcome::RolledBack { request: 1 });
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(50), Some(50)),
        "T's change survives U's rollback: {now:?}"
    );
    assert_clean(&base, &env).await;
}

/// One `txId` delivered twice at once: one delivery on the lock path (created, then held),
/// the other on the fast path. The fast path's header `Put` meets the pending header and
/// resumes the lock path's transaction: applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_transaction_on_both_paths_applies_once() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    let body = transfer(&table, "t-both", "alice", "bob", 30);
    let il = Interleaving::new();
    let a = env.sequential(il.client("A", 1));
    il.pause_before("A", At::op("GetItem").table(&table));
    let a_message = message(&a, &body);
    let a_task = tokio::spawn(async move { a.run(&a_message, Deadline::none()).await });
    il.wait_paused("A")
        .await
        .expect("A created the record and holds");
    let b = env.clone_with_fast_path(true).coordinator(client());
    let b_report = b
        .run(&message(&b, &body), Deadline::none())
        .await
        .expect("B");
    assert_eq!(
        b_report.outcome,
        TxOutcome::Committed,
        "B resumed A's transaction"
    );
    il.release_all("A");
    let a_report = a_task.await.expect("task").expect("A");
    assert_eq!(a_report.outcome, TxOutcome::AlreadyCommitted);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(30))
    );
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn the_fast_path_waits_out_a_slow_lock_holder_within_the_deadline() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    let dying = env.coordinator(client_with(Some(FaultInjector::fail_from(6)), 1));
    let held = transfer(&table, "t-held-2", "alice", "bob", 30);
    assert!(dying
        .run(&message(&dying, &held), Deadline::none())
        .await
        .is_err());
    // A deadline shorter than the patience: the fast path defers rather than overstay.
    let fast = env.clone_with_fast_path(true).coordinator(client());
    let body = transfer(&table, "t-short", "alice", "bob", 5);
    let deadline = Deadline::after(Duration::from_millis(100));
    let report = fast.run(&message(&fast, &body), deadline).await;
    assert!(matches!(report, Err(TxError::Deferred)), "{report:?}");
    assert!(
        header(&base, &env, "t-short").await.is_none(),
        "nothing recorded"
    );
}

/// The transactions of one batch as the pipeline hands them to `apply` (independent).
fn batch(c: &Coordinator, bodies: &[Value]) -> Vec<(usize, TxMessage)> {
    bodies
        .iter()
        .enumerate()
        .map(|(i, b)| (i, message(c, b)))
        .collect()
}

fn outcomes(applied: Applied<TxOutcome>) -> Vec<String> {
    let mut results = applied.results;
    results.sort_by_key(|(i, _)| *i);
    results
        .into_iter()
        .map(|(_, r)| r.label().to_string())
        .collect()
}

#[tokio::test]
async fn independent_transfers_of_a_batch_commit_in_one_call() {
    let base = client();
    let env = Env::new(&base).await.fast();
    let table = env.accounts().to_string();
    for a in 0..20 {
        seed(&base, &table, &format!("a{a}"), 100).await;
    }
    let counting = FaultInjector::counting();
    let c = env.coordinator(client_with(Some(counting.clone()), 3));
    let bodies: Vec<Value> = (0..10)
        .map(|t| {
            transfer(
                &table,
                &format!("g{t}"),
                &format!("a{}", 2 * t),
                &format!("a{}", 2 * t + 1),
                10,
            )
        })
        .collect();
    let applied = c.apply(batch(&c, &bodies), Deadline::none()).await;
    assert_eq!(outcomes(applied), vec!["committed"; 10]);
    // 10 × (2 requests + 1 header) = 30 actions: one call.
    assert_eq!(counting.calls_of("TransactWriteItems"), 1);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a0"), balance(&now, "a1")),
        (Some(90), Some(110))
    );
    assert_clean(&base, &env).await;
    // Delivered again: every member is a duplicate, read from the one cancelled call's reasons.
    let before = counting.calls();
    let applied = c.apply(batch(&c, &bodies), Deadline::none()).await;
    assert_eq!(outcomes(applied), vec!["duplicate"; 10]);
    assert_eq!(
        counting.calls() - before,
        1,
        "one cancelled call settles the batch"
    );
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a18"), balance(&now, "a19")),
        (Some(90), Some(110))
    );
}

#[tokio::test]
async fn a_member_whose_condition_fails_leaves_its_group_and_the_rest_commit() {
    let base = client();
    let env = Env::new(&base).await.fast();
    let table = env.accounts().to_string();
    for a in 0..8 {
        seed(&base, &table, &format!("a{a}"), 100).await;
    }
    let counting = FaultInjector::counting();
    let c = env.coordinator(client_with(Some(counting.clone()), 3));
    let mut bodies: Vec<Value> = (0..4)
        .map(|t| {
            transfer(
                &table,
                &format!("m{t}"),
                &format!("a{}", 2 * t),
                &format!("a{}", 2 * t + 1),
                10,
            )
        })
        .collect();
    // The third one overdraws.
    bodies[2] = transfer(&table, "m2", "a4", "a5", 1000);
    let applied = c.apply(batch(&c, &bodies), Deadline::none()).await;
    assert_eq!(
        outcomes(applied),
        ["committed", "committed", "rolled_back", "committed"]
    );
    // The group cancelled once, the three sent again, the fourth alone (cancelled, recorded).
    assert_eq!(counting.calls_of("TransactWriteItems"), 3);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a4"), balance(&now, "a5")),
        (Some(100), Some(100))
    );
    assert_eq!(
        (balance(&now, "a6"), balance(&now, "a7")),
        (Some(90), Some(110))
    );
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn one_tx_id_twice_in_a_batch_and_a_lost_group_answer_apply_once() {
    let base = client();
    let env = Env::new(&base).await.fast();
    let table = env.accounts().to_string();
    for a in 0..6 {
        seed(&base, &table, &format!("a{a}"), 100).await;
    }
    // The first group call applies, its answer is lost, the SDK sends it again.
    let lossy = FaultInjector::new(|i, op| match (i, op) {
        (1, "TransactWriteItems") => Fault::LoseResponse,
        _ => Fault::None,
    });
    let c = env.coordinator(client_with(Some(lossy.clone()), 3));
    let body = |t: usize| {
        transfer(
            &table,
            &format!("d{t}"),
            &format!("a{}", 2 * t),
            &format!("a{}", 2 * t + 1),
            10,
        )
    };
    let bodies = vec![body(0), body(1), body(0), body(2)];
    let applied = c.apply(batch(&c, &bodies), Deadline::none()).await;
    let got = outcomes(applied);
    assert_eq!(lossy.injected(), 1);
    assert_eq!(got[1], "committed");
    assert_eq!(got[3], "committed");
    let mut d0 = vec![got[0].clone(), got[2].clone()];
    d0.sort();
    assert_eq!(d0, ["committed", "duplicate"], "{got:?}");
    let now = items(&base, &table).await;
    for t in 0..3 {
        let (from, to) = (format!("a{}", 2 * t), format!("a{}", 2 * t + 1));
        assert_eq!(
            (balance(&now, &from), balance(&now, &to)),
            (Some(90), Some(110)),
            "{now:?}"
        );
    }
    assert_clean(&base, &env).await;
}
