//! Mixed versions: what this release does to the records and locks the previous release (the
//! one before keep locks) left, during a rolling deploy or after a rollback. Each row of the
//! protocol page's table "Mixed versions" names its test here.
//!
//! The previous release wrote every lock as `txId#attempt`: a `Delete` or a `ConditionCheck`
//! of an existing item saved the item as its image (`_txImage`), a check or delete of an
//! absent item inserted it transient (`_txTransient`, `_txDelete`). [`downgrade_keep_lock`]
//! rewrites this release's keep lock that way.

use crate::txn::env::*;
use dev_testing::client;
use dynamodb_exactly_once::txn::TxOutcome;
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Value};

fn delete(table: &str, pk: &str) -> Value {
    json!({"Delete":{"TableName":table,"Key":{"PK":pk},
        "ConditionExpression":"attribute_exists(PK)"}})
}

fn check(table: &str, pk: &str, condition: &str) -> Value {
    json!({"ConditionCheck":{"TableName":table,"Key":{"PK":pk},"ConditionExpression":condition}})
}

/// `requests` (the first on `a`) abandoned on the lock path holding every item, `a`'s keep
/// lock rewritten as the previous release writes it: an attempt that release started.
async fn started_by_the_previous_release(env: &Env, tx_id: &str, requests: Vec<Value>) -> Value {
    let base = client();
    let body = json!({"txId": tx_id, "requests": requests});
    abandon(env, &body).await;
    assert!(
        downgrade_keep_lock(&base, env.accounts(), "a").await,
        "a keep lock on a: {:?}",
        items(&base, env.accounts()).await.get("a")
    );
    body
}

async fn resumed(env: &Env, body: &Value) -> TxOutcome {
    let c = env.coordinator(client());
    c.run(&message(&c, body), Deadline::none())
        .await
        .expect("resumed by this release")
        .outcome
}

#[tokio::test]
async fn an_attempt_the_previous_release_started_with_a_delete_is_resumed_and_commits() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    let requests = vec![delete(&table, "a"), update(&table, "b", 100)];
    let body = started_by_the_previous_release(&env, "t-old-delete", requests).await;
    assert_eq!(resumed(&env, &body).await, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!((now.get("a"), balance(&now, "b")), (None, Some(100)));
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn an_attempt_the_previous_release_started_with_a_check_of_an_existing_item_commits() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    let requests = vec![
        check(&table, "a", "attribute_exists(PK)"),
        update(&table, "b", 1),
    ];
    let body = started_by_the_previous_release(&env, "t-old-check", requests).await;
    assert_eq!(resumed(&env, &body).await, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a"), balance(&now, "b")),
        (Some(100), Some(1))
    );
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn an_attempt_the_previous_release_started_with_a_check_of_an_absent_item_commits() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "b", 0).await;
    let requests = vec![
        check(&table, "a", "attribute_not_exists(PK)"),
        update(&table, "b", 1),
    ];
    let body = started_by_the_previous_release(&env, "t-old-absent", requests).await;
    assert_eq!(resumed(&env, &body).await, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!((now.get("a"), balance(&now, "b")), (None, Some(1)));
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn a_lock_of_the_previous_release_is_undone_to_its_image_when_its_attempt_is_swept() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    let requests = vec![delete(&table, "a"), update(&table, "b", 100)];
    started_by_the_previous_release(&env, "t-old-swept", requests).await;
    let summary = sweep_all(&env, client()).await;
    assert_eq!(summary.rolled_back, 1, "{summary:?}");
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a"), balance(&now, "b")),
        (Some(100), Some(0))
    );
    assert_clean(&base, &env).await;
}
