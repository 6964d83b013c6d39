//! The README's quickstart: a ratchet write and a counter add from a plain program.
//!
//! ```sh
//! AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 AWS_REGION=us-east-1 \
//! AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \
//!   cargo run -p dynamodb-exactly-once --example quickstart
//! ```
//!
//! The lines between `quickstart:start` and `quickstart:end` are the README's code block,
//! character for character (`scripts/check-docs.py` checks it), and with `tables.rs` beside it
//! the whole program: a new crate with the README's `[dependencies]`, this block as
//! `src/main.rs` and `tables.rs` builds and runs (`make readme-check` does exactly that). Run it twice and every write of the second run is
//! a `Duplicate`: the tables remember what they applied.

// quickstart:start
mod tables; // `create_table`: a table with the hash key `PK` (tables.rs beside this file)

use aws_config::BehaviorVersion;
use dynamodb_exactly_once::prelude::*;
use serde::{Deserialize, Serialize};
use tables::{create_table, Error};

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
// quickstart:end
