//! Item sizes on the lock path: a lock that leaves the item's values as they are (a
//! `ConditionCheck`, a locked read's lock, a `Delete` until its commit) saves no image, so
//! items of any size up to 400 KB can be locked that way; an `Update` or `Put` whose item and
//! saved image cannot fit one item is refused `item_too_large` before anything is locked.

use crate::txn::env::*;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::{client, client_with, FaultInjector};
use dynamodb_exactly_once::txn::{TxError, TxOutcome};
use dynamodb_exactly_once::{Deadline, RejectionCode};
use serde_json::{json, Map, Value};

/// Bytes of the padding attribute of a large item: image and item together exceed 400 KB.
const LARGE: usize = 250_000;

async fn seed_large(client: &Client, table: &str, pk: &str) {
    client
        .put_item()
        .table_name(table)
        .item("PK", AttributeValue::S(pk.into()))
        .item("balance", AttributeValue::N("1".into()))
        .item("pad", AttributeValue::S("p".repeat(LARGE)))
        .send()
        .await
        .expect("seed a large item");
}

fn check(table: &str, pk: &str) -> Value {
    json!({"ConditionCheck":{"TableName":table,"Key":{"PK":pk},
        "ConditionExpression":"attribute_exists(PK)"}})
}

fn delete(table: &str, pk: &str) -> Value {
    json!({"Delete":{"TableName":table,"Key":{"PK":pk}}})
}

fn pad_len(items: &std::collections::BTreeMap<String, Map<String, Value>>, pk: &str) -> usize {
    items
        .get(pk)
        .and_then(|i| i.get("pad"))
        .and_then(Value::as_str)
        .map_or(0, str::len)
}

#[tokio::test]
async fn a_check_or_delete_of_a_250_kb_item_locks_commits_and_rolls_back_on_the_lock_path() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed_large(&base, &table, "big").await;
    seed(&base, &table, "small", 5).await;
    let c = env.coordinator(client());
    let run = |body: Value| {
        let c = c.clone();
        async move { c.run(&message(&c, &body), Deadline::none()).await }
    };
    // A check on the large item, committed.
    let body =
        json!({"txId":"t-check","requests":[check(&table, "big"), update(&table, "small", 1)]});
    let report = run(body).await.expect("check committed");
    assert_eq!(report.outcome, TxOutcome::Committed);
    // A check on the large item, rolled back: undone without an image, the item kept as it was.
    let body =
        json!({"txId":"t-check-rb","requests":[check(&table, "big"), debit(&table, "small", 100)]});
    let report = run(body).await.expect("check rolled back");
    assert_eq!(report.outcome, TxOutcome::RolledBack { request: 1 });
    let now = items(&base, &table).await;
    assert_eq!(
        (pad_len(&now, "big"), balance(&now, "big")),
        (LARGE, Some(1))
    );
    assert_eq!(balance(&now, "small"), Some(6));
    assert_clean(&base, &env).await;
    // A delete of the large item, rolled back: the item stays.
    let body =
        json!({"txId":"t-del-rb","requests":[delete(&table, "big"), debit(&table, "small", 100)]});
    let report = run(body).await.expect("delete rolled back");
    assert_eq!(report.outcome, TxOutcome::RolledBack { request: 1 });
    let now = items(&base, &table).await;
    assert_eq!(
        (pad_len(&now, "big"), balance(&now, "big")),
        (LARGE, Some(1))
    );
    assert_clean(&base, &env).await;
    // A delete of the large item, committed: gone.
    let body =
        json!({"txId":"t-del","requests":[delete(&table, "big"), update(&table, "small", 1)]});
    let report = run(body).await.expect("delete committed");
    assert_eq!(report.outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert!(!now.contains_key("big"), "{:?}", now.keys());
    assert_eq!(balance(&now, "small"), Some(7));
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn an_update_too_large_for_the_lock_path_is_item_too_large_before_any_lock() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "a-small", 5).await;
    seed_large(&base, &table, "z-big").await;
    let counting = FaultInjector::counting();
    let c = env.coordinator(client_with(Some(counting.clone()), 3));
    // `a-small` comes first in the lock order: it would be locked before `z-big` is tried.
    let body = json!({"txId":"t-large","requests":[update(&table, "a-small", 1), update(&table, "z-big", 1)]});
    for delivery in 0..2 {
        let result = c.run(&message(&c, &body), Deadline::none()).await;
        match &result {
            Err(TxError::Rejected(r)) if r.code == RejectionCode::ItemTooLarge => {
                assert!(r.message.contains("request 1"), "{delivery}: {r:?}");
            }
            other => panic!("delivery {delivery}: expected item_too_large, got {other:?}"),
        }
    }
    // Nothing was locked: the only transactional write is none (record writes are plain).
    assert_eq!(counting.calls_of("TransactWriteItems"), 0, "no lock write");
    let now = items(&base, &table).await;
    assert_eq!(balance(&now, "a-small"), Some(5));
    assert_eq!(
        (pad_len(&now, "z-big"), balance(&now, "z-big")),
        (LARGE, Some(1))
    );
    assert_clean(&base, &env).await;
    // The fast path takes what a native TransactWriteItems takes.
    let fast = env.clone_with_fast_path(true).coordinator(client());
    let body = json!({"txId":"t-large-fast","requests":[update(&table, "a-small", 1), update(&table, "z-big", 1)]});
    let report = fast
        .run(&message(&fast, &body), Deadline::none())
        .await
        .expect("fast path");
    assert_eq!(report.outcome, TxOutcome::Committed);
}

#[tokio::test]
async fn a_locked_read_of_a_set_holding_a_250_kb_item_while_a_member_is_locked() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed_large(&base, &table, "big").await;
    seed(&base, &table, "m1", 10).await;
    seed(&base, &table, "m2", 0).await;
    // A transaction abandoned holding m1 and m2: the read cannot be one snapshot call.
    abandon(&env, &transfer(&table, "t-held", "m1", "m2", 3)).await;
    let c = env.coordinator(client());
    let key = |pk: &str| {
        (
            table.clone(),
            json!({"PK": pk}).as_object().cloned().unwrap_or_default(),
        )
    };
    let values = c
        .read_locked(&[key("big"), key("m1")])
        .await
        .expect("a locked read");
    let big = values[0].as_ref().expect("big is there");
    assert_eq!(big["pad"].as_str().map(str::len), Some(LARGE));
    assert_eq!(
        values[1].as_ref().and_then(|m| m["balance"].as_i64()),
        Some(10)
    );
    let now = items(&base, &table).await;
    assert_eq!(
        (pad_len(&now, "big"), balance(&now, "big")),
        (LARGE, Some(1))
    );
    sweep_all(&env, client()).await;
    assert_clean(&base, &env).await;
}
