//! The ratchet and the counter from a plain binary: no Lambda, no event source.
//!
//! ```sh
//! AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 AWS_REGION=us-east-1 \
//! AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \
//!   cargo run -p dynamodb-exactly-once --example plain
//! ```
//!
//! It creates two tables (`ExampleMovies`, `ExampleCounters`, hash key `PK`) when they do not
//! exist, then shows what the protocols guarantee: an older write loses whatever the order, a
//! redelivered delta counts once, and a batch is written with one request per item.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
use dynamodb_exactly_once::{Deadline, ItemKey, Protocol, RecordResult};

type Error = Box<dyn std::error::Error>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let config = aws_config::load_from_env().await;
    let client = Client::new(&config);
    ensure_table(&client, "ExampleMovies").await?;
    ensure_table(&client, "ExampleCounters").await?;
    ratchet(client.clone()).await?;
    counter(client).await
}

async fn ratchet(client: Client) -> Result<(), Error> {
    let ratchet = Ratchet::new(
        client,
        RatchetConfig::builder("ExampleMovies")
            .build()
            .expect("valid configuration"),
    );
    let newer =
        ratchet.parse_record(br#"{"op":"put","key":{"PK":"u1"},"ts":20,"item":{"v":2}}"#)?;
    let older =
        ratchet.parse_record(br#"{"op":"put","key":{"PK":"u1"},"ts":10,"item":{"v":1}}"#)?;
    println!("ratchet: newer first -> {:?}", ratchet.write(&newer).await?);
    println!("ratchet: older later -> {:?}", ratchet.write(&older).await?);
    println!("ratchet: newer again -> {:?}", ratchet.write(&newer).await?);
    let key = ItemKey::from_json(&serde_json::json!({"PK":"u1"}))?;
    println!(
        "ratchet: stored {:?}",
        ratchet
            .get_json(&key, dynamodb_exactly_once::Read::Consistent)
            .await?
    );
    Ok(())
}

async fn counter(client: Client) -> Result<(), Error> {
    let counter = Counter::new(
        client,
        CounterConfig::builder("ExampleCounters")
            .build()
            .expect("valid configuration"),
    );
    let bodies = [
        br#"{"key":{"PK":"acct#1"},"add":{"logins":1},"idempotencyKey":"e1"}"#.as_slice(),
        br#"{"key":{"PK":"acct#1"},"add":{"logins":2},"idempotencyKey":"e2"}"#,
        br#"{"key":{"PK":"acct#1"},"add":{"logins":1},"idempotencyKey":"e1"}"#,
    ];
    let records = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| Ok((i, counter.parse(b)?)))
        .collect::<Result<Vec<_>, dynamodb_exactly_once::Rejection>>()?;
    let applied = counter.apply(records, Deadline::none()).await;
    for (i, result) in &applied.results {
        match result {
            RecordResult::Done(outcome) => println!("counter: record {i} -> {outcome:?}"),
            other => println!("counter: record {i} -> {}", other.label()),
        }
    }
    println!(
        "counter: {} write request(s) for 3 records",
        applied.write_calls
    );
    let key = ItemKey::from_json(&serde_json::json!({"PK":"acct#1"}))?;
    let item = counter.get_json(&key).await?.unwrap_or_default();
    println!(
        "counter: logins = {}",
        item.get("logins").cloned().unwrap_or_default()
    );
    Ok(())
}

async fn ensure_table(client: &Client, name: &str) -> Result<(), Error> {
    let tables = client.list_tables().send().await?;
    if tables.table_names().iter().any(|t| t == name) {
        return Ok(());
    }
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("PK")
                .attribute_type(ScalarAttributeType::S)
                .build()?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("PK")
                .key_type(KeyType::Hash)
                .build()?,
        )
        .send()
        .await?;
    Ok(())
}
