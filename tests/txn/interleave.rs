//! One deterministic schedule per review finding of the transaction protocol (issue 8),
//! replayed with the interleaving harness (`dev_testing::interleave`) against DynamoDB
//! Local. Each test pauses a named coordinator (or reader) at a chosen call, runs others to
//! completion meanwhile, releases it, and checks the raw table.
//!
//! Pausing blocks the paused call's thread (`block_in_place`): every test here runs on a
//! multi-thread runtime.

use crate::txn::env::*;
use aws_sdk_dynamodb::types::AttributeValue;
use dev_testing::{client, client_with, At, FaultInjector, Interleaving};
use dynamodb_exactly_once::txn::read::Isolation;
use dynamodb_exactly_once::txn::{TxError, TxOutcome};
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Value};

/// Finding 1: a duplicate delivery that stalled before reading its items must not apply its
/// change once the transaction is decided (its first lock write used to be guarded only by
/// the item's token, which the other coordinator's finalize left as a valid read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_duplicate_cannot_apply_after_the_transaction_completed() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    let body = transfer(&table, "t1", "alice", "bob", 30);
    let il = Interleaving::new();
    // Given two deliveries of T: A creates T and stalls before reading its items,
    let a = env.sequential(il.client("A", 1));
    il.pause_before("A", At::op("GetItem").table(&table));
    let a_message = message(&a, &body);
    let a_task = tokio::spawn(async move { a.run(&a_message, Deadline::none()).await });
    let parked = il.wait_paused("A").await.expect("A holds before its reads");
    // when B runs T to completion meanwhile,
    let b = env.coordinator(client());
    let report = b.run(&message(&b, &body), Deadline::none()).await;
    assert_eq!(report.expect("B").outcome, TxOutcome::Committed);
    // and A resumes, reads both items and dies right after its first lock write,
    il.crash_from("A", parked.call.index + 3);
    il.release("A");
    let _ = a_task.await.expect("task");
    // then, after a redelivery and a sweep, the transfer is applied once and no lock is left.
    let c = env.coordinator(client());
    let again = c.run(&message(&c, &body), Deadline::none()).await;
    assert_eq!(
        again.expect("redelivery").outcome,
        TxOutcome::AlreadyCommitted
    );
    sweep_all(&env, client()).await;
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(30)),
        "{now:?}"
    );
    assert_clean(&base, &env).await;
}

/// Finding 2: an SDK retry of a lock write whose response was lost must not recreate an item
/// after the transaction committed and a later transaction deleted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_retry_cannot_recreate_an_item_a_later_commit_deleted() {
    let base = client();
    // Heartbeats off: the refusal below names B's second TX-table update, which a heartbeat
    // (written when A's record is older than the interval) would shift.
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    let create = json!({"txId":"create-x","requests":[{"Put":{"TableName":table,
        "Item":{"PK":"x","balance":5},"ConditionExpression":"attribute_not_exists(PK)"}}]});
    let delete = json!({"txId":"delete-x","requests":[{"Delete":{"TableName":table,
        "Key":{"PK":"x"}}}]});
    let il = Interleaving::new();
    // Given A's lock write creating x is applied but its response lost, and the SDK's retry
    // held back,
    let lock_write = || At::any().table(&table).containing("_txLock");
    il.lose_response("A", lock_write().attempt(1));
    il.pause_before("A", lock_write().attempt(2));
    let a = env.sequential(il.client("A", 2));
    let a_message = message(&a, &create);
    let a_task = tokio::spawn(async move { a.run(&a_message, Deadline::none()).await });
    il.wait_paused("A").await.expect("A's retry is held");
    // when B adopts A's lock, commits, finalizes x and dies before completing,
    let b = env.sequential(il.client("B", 1));
    il.refuse("B", At::op("UpdateItem").table(env.tx()).nth(2));
    assert!(b
        .run(&message(&b, &create), Deadline::none())
        .await
        .is_err());
    // and U deletes x (committed),
    let u = env.coordinator(client());
    let report = u.run(&message(&u, &delete), Deadline::none()).await;
    assert_eq!(report.expect("U").outcome, TxOutcome::Committed);
    assert_eq!(items(&base, &table).await.get("x"), None);
    // then A's retry lands and T is completed (by A, and a sweep),
    il.release("A");
    let _ = a_task.await.expect("task");
    sweep_all(&env, client()).await;
    // and U's committed delete stays.
    let now = items(&base, &table).await;
    assert_eq!(now.get("x"), None, "x came back: {now:?}");
    assert_clean(&base, &env).await;
}

