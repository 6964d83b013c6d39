//! A lock of this attempt on an item is adopted (a redelivery resuming its own attempt) only
//! when it is what this request's own lock write leaves: the lock's kind (`…#k` or not) and
//! the delete marker. Anything else (two requests naming one item, as records of versions
//! before duplicate keys were refused could hold) ends the attempt as an invalid request,
//! undone, instead of committing a change that was never applied.

use crate::txn::env::*;
use aws_sdk_dynamodb::types::AttributeValue;
use dev_testing::client;
use dynamodb_exactly_once::txn::TxError;
use dynamodb_exactly_once::Deadline;

/// `t-own` abandoned holding `a` and `b` (two `Update` locks); then `a`'s lock made to look
/// like a `Delete`'s (the delete marker) through the real client; then the message delivered
/// again to a lock-path coordinator locking `chunk` items per call.
async fn resume_with_a_foreign_request_on_our_lock(chunk: usize) {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    let body = transfer(&table, "t-own", "a", "b", 30);
    abandon(&env, &body).await;
    let held = items(&base, &table).await;
    assert_eq!(held["a"]["_txLock"], serde_json::json!("t-own#1"));
    base.update_item()
        .table_name(&table)
        .key("PK", AttributeValue::S("a".into()))
        .update_expression("SET #d = :t")
        .expression_attribute_names("#d", "_txDelete")
        .expression_attribute_values(":t", AttributeValue::Bool(true))
        .send()
        .await
        .expect("mark a as locked for a delete");
    let c = lock_path_coordinator(&env, client(), chunk, false);
    let result = c.run(&message(&c, &body), Deadline::none()).await;
    assert!(
        matches!(&result, Err(TxError::Rejected(r)) if r.message.contains("another request")),
        "chunk {chunk}: {result:?}"
    );
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a"), balance(&now, "b")),
        (Some(100), Some(0)),
        "chunk {chunk}: both undone, nothing deleted: {now:?}"
    );
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn a_lock_of_this_attempt_for_another_request_is_refused_item_by_item() {
    resume_with_a_foreign_request_on_our_lock(1).await;
}

#[tokio::test]
async fn a_lock_of_this_attempt_for_another_request_is_refused_in_a_chunk() {
    resume_with_a_foreign_request_on_our_lock(2).await;
}
