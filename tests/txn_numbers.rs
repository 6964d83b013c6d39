//! Numbers in transactions follow DynamoDB's rules: one item per number however it is spelled
//! (`7`, `7.0`, `7e0`), and no number rounded through `f64` (refused when it cannot be
//! carried exactly).

use crate::txn_env;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dynamo_testing::client;
use dynamodb_exactly_once::txn::{Coordinator, TxError, TxOutcome};
use dynamodb_exactly_once::{Deadline, RejectionCode};
use serde_json::json;
use txn_env::*;

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
    let mut config = env.config();
    config.allowed_tables.insert(numeric.to_string());
    Coordinator::try_new(client(), config).expect("valid configuration")
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
async fn a_number_that_cannot_be_carried_exactly_is_refused_not_rounded() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = numeric_accounts(&base).await;
    let c = coordinator(&env, &table);
    for amount in ["1000000000000000000001", "12345678901234567.89"] {
        // The body as a producer writes it: the number's exact text.
        let body = json!({"txId": format!("big-{amount}"), "requests": [
            update(&table, json!(7), "SET #b = #b - :a", "424242"),
            update(&table, json!(8), "SET #b = #b + :a", "424242"),
        ]})
        .to_string()
        .replace("424242", amount);
        let parsed = c.parse_message(body.as_bytes()).map(|_| ());
        assert_eq!(
            parsed.map_err(|r| r.code),
            Err(RejectionCode::InvalidNumber),
            "{amount}"
        );
    }
    // An exact one is applied as written.
    let body = json!({"txId": "exact", "requests": [
        update(&table, json!(7), "SET #b = #b - :a", "0.5"),
        update(&table, json!(8), "SET #b = #b + :a", "0.5"),
    ]});
    let message = c.parse_message(body.to_string().as_bytes()).expect("valid");
    let report = c.run(&message, Deadline::none()).await.expect("run");
    assert_eq!(report.outcome, TxOutcome::Committed);
}