fn blobs(table: &str, tx_id: &str, fill: &str) -> Value {
    let blob = fill.repeat(90 * 1024);
    let requests: Vec<Value> = (0..5)
        .map(|i| json!({"Put":{"TableName":table,"Item":{"PK":format!("big{i}"),"blob":blob}}}))
        .collect();
    json!({"txId":tx_id,"requests":requests})
}

/// Finding 3: a different body with the same `txId` and the same number of request parts
/// must be refused, and must not overwrite the recorded requests.
#[tokio::test]
async fn a_different_large_body_with_the_same_tx_id_is_refused() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    let c = env.coordinator(client());
    // Given a committed transaction whose requests are kept in part items,
    let first = blobs(&table, "heavy", "x");
    let report = c.run(&message(&c, &first), Deadline::none()).await;
    assert_eq!(report.expect("first").outcome, TxOutcome::Committed);
    // when a different body of the same size comes with the same txId,
    let other = blobs(&table, "heavy", "y");
    let second = c.run(&message(&c, &other), Deadline::none()).await;
    // then it is refused as a reused txId,
    match second {
        Err(TxError::Rejected(r)) => assert_eq!(r.code, "tx_id_reused", "{r}"),
        other => panic!("a different body was accepted: {other:?}"),
    }
    // and the first body is still recognised as the recorded one.
    let again = c.run(&message(&c, &first), Deadline::none()).await;
    assert_eq!(again.expect("again").outcome, TxOutcome::AlreadyCommitted);
    let now = items(&base, &table).await;
    let blob = now["big0"]
        .get("blob")
        .and_then(Value::as_str)
        .unwrap_or("");
    assert!(blob.starts_with('x'));
    assert_clean(&base, &env).await;
}

/// Finding 5: a committed read whose item read came before the holder's finalize and whose
/// header read came after its completion must not return the pre-commit value after an
/// earlier read returned the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_reads_never_go_backwards() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    let key = json!({"PK":"a"}).as_object().cloned().expect("key");
    // Given a transfer whose coordinator died right after the commit (7 calls),
    let body = transfer(&table, "t", "a", "b", 30);
    let dying = env.coordinator(client_with(Some(FaultInjector::fail_from(7)), 1));
    assert!(dying
        .run(&message(&dying, &body), Deadline::none())
        .await
        .is_err());
    let fresh = env.coordinator(client());
    let first = fresh
        .read(&table, &key, Isolation::Committed)
        .await
        .expect("read");
    assert_eq!(first.and_then(|i| i["balance"].as_i64()), Some(70));
    // when a reader has read the locked item and is held before reading the header,
    let il = Interleaving::new();
    il.pause_before("R", At::op("GetItem").table(env.tx()));
    let reader = env.coordinator(il.client("R", 1));
    let (t, k) = (table.clone(), key.clone());
    let slow = tokio::spawn(async move { reader.read(&t, &k, Isolation::Committed).await });
    il.wait_paused("R").await.expect("R holds");
    // and the transaction is finalized and completed meanwhile (a later read sees 70),
    let report = fresh.run(&message(&fresh, &body), Deadline::none()).await;
    assert_eq!(report.expect("resume").outcome, TxOutcome::AlreadyCommitted);
    let later = fresh
        .read(&table, &key, Isolation::Committed)
        .await
        .expect("read");
    assert_eq!(later.and_then(|i| i["balance"].as_i64()), Some(70));
    il.release("R");
    // then the held reader returns the committed value too.
    let held = slow.await.expect("task").expect("read");
    assert_eq!(held.and_then(|i| i["balance"].as_i64()), Some(70));
}

/// Finding 6: a request's condition must not escape the parentheses it is wrapped in and
/// bypass the lock guard (`c) OR (x`): it is refused before anything is written.
#[tokio::test]
async fn a_request_condition_cannot_escape_the_lock_guard() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    // Given alice locked by a pending transfer whose coordinator died after its locks,
    let dying = env.coordinator(client_with(Some(FaultInjector::fail_from(6)), 1));
    let body = transfer(&table, "held", "alice", "bob", 30);
    assert!(dying
        .run(&message(&dying, &body), Deadline::none())
        .await
        .is_err());
    let lock_before = items(&base, &table).await["alice"].get("_txLock").cloned();
    assert!(lock_before.is_some());
    // when a message's condition closes the wrapping parenthesis early,
    let sneaky = json!({"txId":"sneaky","requests":[{"Update":{"TableName":table,
        "Key":{"PK":"alice"},"UpdateExpression":"SET #b = #b - :a",
        "ConditionExpression":"#b >= :a) OR (attribute_exists(PK)",
        "ExpressionAttributeNames":{"#b":"balance"},"ExpressionAttributeValues":{":a":10}}}]});
    let c = env.coordinator(client());
    let parsed = c.parse_message(sneaky.to_string().as_bytes());
    let outcome = match parsed {
        Err(r) => Err(r),
        Ok(m) => Ok(c.run(&m, Deadline::none()).await),
    };
    // then it is refused as malformed, and alice still holds the first transfer's lock.
    match outcome {
        Err(r) => assert_eq!(r.code, "malformed_expression", "{r}"),
        Ok(run) => panic!("the spliced condition was accepted: {run:?}"),
    }
    let lock_after = items(&base, &table).await["alice"].get("_txLock").cloned();
    assert_eq!(lock_after, lock_before);
    sweep_all(&env, client()).await;
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(100), Some(0))
    );
    assert_clean(&base, &env).await;
}

