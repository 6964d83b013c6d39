//! Versioned-write benchmark: read-modify-write updates (`get` + one `TransactWriteItems`)
//! under contention, and the write units of one versioned update by item size (from
//! `ReturnConsumedCapacity`). Scenarios (one child process each):
//!
//! * `contention WRITERS ITEMS`: `WRITERS` concurrent writers, each repeatedly reading a random
//!   item of `ITEMS` and writing its next version (a conflict reads again), for at most
//!   [`MAX_UPDATES`] updates or [`MAX_SECONDS`];
//! * `units BYTES`: one update of an item carrying a `BYTES`-long string.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use dev_testing::{client_with, template_tables, FaultInjector};
use dynamodb_exactly_once::__private::item_size;
use dynamodb_exactly_once::versioning::{
    Latest, Revision, VersionOutcome, Versioning, VersioningConfig,
};
use dynamodb_exactly_once::{Cost, Item, ItemKey};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::common::{next_arg, spawn_worker};

/// Successful updates after which a contention scenario stops.
const MAX_UPDATES: usize = 400;
/// Seconds after which a contention scenario stops.
const MAX_SECONDS: u64 = 8;
const WRITERS: [usize; 3] = [1, 8, 32];
const ITEMS: [usize; 2] = [1, 100];
const SIZES: [usize; 4] = [100, 900, 3_000, 10_000];

pub async fn run() -> Result<(), String> {
    println!(
        "versioned writes against DynamoDB Local ({})",
        dev_testing::endpoint()
    );
    println!("each update: a consistent GetItem, then one TransactWriteItems (latest + history)");
    println!();
    // DynamoDB Local is a JVM: warm it up so the first measured run is not its JIT time.
    spawn_worker(&args(&["contention", "8", "100"]))?;
    println!(
        "{:<8} {:>6} {:>8} {:>8} {:>10} {:>13} {:>14} {:>11}",
        "writers",
        "items",
        "updates",
        "seconds",
        "updates/s",
        "tx/update",
        "conflicts/upd",
        "WCU/update"
    );
    for items in ITEMS {
        for writers in WRITERS {
            let r = spawn_worker(&args(&[
                "contention",
                &writers.to_string(),
                &items.to_string(),
            ]))?;
            let num = |k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            let updates = num("updates").max(1.0);
            println!(
                "{:<8} {:>6} {:>8.0} {:>8.2} {:>10.0} {:>13.2} {:>14.2} {:>11.2}",
                writers,
                items,
                num("updates"),
                num("seconds"),
                num("updates") / num("seconds").max(f64::MIN_POSITIVE),
                num("transactions") / updates,
                num("conflicts") / updates,
                num("write_units") / updates,
            );
        }
    }
    println!();
    println!(
        "{:<14} {:>13} {:>10} {:>11} {:>22}",
        "payload bytes", "latest bytes", "row bytes", "WCU/update", "2x(KB latest + KB row)"
    );
    for bytes in SIZES {
        let r = spawn_worker(&args(&["units", &bytes.to_string()]))?;
        let num = |k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        println!(
            "{:<14} {:>13.0} {:>10.0} {:>11.1} {:>22.0}",
            bytes,
            num("latest_bytes"),
            num("row_bytes"),
            num("write_units"),
            num("expected_units")
        );
    }
    Ok(())
}

fn args(parts: &[&str]) -> Vec<String> {
    std::iter::once("versioning")
        .chain(parts.iter().copied())
        .map(String::from)
        .collect()
}

pub async fn worker(args: Vec<String>) -> Result<(), String> {
    let mut args = args.into_iter();
    let mode: String = next_arg(&mut args, "mode")?;
    match mode.as_str() {
        "contention" => {
            let writers = next_arg(&mut args, "writers")?;
            contention(writers, next_arg(&mut args, "items")?).await
        }
        "units" => units(next_arg(&mut args, "bytes")?).await,
        other => Err(format!("versioning worker: unknown mode {other}")),
    }
}

/// A store on fresh template tables (with a counting client, and the tables' names) with
/// `items` created items.
struct Bench {
    store: Versioning,
    client: aws_sdk_dynamodb::Client,
    counter: FaultInjector,
    config: VersioningConfig,
    keys: Vec<ItemKey>,
}

