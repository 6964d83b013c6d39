//! Transactions built in Rust (`TxMessage::builder`): the builder gives the message the parser
//! gives for the same transaction, a built transaction commits, and the coordinator refuses a
//! built message naming a table outside its allow-list.

use crate::txn::env::*;
use dev_testing::client;
use dynamodb_exactly_once::txn::{TxError, TxMessage, TxOutcome};
use dynamodb_exactly_once::Deadline;
use serde_json::json;

/// The transfer of `env::transfer` (debit with a condition, credit), built in Rust.
fn built_transfer(table: &str, tx_id: &str, from: &str, to: &str, amount: i64) -> TxMessage {
    TxMessage::builder(tx_id)
        .update(table, json!({"PK": from}), "SET #b = #b - :a")
        .condition("#b >= :a")
        .name("#b", "balance")
        .value(":a", amount)
        .update(table, json!({"PK": to}), "SET #b = #b + :d")
        .name("#b", "balance")
        .value(":d", amount)
        .build()
        .expect("a valid transaction")
}

#[tokio::test]
async fn builder_and_parser_give_equal_messages() {
    let env = Env::new(&client()).await;
    let table = env.accounts().to_string();
    let c = env.coordinator(client());
    let parsed = message(&c, &transfer(&table, "t-eq", "a", "b", 30));
    assert_eq!(built_transfer(&table, "t-eq", "a", "b", 30), parsed);

    let all_kinds = json!({"txId": "t-kinds", "issuedAt": 1_795_600_000_000u64, "requests": [
        {"Put": {"TableName": table, "Item": {"PK": "n", "balance": 7},
                 "ConditionExpression": "attribute_not_exists(PK)"}},
        {"Delete": {"TableName": table, "Key": {"PK": "d"}}},
        {"ConditionCheck": {"TableName": table, "Key": {"PK": "g"},
                            "ConditionExpression": "attribute_not_exists(PK)"}}]});
    let built = TxMessage::builder("t-kinds")
        .issued_at(1_795_600_000_000)
        .put(&table, json!({"PK": "n", "balance": 7}))
        .condition("attribute_not_exists(PK)")
        .delete(&table, json!({"PK": "d"}))
        .check(&table, json!({"PK": "g"}), "attribute_not_exists(PK)")
        .build();
    assert_eq!(built, Ok(message(&c, &all_kinds)));

    // The same checks, the same codes.
    let reserved = TxMessage::builder("t-bad")
        .update(&table, json!({"PK": "a"}), "SET #x = :v")
        .name("#x", "_txLock")
        .value(":v", 1)
        .build();
    assert_eq!(
        reserved.map_err(|r| r.code.to_string()),
        Err("reserved_attribute".into())
    );
    let no_condition = TxMessage::builder("t-bad")
        .condition("attribute_exists(PK)")
        .build();
    assert_eq!(
        no_condition.map_err(|r| r.code.to_string()),
        Err("invalid_request".into())
    );
}

#[tokio::test]
async fn a_built_transaction_commits() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = env.accounts().to_string();
    let c = env.coordinator(client());
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    let report = c
        .run(
            &built_transfer(&table, "t-built", "a", "b", 30),
            Deadline::none(),
        )
        .await
        .expect("run");
    assert_eq!(report.outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a"), balance(&now, "b")),
        (Some(70), Some(30))
    );
}

#[tokio::test]
async fn a_built_message_outside_the_allow_list_is_refused() {
    let env = Env::new(&client()).await.without_heartbeats();
    let c = env.coordinator(client());
    let elsewhere = built_transfer("SomeoneElsesTable", "t-else", "a", "b", 1);
    match c.run(&elsewhere, Deadline::none()).await {
        Err(TxError::Rejected(r)) => assert_eq!(r.code, "table_not_allowed"),
        other => panic!("{other:?}"),
    }
}
