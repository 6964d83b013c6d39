//! Chunked lock writes (issue 18, the lock path for large transactions): up to
//! `TxConfig::lock_chunk` items locked by one `TransactWriteItems` with the header check,
//! against DynamoDB Local; a chunk that meets a foreign lock or a failed condition.

use crate::txn::env::*;
use dev_testing::{client, client_with, FaultInjector};
use dynamodb_exactly_once::txn::{Coordinator, TxOutcome};
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Value};

fn chunked(env: &Env, client: aws_sdk_dynamodb::Client, chunk: usize) -> Coordinator {
    lock_path_coordinator(env, client, chunk, env.config().read_ahead())
}

#[tokio::test]
async fn a_transaction_of_150_items_locks_them_in_two_calls() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    let requests: Vec<Value> = (0..150)
        .map(|i| update(&table, &format!("k{i:03}"), 1))
        .collect();
    for i in 0..150 {
        seed(&base, &table, &format!("k{i:03}"), 0).await;
    }
    let counting = FaultInjector::counting();
    let c = chunked(&env, client_with(Some(counting.clone()), 3), 99);
    let body = json!({"txId":"t-150","requests":requests});
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert_eq!(report.outcome, TxOutcome::Committed);
    assert_eq!(
        counting.calls_of("TransactWriteItems"),
        3,
        "the record with its part, then 99 + 51 items"
    );
    let now = items(&base, &table).await;
    assert!((0..150).all(|i| balance(&now, &format!("k{i:03}")) == Some(1)));
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn a_chunk_meets_a_foreign_lock_then_commits() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    for pk in ["alice", "bob", "carol"] {
        seed(&base, &table, pk, 100).await;
    }
    // Given a lock-path transfer that died holding alice and bob,
    abandon(&env, &transfer(&table, "t-dead", "alice", "bob", 30)).await;
    // when a chunked transaction over the three items runs,
    let c = chunked(&env, client(), 3);
    let body = json!({"txId":"t-chunk","requests":[
        update(&table, "alice", 1), update(&table, "bob", 1), update(&table, "carol", 1)]});
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    // then it rolls the silent holder back and commits on the restored values.
    assert_eq!(report.outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    let got: Vec<Option<i64>> = ["alice", "bob", "carol"]
        .iter()
        .map(|p| balance(&now, p))
        .collect();
    assert_eq!(got, [Some(101), Some(101), Some(101)]);
    // (The dead transfer's record, rolled back by the contender, is completed by a sweep.)
    sweep_all(&env, client()).await;
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn a_failed_condition_in_a_chunk_rolls_back_with_nothing_applied() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    for pk in ["alice", "bob", "carol"] {
        seed(&base, &table, pk, 10).await;
    }
    let c = chunked(&env, client(), 3);
    let body = json!({"txId":"t-over","requests":[
        update(&table, "alice", 1), debit(&table, "bob", 50), update(&table, "carol", 1)]});
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert_eq!(report.outcome, TxOutcome::RolledBack { request: 1 });
    let now = items(&base, &table).await;
    let got: Vec<Option<i64>> = ["alice", "bob", "carol"]
        .iter()
        .map(|p| balance(&now, p))
        .collect();
    assert_eq!(got, [Some(10), Some(10), Some(10)]);
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn a_chunk_waits_on_a_live_holder_without_falling_to_item_by_item() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    for k in &keys {
        seed(&base, &table, k, 100).await;
    }
    // Given a transfer holding k3 and k4 whose coordinator shows signs of life for 1.2 s
    abandon(&env, &transfer(&table, "t-live", "k3", "k4", 30)).await;
    let (beat_client, beat_env) = (client(), env.clone());
    let beating = tokio::spawn(async move {
        for _ in 0..12 {
            let now = dynamodb_exactly_once::__private::epoch_millis();
            let touched = aws_sdk_dynamodb::types::AttributeValue::N(now.to_string());
            set_header(&beat_client, &beat_env, "t-live", "LastTouched", touched).await;
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    // When a transaction over the ten items locks them in one chunk
    let counting = FaultInjector::counting();
    let c = chunked(&env, client_with(Some(counting.clone()), 3), 10);
    let requests: Vec<Value> = keys.iter().map(|k| update(&table, k, 1)).collect();
    let body = json!({"txId":"t-waiting","requests":requests});
    let report = c.run(&message(&c, &body), Deadline::none()).await;
    beating.await.expect("heartbeats");
    // Then it waits the holder out and sends the chunk again (its waits are not tries): the
    // record and one or two chunk calls, not one call per item
    assert_eq!(report.expect("run").outcome, TxOutcome::Committed);
    let calls = counting.calls_of("TransactWriteItems");
    assert!(calls <= 3, "{calls} TransactWriteItems: {counting:?}");
    let now = items(&base, &table).await;
    assert!(
        keys.iter().all(|k| balance(&now, k) == Some(101)),
        "{now:?}"
    );
    sweep_all(&env, client()).await;
    assert_clean(&base, &env).await;
}
