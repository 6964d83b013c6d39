//! Numbers in transactions follow DynamoDB's rules: one item per number however it is spelled
//! (`7`, `7.0`, `7e0`), and every number carried exactly up to DynamoDB's 38 significant
//! digits (refused beyond them, never rounded).

use crate::txn::env::*;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::client;
use dynamodb_exactly_once::txn::{Coordinator, TxError, TxOutcome};
use dynamodb_exactly_once::{Deadline, RejectionCode};
use serde_json::json;

/// A table whose partition key `id` is a number, with accounts 7 and 8 at 100.
async fn numeric_accounts(client: &Client) -> String {
    let table = crate::common::numeric_key_table(client, "NumericAccounts", "id").await;
    for id in ["7", "8"] {
        client
            .put_item()
            .table_name(&table)
            .item("id", AttributeValue::N(id.into()))
            .item("bal", AttributeValue::N("100".into()))
            .send()
            .await
            .expect("seed");
    }
    table
}

fn coordinator(env: &Env, numeric: &str) -> Coordinator {
    let config = env
        .builder()
        .allowed_tables([env.accounts(), numeric])
        .build()
        .expect("valid configuration");
    Coordinator::new(client(), config)
}

fn update(table: &str, id: serde_json::Value, expression: &str, amount: &str) -> serde_json::Value {
    json!({"Update": {"TableName": table, "Key": {"id": id}, "UpdateExpression": expression,
        "ExpressionAttributeNames": {"#b": "bal"},
        "ExpressionAttributeValues": {":a": serde_json::Value::Number(amount.parse().expect("number"))}}})
}

#[tokio::test]
async fn one_item_spelled_two_ways_in_one_transaction_is_a_duplicate_item() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = numeric_accounts(&base).await;
    let c = coordinator(&env, &table);
    let body = json!({"txId": "spelled-twice", "requests": [
        update(&table, json!(7), "SET #b = #b - :a", "30"),
        update(&table, json!(8), "SET #b = #b + :a", "30"),
        update(&table, json!(7.0), "SET #b = #b - :a", "1"),
    ]});
    let message = c
        .parse_message(body.to_string().as_bytes())
        .expect("valid message");
    match c.run(&message, Deadline::none()).await {
        Err(TxError::Rejected(r)) => assert_eq!(r.code, RejectionCode::DuplicateItem),
        other => panic!("expected duplicate_item, got {other:?}"),
    }
    // Nothing was applied: both accounts still hold 100.
    let items = base.scan().table_name(&table).send().await.expect("scan");
    for item in items.items() {
        assert_eq!(
            item.get("bal"),
            Some(&AttributeValue::N("100".into())),
            "{item:?}"
        );
    }
}

#[tokio::test]
async fn numbers_of_up_to_38_digits_are_committed_exactly_and_longer_ones_refused() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = numeric_accounts(&base).await;
    let c = coordinator(&env, &table);
    // The body as a producer writes it: the number's exact text.
    let body = |tx: &str, amount: &str| {
        json!({"txId": tx, "requests": [
            update(&table, json!(7), "SET #b = #b - :a", "424242"),
            update(&table, json!(8), "SET #b = #b + :a", "424242"),
        ]})
        .to_string()
        .replace("424242", amount)
    };
    // 39 significant digits: DynamoDB refuses it, so the coordinator does first.
    let refused = c
        .parse_message(body("long", "1.00000000000000000000000000000000000001").as_bytes())
        .map(|_| ());
    assert_eq!(
        refused.map_err(|r| r.code),
        Err(RejectionCode::InvalidNumber)
    );
    // 22 and 19 significant digits (beyond f64 and u64): applied as written.
    for (tx, amount) in [
        ("a", "1000000000000000000001"),
        ("b", "12345678901234567.89"),
    ] {
        let message = c.parse_message(body(tx, amount).as_bytes()).expect("valid");
        let report = c.run(&message, Deadline::none()).await.expect("run");
        assert_eq!(report.outcome, TxOutcome::Committed, "{amount}");
    }
    let balance = |id: &str| {
        let (base, table) = (base.clone(), table.clone());
        let id = id.to_string();
        async move {
            let item = base
                .get_item()
                .table_name(table)
                .key("id", AttributeValue::N(id))
                .consistent_read(true)
                .send()
                .await
                .expect("get")
                .item
                .expect("item");
            item.get("bal").cloned()
        }
    };
    assert_eq!(
        balance("8").await,
        Some(AttributeValue::N("1000012345678901234668.89".into()))
    );
    assert_eq!(
        balance("7").await,
        Some(AttributeValue::N("-1000012345678901234468.89".into()))
    );
}
