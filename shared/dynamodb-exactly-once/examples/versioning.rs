//! Versioned writes from a plain binary: create, update, a lost race, delete, restore, a
//! retried change, and the history newest first.
//!
//! ```sh
//! AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 AWS_REGION=us-east-1 \
//! AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \
//!   cargo run -p dynamodb-exactly-once --example versioning -- VersionedTable VersionedHistoryTable
//! ```
//!
//! The tables must exist with the template's key schemas (`ops create-tables` creates them):
//! the latest table with hash key `PK` (S), the history table with `ItemKey` (S) and
//! `Version` (N).

use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::versioning::{Latest, Revision, Versioning, VersioningConfig};
use dynamodb_exactly_once::Cost;
use dynamodb_exactly_once::ItemKey;
use serde_json::json;

type Error = Box<dyn std::error::Error>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let table = args.next().unwrap_or_else(|| "VersionedTable".into());
    let history = args
        .next()
        .unwrap_or_else(|| "VersionedHistoryTable".into());
    let config = aws_config::load_from_env().await;
    let docs = Versioning::new(
        Client::new(&config),
        VersioningConfig::builder(table, history).build()?,
    );
    let key = ItemKey::from_json(&json!({"PK": "doc#1"}))?;
    let cost = Cost::default();

    let step = |what: &str| println!("\n-- {what}");
    step("create doc#1");
    let create = Revision::create(&key, json!({"title": "Draft", "words": 120}))?;
    println!("   {:?}", docs.apply_counted(&create, &cost).await?);
    step("update from version 1 (two writers read version 1)");
    let alice = Revision::update(&key, 1, json!({"title": "Reviewed", "words": 180}))?;
    let bob = Revision::update(&key, 1, json!({"title": "Bob's take", "words": 90}))?;
    println!("   alice: {:?}", docs.apply_counted(&alice, &cost).await?);
    println!(
        "   bob:   {:?}   (lost the race: nothing written)",
        docs.apply_counted(&bob, &cost).await?
    );
    step("update from version 2, then delete version 3");
    let edit = Revision::update(&key, 2, json!({"title": "Final", "words": 200}))?;
    println!("   {:?}", docs.apply_counted(&edit, &cost).await?);
    println!(
        "   {:?}",
        docs.apply_counted(&Revision::delete(&key, 3), &cost)
            .await?
    );
    println!("   latest: {:?}", docs.get(&key).await?);
    step("restore version 2 as a new version (over the tombstone at 4)");
    let restore = Revision::restore(&key, 4, 2);
    println!("   {:?}", docs.apply_counted(&restore, &cost).await?);
    println!(
        "   the same change again (a caller retry): {:?}",
        docs.apply(&restore).await?
    );
    if let Latest::Live(latest) = docs.get(&key).await? {
        println!(
            "   latest: version {} {}",
            latest.version,
            json!(latest.item)
        );
    }
    step("history, newest first, two per page");
    let mut before = None;
    loop {
        let page = docs.history(&key, 2, before).await?;
        for e in &page.entries {
            let restored = e
                .restored_from
                .map(|v| format!(" (from {v})"))
                .unwrap_or_default();
            let item = e
                .item
                .as_ref()
                .map(|i| json!(i).to_string())
                .unwrap_or_default();
            println!("   v{} {:?}{restored} {item}", e.version, e.op);
        }
        before = page.next;
        if before.is_none() {
            break;
        }
        println!("   -- next page before v{}", before.unwrap_or_default());
    }
    // Six transactions above, five of them written (bob's was cancelled by its condition).
    println!(
        "\n   {} transactions, {} write units: {:.1} per written version",
        cost.write_calls(),
        cost.write_units(),
        cost.write_units() / 5.0
    );
    Ok(())
}
