//! The lock path's size check sees an item as committed: an attempt resumed while it holds a
//! large item (a deadline deferral, a crash, a duplicate delivery), or one that meets another
//! transaction's lock on it, commits what the first delivery accepted; the lock and image
//! already on the item are never counted as its size.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::txn::env::*;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::txn::{Coordinator, TxOutcome};
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Map, Value};

/// Bytes of the padding of a large item: image and new value fit 400 KB together (about
/// 240 KB), but counted with a saved image they would not.
const LARGE: usize = 120_000;

async fn seed_padded(client: &Client, table: &str, pk: &str, pad: usize) {
    client
        .put_item()
        .table_name(table)
        .item("PK", AttributeValue::S(pk.into()))
        .item("balance", AttributeValue::N("100".into()))
        .item("pad", AttributeValue::S("p".repeat(pad)))
        .send()
        .await
        .expect("seed a large item");
}

fn pad_len(items: &std::collections::BTreeMap<String, Map<String, Value>>, pk: &str) -> usize {
    items
        .get(pk)
        .and_then(|i| i.get("pad"))
        .and_then(Value::as_str)
        .map_or(0, str::len)
}

/// `body` run on the lock path by a coordinator that dies after its first two lock writes
/// (every call after them refused): it holds two items, its attempt undecided.
async fn abandon_after_two_locks(env: &Env, body: &Value) {
    let config = env
        .builder()
        .fast_path(false)
        .lock_chunk(1)
        .read_ahead(false)
        .build()
        .expect("valid configuration");
    let locks = Arc::new(AtomicUsize::new(0));
    let faults = FaultInjector::by_request(move |operation, _| {
        if locks.load(Ordering::SeqCst) >= 2 {
            return Fault::Refuse;
        }
        if operation == "TransactWriteItems" {
            locks.fetch_add(1, Ordering::SeqCst);
        }
        Fault::None
    });
    let dying = Coordinator::new(client_with(Some(faults), 1), config);
    let result = dying.run(&message(&dying, body), Deadline::none()).await;
    assert!(result.is_err(), "{result:?}");
}

/// `body` abandoned on the lock path holding its two items, then delivered again.
async fn resume(env: &Env, body: &Value, held: &str) -> TxOutcome {
    let base = client();
    abandon_after_two_locks(env, body).await;
    let now = items(&base, env.accounts()).await;
    assert!(
        now[held].contains_key("_txImage"),
        "held: {:?}",
        now[held].keys()
    );
    let c = env.coordinator(client());
    c.run(&message(&c, body), Deadline::none())
        .await
        .expect("the resumed attempt")
        .outcome
}

#[tokio::test]
async fn a_resumed_attempt_holding_a_120_kb_update_commits() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed_padded(&base, &table, "big", LARGE).await;
    seed(&base, &table, "small", 0).await;
    let body = transfer(&table, "t-resume-update", "big", "small", 30);
    assert_eq!(resume(&env, &body, "big").await, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "big"), balance(&now, "small")),
        (Some(70), Some(30))
    );
    assert_eq!(pad_len(&now, "big"), LARGE);
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn a_resumed_attempt_holding_a_150_kb_put_over_a_150_kb_item_commits() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed_padded(&base, &table, "big", 150_000).await;
    seed(&base, &table, "small", 0).await;
    let put = json!({"Put":{"TableName":table,"Item":{"PK":"big","balance":7,
        "pad":"q".repeat(150_000)}}});
    let body = json!({"txId":"t-resume-put","requests":[put, update(&table, "small", 1)]});
    assert_eq!(resume(&env, &body, "big").await, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "big"), balance(&now, "small")),
        (Some(7), Some(1))
    );
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn an_attempt_meeting_another_lock_on_a_120_kb_item_commits_after_rolling_it_back() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed_padded(&base, &table, "big", LARGE).await;
    seed(&base, &table, "small", 0).await;
    seed(&base, &table, "other", 0).await;
    // U holds `big` (its image saved beside its new value) and is abandoned.
    abandon_after_two_locks(&env, &transfer(&table, "t-holder", "big", "small", 10)).await;
    let c = env.coordinator(client());
    let body = transfer(&table, "t-after", "big", "other", 30);
    let report = c.run(&message(&c, &body), Deadline::none()).await;
    assert_eq!(report.expect("T").outcome, TxOutcome::Committed);
    // U's other lock (on `small`) is undone by the sweeper.
    sweep_all(&env, client()).await;
    let now = items(&base, &table).await;
    assert_eq!(
        (
            balance(&now, "big"),
            balance(&now, "small"),
            balance(&now, "other")
        ),
        (Some(70), Some(0), Some(30)),
        "U rolled back, T committed"
    );
    assert_eq!(pad_len(&now, "big"), LARGE);
    assert_clean(&base, &env).await;
}
