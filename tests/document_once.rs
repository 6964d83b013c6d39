//! The document writer applies every record on the item DynamoDB identifies: numeric keys
//! follow DynamoDB's number rules.

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use dynamo_testing::{client, At, Interleaving};
use dynamodb_exactly_once::document::{Document, DocumentConfig, DocumentOutcome};
use dynamodb_exactly_once::{Deadline, ItemKey, Protocol, RecordResult};
use serde_json::json;

/// A table whose partition key `PK` is a number.
async fn numeric_key_table(client: &Client) -> String {
    let table = format!("{}NumericDocs", dynamo_testing::unique_prefix());
    client
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("PK")
                .attribute_type(ScalarAttributeType::N)
                .build()
                .expect("definition"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("PK")
                .key_type(KeyType::Hash)
                .build()
                .expect("schema"),
        )
        .send()
        .await
        .expect("create table");
    table
}

fn docs(client: Client, table: &str) -> Document {
    Document::try_new(client, DocumentConfig::new(table)).expect("valid configuration")
}

/// Apply raw bodies as one batch through the protocol.
async fn apply_bodies(docs: &Document, bodies: &[&str]) -> Vec<RecordResult<DocumentOutcome>> {
    let mut results: Vec<Option<RecordResult<DocumentOutcome>>> =
        bodies.iter().map(|_| None).collect();
    let mut records = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        match docs.parse_record(body.as_bytes()) {
            Ok(record) => records.push((i, record)),
            Err(rejection) => results[i] = Some(RecordResult::Rejected(rejection)),
        }
    }
    for (i, result) in docs.apply(records, Deadline::none()).await.results {
        results[i] = Some(result);
    }
    results
        .into_iter()
        .map(|r| r.expect("one result per record"))
        .collect()
}

// ----------------------------------------------------------------------- numeric keys

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numeric_keys_are_one_item_per_dynamodb_number_and_unrepresentable_numbers_are_kept() {
    // Given a table keyed by a number, and a writer whose first append to item 1 is slow
    let setup = client();
    let table = numeric_key_table(&setup).await;
    let il = Interleaving::new();
    il.delay_before(
        "A",
        At::op("UpdateItem").containing("\"first\""),
        Duration::from_millis(300),
    );
    let writer = docs(il.client("A", 1), &table);

    // When one batch appends to `1`, `1.0` and `1e0` (one DynamoDB key), and to two numbers
    // above 2^64 that an f64 cannot tell apart, and to numbers DynamoDB refuses
    let append = |pk: &str, v: &str| {
        format!(r#"{{"op":"list_append","key":{{"PK":{pk}}},"path":"l","values":["{v}"]}}"#)
    };
    let bodies = [
        append("1", "first"),
        append("1.0", "second"),
        append("1e0", "third"),
        append("12345678901234567890123", "big-a"),
        append("12345678901234567890124", "big-b"),
        append("1e126", "too-large"),
        append("1234567890123456789012345678901234567890", "too-precise"),
    ];
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let results = apply_bodies(&writer, &refs).await;

    // Then the three spellings of 1 are one item, appended in record order
    let key = ItemKey::from_json(&json!({"PK": 1})).expect("key");
    let item = writer.get_json(&key).await.expect("get").expect("item 1");
    assert_eq!(item["l"], json!(["first", "second", "third"]));
    // ... and no number is rounded into another item: those that cannot be written exactly
    // are rejected (kept as dead letters) with a bounded reason, never applied
    let labels: Vec<&str> = results.iter().map(RecordResult::label).collect();
    assert_eq!(
        labels,
        ["applied", "applied", "applied", "invalid", "invalid", "invalid", "invalid"]
    );
    for result in &results[3..] {
        let RecordResult::Rejected(r) = result else {
            panic!("expected a rejection: {result:?}");
        };
        assert_eq!(r.code.as_str(), "invalid_number", "{r}");
        assert!(r.message.len() < 300, "{r}");
    }
    let scan = setup.scan().table_name(&table).send().await.expect("scan");
    assert_eq!(scan.count, 1, "only item 1 exists");
}