async fn bench(items: usize, payload: &str) -> Result<Bench, String> {
    let counter = FaultInjector::counting();
    let client = client_with(Some(counter.clone()), 3);
    let tables = template_tables(&client, &["VersionedTable", "VersionedHistoryTable"]).await;
    let config =
        VersioningConfig::builder(&tables["VersionedTable"], &tables["VersionedHistoryTable"])
            .build()
            .expect("valid configuration");
    let store = Versioning::new(client.clone(), config.clone());
    let mut keys = Vec::with_capacity(items);
    for i in 0..items {
        let key =
            ItemKey::from_json(&json!({"PK": format!("doc#{i}")})).map_err(|e| e.to_string())?;
        let change = Revision::create(&key, json!({"n": 0, "payload": payload}))
            .map_err(|e| e.to_string())?;
        store.apply(&change).await.map_err(|e| e.to_string())?;
        keys.push(key);
    }
    Ok(Bench {
        store,
        client,
        counter,
        config,
        keys,
    })
}

async fn contention(writers: usize, items: usize) -> Result<(), String> {
    let Bench {
        store,
        counter,
        keys,
        ..
    } = bench(items, "").await?;
    let before = counter.calls_of("TransactWriteItems");
    let (cost, done, conflicts) = (Cost::default(), AtomicUsize::new(0), AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(MAX_SECONDS);
    let started = Instant::now();
    let results = futures::future::join_all((0..writers).map(|w| {
        let (store, keys, cost, done, conflicts) = (&store, &keys, &cost, &done, &conflicts);
        async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64);
            while done.load(Ordering::SeqCst) < MAX_UPDATES && Instant::now() < deadline {
                let key = &keys[rng.random_range(0..keys.len())];
                match update_once(store, key, w, cost).await? {
                    true => done.fetch_add(1, Ordering::SeqCst),
                    false => conflicts.fetch_add(1, Ordering::SeqCst),
                };
            }
            Ok::<(), String>(())
        }
    }))
    .await;
    let seconds = started.elapsed().as_secs_f64();
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    println!(
        "{}",
        json!({
            "writers": writers, "items": items, "seconds": seconds,
            "updates": done.load(Ordering::SeqCst),
            "conflicts": conflicts.load(Ordering::SeqCst),
            "transactions": counter.calls_of("TransactWriteItems") - before,
            "write_units": cost.write_units(),
        })
    );
    Ok(())
}

/// Read the item and write its next version: `true` when written, `false` on a lost race.
async fn update_once(
    store: &Versioning,
    key: &ItemKey,
    writer: usize,
    cost: &Cost,
) -> Result<bool, String> {
    let Latest::Live(latest) = store.get(key).await.map_err(|e| e.to_string())? else {
        return Err(format!("{} is not live", key.canonical()));
    };
    let mut item = latest.item.clone();
    let n = item.get("n").and_then(Value::as_u64).unwrap_or(0);
    item.insert("n".into(), json!(n + 1));
    item.insert("by".into(), json!(writer));
    let change =
        Revision::update(key, latest.version, Value::Object(item)).map_err(|e| e.to_string())?;
    match store.apply_counted(&change, cost).await {
        Ok(VersionOutcome::Written { .. }) => Ok(true),
        Ok(_) => Ok(false),
        Err(err) if err.is_retryable() => Ok(false),
        Err(err) => Err(err.to_string()),
    }
}

async fn units(bytes: usize) -> Result<(), String> {
    let b = bench(1, &"x".repeat(bytes)).await?;
    let cost = Cost::default();
    if !update_once(&b.store, &b.keys[0], 0, &cost).await? {
        return Err("the update lost a race it could not lose".into());
    }
    // What DynamoDB bills: both puts by started KB, twice for a transaction.
    let key = b.keys[0].to_item().map_err(|e| e.to_string())?;
    let latest = raw(&b, b.config.table(), key).await?;
    let row_key = [
        (
            "ItemKey".to_string(),
            AttributeValue::S(b.keys[0].canonical().into()),
        ),
        ("Version".to_string(), AttributeValue::N("2".into())),
    ];
    let row = raw(&b, b.config.history_table(), row_key.into_iter().collect()).await?;
    let kb = |item: &Item| item_size(item).div_ceil(1024);
    println!(
        "{}",
        json!({"bytes": bytes, "write_units": cost.write_units(),
               "latest_bytes": item_size(&latest), "row_bytes": item_size(&row),
               "expected_units": 2 * (kb(&latest) + kb(&row))})
    );
    Ok(())
}

async fn raw(b: &Bench, table: &str, key: Item) -> Result<Item, String> {
    let out = b
        .client
        .get_item()
        .table_name(table)
        .set_key(Some(key))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    out.item
        .ok_or_else(|| format!("{table}: the item is missing"))
}
