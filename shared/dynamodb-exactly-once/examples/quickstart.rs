//! The README's quickstart: a ratchet write and a counter add from a plain program.
//!
//! ```sh
//! AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 AWS_REGION=us-east-1 \
//! AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \
//!   cargo run -p dynamodb-exactly-once --example quickstart
//! ```
//!
//! The lines between `quickstart:start` and `quickstart:end` are the README's code block,
//! character for character (`scripts/check-docs.py` checks it), and the whole program: a new
//! crate with the README's `[dependencies]` and this block as `src/main.rs` builds and runs
//! (`make readme-check` does exactly that). Run it twice and every write of the second run is
//! a `Duplicate`: the tables remember what they applied.

// quickstart:start
use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use dynamodb_exactly_once::prelude::*;
use serde::{Deserialize, Serialize};
use std::time::Duration;

type Error = Box<dyn std::error::Error>;

#[derive(Debug, Serialize, Deserialize)]
struct Rating {
    stars: u8,
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Region, credentials and AWS_ENDPOINT_URL_DYNAMODB from the standard AWS environment.
    let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
    let client = aws_sdk_dynamodb::Client::new(&config);
    create_table(&client, "QuickstartMovies").await?;
    create_table(&client, "QuickstartCounters").await?;

    // The newest record wins by its own timestamp, whatever order it arrives in.
    let config = RatchetConfig::builder("QuickstartMovies").build()?;
    let movies = Ratchet::new(client.clone(), config);
    let key = ItemKey::partition("PK", "user#1")?;
    let new = movies.put_record(key.clone(), 20u64, &Rating { stars: 5 })?;
    let old = movies.put_record(key.clone(), 10u64, &Rating { stars: 1 })?;
    println!("ratchet: {:?}", movies.write(&new).await?); // Applied
    println!("ratchet: {:?}", movies.write(&old).await?); // Stale: late, cannot overwrite
    println!("ratchet: {:?}", movies.write(&new).await?); // Duplicate: a redelivery
    let stored: Option<Rating> = movies.get(&key, Read::Consistent).await?;
    println!("stored: {stored:?}"); // Some(Rating { stars: 5 })

    // A delta counts once per idempotency key, however often it is delivered.
    let config = CounterConfig::builder("QuickstartCounters").build()?;
    let counters = Counter::new(client, config);
    let account = ItemKey::partition("PK", "acct#42")?;
    let login = counters.record(account, [("logins", 1)], "evt-7")?;
    println!("counter: {:?}", counters.add(&login).await?); // Applied
    println!("counter: {:?}", counters.add(&login).await?); // Duplicate: counted once
    Ok(())
}

/// A table with the string hash key `PK`, on-demand, unless it exists; waits until it is active.
async fn create_table(client: &aws_sdk_dynamodb::Client, name: &str) -> Result<(), Error> {
    let created = client
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
        .await;
    if let Err(e) = created.map_err(|e| e.into_service_error()) {
        if !e.is_resource_in_use_exception() {
            return Err(e.into()); // not "created by an earlier run"
        }
    }
    client
        .wait_until_table_exists()
        .table_name(name)
        .wait(Duration::from_secs(120))
        .await?;
    Ok(())
}
// quickstart:end
