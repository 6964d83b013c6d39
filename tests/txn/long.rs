//! Transactions that take long (issue 8, findings 8 and 10): heartbeats keep a coordinator
//! that is still working from being rolled back, by the sweeper between two deliveries and by
//! contenders while it locks; and what a plain (non-transactional) write does next to a
//! transaction, exactly as the protocol documents it.

use std::time::Duration;

use crate::txn::env::*;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::{client, At, Interleaving};
use dynamodb_exactly_once::txn::{Coordinator, TxOutcome};
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Value};

/// The header's `Attempt`.
async fn attempt_of(base: &Client, env: &Env, tx_id: &str) -> u64 {
    let header = base
        .get_item()
        .table_name(env.tx())
        .key("TxId", AttributeValue::S(tx_id.into()))
        .key("Part", AttributeValue::S("#".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get")
        .item
        .expect("header");
    header["Attempt"]
        .as_n()
        .expect("n")
        .parse()
        .expect("attempt")
}

fn add_one_to_each(table: &str, tx_id: &str, keys: &[String]) -> Value {
    let requests: Vec<Value> = keys.iter().map(|k| update(table, k, 1)).collect();
    json!({"txId": tx_id, "requests": requests})
}

/// A coordinator with the production patience and heartbeat (1 s, 250 ms).
/// A configuration with every default.
fn defaults() -> dynamodb_exactly_once::txn::TxConfig {
    dynamodb_exactly_once::txn::TxConfig::builder("TxTable", ["Table"])
        .build()
        .expect("the defaults are valid")
}

fn coordinator_with_heartbeats(env: &Env, client: Client) -> Coordinator {
    let c = env
        .builder()
        .lock_patience(defaults().lock_patience())
        .heartbeat_every(defaults().heartbeat_every())
        .concurrency(1)
        .build();
    Coordinator::new(client, c.expect("valid configuration"))
}

/// Finding 8: a transaction whose lock phase needs three deliveries (each invocation ends
/// after two lock writes) is resumed, not rolled back by a sweeper that runs between the
/// deliveries: each delivery writes a heartbeat before locking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_spanning_three_deliveries_is_not_rolled_back_between_them() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    for k in &keys {
        seed(&base, &table, k, 0).await;
    }
    let body = add_one_to_each(&table, "long", &keys);
    let il = Interleaving::new();
    // Given a first delivery that locks two items, then ends (its third lock write never
    // leaves: the invocation timed out),
    il.refuse("d1", At::op("TransactWriteItems").nth(3));
    let d1 = coordinator_with_heartbeats(&env, il.client("d1", 1));
    assert!(d1
        .run(&message(&d1, &body), Deadline::none())
        .await
        .is_err());
    // and a second delivery, longer than the sweeper's stale threshold after the creation,
    // that adopts those two, locks two more and ends the same way,
    tokio::time::sleep(Duration::from_millis(2200)).await;
    il.refuse("d2", At::op("TransactWriteItems").nth(3));
    let d2 = coordinator_with_heartbeats(&env, il.client("d2", 1));
    assert!(d2
        .run(&message(&d2, &body), Deadline::none())
        .await
        .is_err());
    // when the sweeper (stale after 2 s) runs before the third delivery,
    let summary = env
        .sweeper(client(), 2, 3600)
        .sweep(Deadline::none())
        .await
        .expect("sweep");
    // then it leaves the transaction alone (the second delivery's heartbeat is recent),
    assert_eq!((summary.stale, summary.rolled_back), (0, 0), "{summary:?}");
    // and the third delivery commits it in its first attempt, each item changed once.
    let d3 = coordinator_with_heartbeats(&env, client());
    let report = d3
        .run(&message(&d3, &body), Deadline::none())
        .await
        .expect("third delivery");
    assert_eq!(report.outcome, TxOutcome::Committed);
    assert_eq!(attempt_of(&base, &env, "long").await, 1);
    let now = items(&base, &table).await;
    for k in &keys {
        assert_eq!(balance(&now, k), Some(1), "{k}");
    }
    assert_clean(&base, &env).await;
}

