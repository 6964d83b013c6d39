//! Sweeper cost with many finished transactions present (`bench txn`, scenario `sweep`).
//!
//! 100,000 completed headers as completion leaves them (out of the sweep index, `ExpiresAt`
//! set): a sweep makes its 16 index queries and no write, whatever their number; DynamoDB's
//! TTL deletes them after the retention, at no write cost.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use aws_sdk_dynamodb::Client;
use dev_testing::{client_with, template_tables};
use dynamodb_exactly_once::__private::{epoch_millis, epoch_seconds};
use dynamodb_exactly_once::txn::sweep::{SweepConfig, SweepSummary, Sweeper};
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once::Item;
use futures::StreamExt;
use serde_json::{json, Value};

const FINISHED: usize = 100_000;
const RETAIN: Duration = Duration::from_secs(24 * 3600);

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// A completed header as completion leaves it (no `SweepKey`, `ExpiresAt`).
fn header(i: usize) -> Item {
    Item::from([
        ("TxId".to_string(), s(format!("done-{i}"))),
        ("Part".to_string(), s("#")),
        ("State".to_string(), s("completed")),
        ("Decision".to_string(), s("committed")),
        ("Version".to_string(), n(4)),
        ("Attempt".to_string(), n(1)),
        ("Requests".to_string(), s("[]")),
        ("LastTouched".to_string(), n(epoch_millis())),
        (
            "ExpiresAt".to_string(),
            n(epoch_seconds() + RETAIN.as_secs()),
        ),
    ])
}

async fn put_all(client: &Client, table: &str, count: usize) -> Result<(), String> {
    let batches: Vec<Vec<usize>> = (0..count)
        .collect::<Vec<_>>()
        .chunks(25)
        .map(<[usize]>::to_vec)
        .collect();
    let writes = batches.into_iter().map(|batch| async move {
        let mut pending: Vec<WriteRequest> = batch
            .into_iter()
            .map(|i| {
                let put = PutRequest::builder().set_item(Some(header(i))).build();
                put.map(|p| WriteRequest::builder().put_request(p).build())
            })
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        while !pending.is_empty() {
            let out = client
                .batch_write_item()
                .request_items(table, pending)
                .send()
                .await
                .map_err(|e| format!("BatchWriteItem: {e}"))?;
            pending = out
                .unprocessed_items
                .and_then(|mut m| m.remove(table))
                .unwrap_or_default();
        }
        Ok::<(), String>(())
    });
    let results: Vec<Result<(), String>> = futures::stream::iter(writes)
        .buffer_unordered(8)
        .collect()
        .await;
    results.into_iter().collect()
}

async fn timed_sweep(sweeper: &Sweeper) -> Result<(SweepSummary, u128), String> {
    let started = Instant::now();
    let summary = sweeper
        .sweep(Deadline::none())
        .await
        .map_err(|e| e.to_string())?;
    Ok((summary, started.elapsed().as_millis()))
}

/// The scenario (a worker process).
pub async fn run() -> Result<Value, String> {
    let client = client_with(None, 3);
    let tx = template_tables(&client, &["TxTable"]).await["TxTable"].clone();
    let config = SweepConfig::builder(&tx)
        .retain(RETAIN)
        .redelivery_horizon(RETAIN) // a benchmark: nothing is redelivered
        .build()
        .expect("valid configuration");
    let sweeper = Sweeper::new(client.clone(), config);
    put_all(&client, &tx, FINISHED).await?;
    let (now, now_ms) = timed_sweep(&sweeper).await?;
    Ok(json!({
        "finished": FINISHED,
        "now": {"queries": now.index_queries, "writes": now.write_calls, "millis": now_ms},
    }))
}

/// Print the scenario's figures.
pub fn print(r: &Value) {
    let row = |label: &str, v: &Value| {
        println!(
            "{label:<52} {:>8} {:>8} {:>9}",
            v["queries"], v["writes"], v["millis"]
        );
    };
    println!(
        "{:<52} {:>8} {:>8} {:>9}",
        "one sweep with finished transactions present", "queries", "writes", "ms"
    );
    row(
        &format!("now: {} completed (TTL, out of the index)", r["finished"]),
        &r["now"],
    );
}