/// Finding 4: a message delivered again after its TX record was deleted (dead-letter replay,
/// a late redrive) must be refused as too old, not applied a second time.
#[tokio::test]
async fn a_redelivery_beyond_the_idempotency_horizon_is_refused_not_applied_twice() {
    use dynamodb_exactly_once_lambda::source::{Batch, SourceKind, SourcePosition, SourceRecord};
    use std::time::Duration;

    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    let config = env
        .builder()
        .retain(Duration::from_secs(60))
        .redelivery_horizon(Duration::from_secs(30))
        .build()
        .expect("valid configuration");
    let writer = coordinator_writer(
        &env,
        dynamodb_exactly_once::txn::Coordinator::new(client(), config),
    );
    let arrived = |ago_secs: u64| {
        let now = dynamodb_exactly_once::__private::epoch_millis();
        Batch::new(
            SourceKind::Sqs,
            vec![SourceRecord::new(
                {
                    let mut position = SourcePosition::new(SourceKind::Sqs, format!("m{ago_secs}"));
                    position.source_arn = Some("arn:aws:sqs:us-east-1:1:q".into());
                    position.arrived_at_ms = Some(now - ago_secs * 1000);
                    position
                },
                transfer(&table, "old", "a", "b", 10)
                    .to_string()
                    .into_bytes(),
            )],
        )
    };
    // Given a transfer committed, its record set to expire at the end of the retention,
    let report = writer.handle_batch(&arrived(1), Deadline::none()).await;
    assert_eq!(report.summary.count("committed"), 1);
    let header = base
        .get_item()
        .table_name(env.tx())
        .key("TxId", AttributeValue::S("old".into()))
        .key("Part", AttributeValue::S("#".into()))
        .send()
        .await
        .expect("get")
        .item
        .expect("header");
    let expires: u64 = header["ExpiresAt"].as_n().expect("ttl").parse().expect("n");
    let now_secs = dynamodb_exactly_once::__private::epoch_seconds();
    assert!(expires.abs_diff(now_secs + 60) <= 5, "{expires}");
    // and deleted once it passed (as DynamoDB's TTL does),
    base.delete_item()
        .table_name(env.tx())
        .key("TxId", AttributeValue::S("old".into()))
        .key("Part", AttributeValue::S("#".into()))
        .send()
        .await
        .expect("delete");
    // when the same message comes back older than the retention (a replay, a late redrive),
    let report = writer.handle_batch(&arrived(120), Deadline::none()).await;
    // then it is kept as a too_old dead letter, and the transfer stays applied once.
    assert_eq!(report.summary.count("committed"), 0, "{:?}", report.summary);
    let letters = writer
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason.code, "too_old");
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a"), balance(&now, "b")),
        (Some(90), Some(10))
    );
}

/// Finding 9: a run whose creation and commit were applied but answered with an error (then
/// retried by the SDK) decided the transaction: it reports `committed`, not `duplicate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_create_and_commit_responses_still_report_committed() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    let il = Interleaving::new();
    // Given the answers of the header's creation and of the commit are lost (both applied),
    il.lose_response("A", At::op("PutItem").table(env.tx()).attempt(1));
    il.lose_response("A", At::op("UpdateItem").table(env.tx()).attempt(1));
    let a = env.coordinator(il.client("A", 3));
    // when the SDK retries them,
    let report = a
        .run(
            &message(&a, &transfer(&table, "t", "a", "b", 5)),
            Deadline::none(),
        )
        .await
        .expect("run");
    // then the run still knows it created and committed the transaction.
    assert_eq!(report.outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a"), balance(&now, "b")),
        (Some(95), Some(5))
    );
    assert_clean(&base, &env).await;
}