/// Finding 8: a contender that meets the lock of a coordinator that is still locking (slowly:
/// every lock write takes 250 ms) waits for it instead of rolling it back after its patience.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contender_does_not_roll_back_a_holder_that_is_still_locking() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    for k in &keys {
        seed(&base, &table, k, 0).await;
    }
    let il = Interleaving::new();
    for _ in &keys {
        il.delay_before(
            "slow",
            At::op("TransactWriteItems"),
            Duration::from_millis(250),
        );
    }
    // Given a holder whose lock phase takes about 2 s (twice the contenders' patience),
    let slow = coordinator_with_heartbeats(&env, il.client("slow", 1));
    let body = add_one_to_each(&table, "slow", &keys);
    let holder = tokio::spawn(async move {
        let m = message(&slow, &body);
        slow.run(&m, Deadline::none()).await
    });
    // (it holds the first item once its second lock write is on its way),
    while il
        .calls("slow")
        .iter()
        .filter(|c| c.operation == "TransactWriteItems")
        .count()
        < 2
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // when a contender needs that item meanwhile,
    let contender = coordinator_with_heartbeats(&env, client());
    let body = add_one_to_each(&table, "contender", &keys[..1]);
    let report = contender
        .run(&message(&contender, &body), Deadline::none())
        .await
        .expect("contender");
    // then both commit, the holder in its first attempt (it was never rolled back).
    assert_eq!(report.outcome, TxOutcome::Committed);
    let held = holder.await.expect("join").expect("holder");
    assert_eq!(held.outcome, TxOutcome::Committed);
    assert_eq!(attempt_of(&base, &env, "slow").await, 1);
    let now = items(&base, &table).await;
    assert_eq!(balance(&now, "k0"), Some(2));
    assert_clean(&base, &env).await;
}

/// A plain (non-transactional) `UpdateItem` on an account.
async fn plain_write(
    base: &Client,
    table: &str,
    pk: &str,
    update: &str,
    joins: bool,
) -> Result<(), String> {
    let mut req = base
        .update_item()
        .table_name(table)
        .key("PK", AttributeValue::S(pk.into()))
        .update_expression(update)
        .expression_attribute_values(":five", AttributeValue::N("5".into()));
    if joins {
        // Joining the protocol: refused while a transaction holds the item, and a fresh
        // version token, so a transaction that read the item before sees the change.
        req = req
            .condition_expression("attribute_not_exists(#lock)")
            .expression_attribute_names("#lock", "_txLock")
            .expression_attribute_names("#ver", "_txVer")
            .expression_attribute_values(":ver", AttributeValue::S("plain-1".into()));
    }
    req.send().await.map(|_| ()).map_err(|e| format!("{e:?}"))
}

/// Finding 10: plain writes next to a transaction that rolls back, exactly as the protocol
/// documents them: a write that joins the protocol is never lost (it lands before the lock
/// and the lock saves it, or it is refused while locked); a write that does not join it and
/// lands while the item is locked is undone by the rollback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_writes_next_to_a_rollback_behave_as_documented() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    // T credits a, then debits b, which cannot pay: T rolls back.
    let body = json!({"txId":"t","requests":[update(&table, "a", 10), debit(&table, "b", 50)]});
    let il = Interleaving::new();
    il.pause_before("T", At::op("TransactWriteItems"));
    il.pause_before(
        "T",
        At::op("TransactWriteItems").containing(r#"{"PK":{"S":"b"}}"#),
    );
    let t = env.sequential(il.client("T", 1));
    let run = tokio::spawn(async move {
        let m = message(&t, &body);
        t.run(&m, Deadline::none()).await
    });
    // Given T paused after reading a, before locking it,
    il.wait_paused("T").await.expect("paused before locking a");
    // a plain write that joins the protocol lands (a is not locked yet);
    let joined = "SET balance = balance + :five, #ver = :ver";
    plain_write(&base, &table, "a", joined, true)
        .await
        .expect("lands before the lock");
    il.release("T");
    // T's lock write sees the new token, reads a again and locks it (image 105).
    il.wait_paused("T").await.expect("paused before locking b");
    // While T holds a: the joining write is refused, a plain one lands.
    let refused = plain_write(&base, &table, "a", joined, true).await;
    assert!(
        refused.is_err_and(|e| e.contains("ConditionalCheckFailed")),
        "refused while locked"
    );
    plain_write(&base, &table, "a", "SET note = :five", false)
        .await
        .expect("a plain write is not refused");
    il.release("T");
    let report = run.await.expect("join").expect("T");
    assert_eq!(report.outcome, TxOutcome::RolledBack { request: 1 });
    // Then the first write survived the rollback, and the non-joining one was undone.
    let now = items(&base, &table).await;
    assert_eq!(balance(&now, "a"), Some(105));
    assert!(!now["a"].contains_key("note"), "{:?}", now["a"]);
    assert_eq!(balance(&now, "b"), Some(0));
    assert_clean(&base, &env).await;
}

/// Issue 18, finding 7: the sweeper reads the index, then drives what it found; a redelivery
/// that resumed the transaction in between (its heartbeat moved `LastTouched`) must not be
/// rolled back by that drive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_leaves_a_transaction_a_redelivery_resumed_after_its_query() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    for k in &keys {
        seed(&base, &table, k, 0).await;
    }
    let body = add_one_to_each(&table, "resumed", &keys);
    let il = Interleaving::new();
    // Given a first delivery that locked two items and ended, stale after 2 s,
    il.refuse("d1", At::op("TransactWriteItems").nth(3));
    let d1 = coordinator_with_heartbeats(&env, il.client("d1", 1));
    assert!(d1
        .run(&message(&d1, &body), Deadline::none())
        .await
        .is_err());
    tokio::time::sleep(Duration::from_millis(2200)).await;
    // a sweeper that found it stale in the index and is held before it drives it,
    il.pause_before("S", At::op("GetItem").table(env.tx()));
    let sweeper = env.sweeper(il.client("S", 1), 2, 3600);
    let sweep = tokio::spawn(async move { sweeper.sweep(Deadline::none()).await });
    il.wait_paused("S")
        .await
        .expect("the sweeper holds before its drive");
    // and a redelivery that resumes it meanwhile (a heartbeat, two more locks, then it ends),
    il.refuse("d2", At::op("TransactWriteItems").nth(3));
    let d2 = coordinator_with_heartbeats(&env, il.client("d2", 1));
    assert!(d2
        .run(&message(&d2, &body), Deadline::none())
        .await
        .is_err());
    // when the sweeper goes on,
    il.release("S");
    let summary = sweep.await.expect("joined").expect("sweep");
    // then it does not roll the resumed transaction back,
    assert_eq!(summary.rolled_back, 0, "{summary:?}");
    // and the third delivery commits it in its first attempt.
    let d3 = coordinator_with_heartbeats(&env, client());
    let report = d3
        .run(&message(&d3, &body), Deadline::none())
        .await
        .expect("third delivery");
    assert_eq!(report.outcome, TxOutcome::Committed);
    assert_eq!(attempt_of(&base, &env, "resumed").await, 1);
    assert_clean(&base, &env).await;
}

/// Review finding 10: silence was `now − LastTouched` across hosts. A holder whose clock runs
/// ahead (its `LastTouched` in this host's future) never looked silent, so a contender waited
/// on its locks until the contender's deadline, every delivery, until the sweeper came. Silence
/// is now `LastTouched` unchanged for the patience on the contender's own monotonic clock.
#[tokio::test]
async fn a_dead_holder_with_a_clock_ahead_is_rolled_back_after_the_patience() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    // Given a holder that died holding both items, its clock an hour ahead of ours,
    let held = transfer(&table, "t-ahead", "alice", "bob", 30);
    abandon(&env, &held).await;
    let ahead = dynamodb_exactly_once::__private::epoch_millis() + 3_600_000;
    let ahead = AttributeValue::N(ahead.to_string());
    set_header(&base, &env, "t-ahead", "LastTouched", ahead).await;
    // when a contender needs the items, within a deadline of 10 patiences,
    let contender = env.coordinator(client());
    let body = transfer(&table, "t-behind", "alice", "bob", 5);
    let deadline = Deadline::after(env.config().lock_patience() * 10);
    let report = contender.run(&message(&contender, &body), deadline).await;
    // then it rolls the silent holder back and commits (it used to wait to its deadline).
    assert_eq!(report.expect("contender").outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(95), Some(5))
    );
}
