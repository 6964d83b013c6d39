//! The idempotency layer behind the batch processor against Powertools for AWS Lambda
//! (Python) on the same SQS batch: records/s, DynamoDB calls and write units per record, for
//! the first delivery (every key new) and a redelivery (cold: another process; warm: the same
//! process, its cache).
//!
//! The Python peer (`shared/dev-bench/peers/powertools_idempotency.py`) runs when `POWERTOOLS_PYTHON`
//! names a Python with `aws-lambda-powertools` and `boto3` installed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_dynamodb::types::AttributeValue;
use dev_testing::{client, client_with, FaultInjector};
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::idempotency::{
    DynamoDbPersistence, Idempotency, IdempotencyConfig,
};
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError};
use serde_json::{json, Value};

const RECORDS: usize = 100;

type Layer = Arc<Idempotency<DynamoDbPersistence>>;

pub async fn run() -> Result<(), String> {
    println!(
        "idempotency benchmark against DynamoDB Local ({}): one SQS batch of {RECORDS} orders, \
         one idempotent call each",
        dev_testing::endpoint()
    );
    println!(
        "write units: every item is under 1 KB, so each write (a failed condition included) \
         bills 1 WCU as AWS counts it"
    );
    let table = create_table().await?;
    let counter = FaultInjector::counting();
    let counted = client_with(Some(counter.clone()), 3);
    let warm = layer(counted.clone(), &table, 1000)?;
    let bodies: Vec<Value> = (0..RECORDS)
        .map(|i| json!({"orderId": format!("o-{i}"), "amountCents": 250}))
        .collect();
    let batch = dev_testing::events::sqs_batch(&bodies, 0);
    println!();
    println!(
        "{:<12} {:<17} {:>10} {:>13} {:>12}",
        "peer", "delivery", "records/s", "calls/record", "WCU/record"
    );
    for (delivery, layer) in [
        ("new", Arc::clone(&warm)),
        ("redelivered-cold", self::layer(counted.clone(), &table, 0)?),
        ("redelivered-warm", warm),
    ] {
        let before = counter.calls();
        let writes_before = writes(&counter);
        let seconds = deliver(&layer, &batch, 0).await?;
        let calls = (counter.calls() - before) as f64 / RECORDS as f64;
        let wcu = (writes(&counter) - writes_before) as f64 / RECORDS as f64;
        println!(
            "{:<12} {:<17} {:>10.0} {:>13.2} {:>12.2}",
            "this crate",
            delivery,
            RECORDS as f64 / seconds,
            calls,
            wcu
        );
    }
    large_results(&table, &counted, &counter).await?;
    powertools_peer();
    Ok(())
}

/// Results of 200 KB (kept) and 500 KB (over an item's 400 KB: recorded completed without the
/// value), first delivery then a cold redelivery; write units as AWS bills them, from the
/// stored records' sizes: a claim 1, the completion `ceil(max(before, after) / 1 KB)`, a cold
/// duplicate's failed claim `ceil(stored / 1 KB)`.
async fn large_results(
    table: &str,
    counted: &aws_sdk_dynamodb::Client,
    counter: &FaultInjector,
) -> Result<(), String> {
    const LARGE: usize = 10;
    for kb in [200, 500] {
        let bodies: Vec<Value> = (0..LARGE)
            .map(|i| json!({"orderId": format!("large{kb}-{i}"), "amountCents": 250}))
            .collect();
        let batch = dev_testing::events::sqs_batch(&bodies, 0);
        for (delivery, first) in [("new", true), ("redelivered-cold", false)] {
            let layer = layer(counted.clone(), table, 0)?;
            let before = counter.calls();
            let seconds = deliver(&layer, &batch, kb * 1024).await?;
            let calls = (counter.calls() - before) as f64 / LARGE as f64;
            let stored = stored_units(table, &format!("large{kb}-")).await? / LARGE as f64;
            let wcu = if first { 1.0 + stored } else { stored };
            println!(
                "{:<12} {:<17} {:>10.0} {:>13.2} {:>12.2}",
                "this crate",
                format!("{delivery} {kb}K"),
                LARGE as f64 / seconds,
                calls,
                wcu
            );
        }
    }
    Ok(())
}

/// The write units of the stored records whose key contains `marker`, summed.
async fn stored_units(table: &str, marker: &str) -> Result<f64, String> {
    let items: Vec<_> = client()
        .scan()
        .table_name(table)
        .into_paginator()
        .items()
        .send()
        .collect::<Result<_, _>>()
        .await
        .map_err(|e| format!("scan: {e}"))?;
    Ok(items
        .iter()
        .filter(|item| matches!(item.get("Id"), Some(AttributeValue::S(id)) if id.contains(marker)))
        .map(|item| {
            dynamodb_exactly_once::__private::item_size(item)
                .div_ceil(1024)
                .max(1) as f64
        })
        .sum())
}

fn writes(counter: &FaultInjector) -> usize {
    ["PutItem", "UpdateItem", "DeleteItem"]
        .iter()
        .map(|op| counter.calls_of(op))
        .sum()
}

fn layer(client: aws_sdk_dynamodb::Client, table: &str, cache: usize) -> Result<Layer, String> {
    let config = IdempotencyConfig::builder("payments")
        .cache_keys(cache)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(Idempotency::new(
        DynamoDbPersistence::new(client, table),
        config,
    )))
}

/// One delivery of the batch through the processor; its seconds.
async fn deliver(
    layer: &Layer,
    batch: &dynamodb_exactly_once_lambda::Batch,
    result_bytes: usize,
) -> Result<f64, String> {
    let charged = Arc::new(AtomicUsize::new(0));
    let processor = {
        let (layer, charged) = (Arc::clone(layer), Arc::clone(&charged));
        Processor::builder("payments", move |record: Record<Value>| {
            let (layer, charged) = (Arc::clone(&layer), Arc::clone(&charged));
            async move {
                let key = record.body["orderId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                layer
                    .call("charge", &key)
                    .payload(&record.body)
                    .run(|| async {
                        charged.fetch_add(1, Ordering::SeqCst);
                        let receipt = "r".repeat(result_bytes);
                        Ok::<_, String>(
                            json!({"chargeId": format!("ch_{key}"), "receipt": receipt}),
                        )
                    })
                    .await
                    .map(|_| ())
                    .map_err(|e| RecordError::transient(e.to_string()))
            }
        })
        .concurrency(10)
        .build()
        .map_err(|e| e.to_string())?
    };
    let started = Instant::now();
    let report = processor.handle_batch(batch, Deadline::none()).await;
    let seconds = started.elapsed().as_secs_f64();
    match report.response.failed_ids().len() {
        0 => Ok(seconds),
        n => Err(format!("{n} records failed")),
    }
}

async fn create_table() -> Result<String, String> {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let name = format!("{}Idempotency", dev_testing::unique_prefix());
    let definition = AttributeDefinition::builder()
        .attribute_name("Id")
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(|e| e.to_string())?;
    let key = KeySchemaElement::builder()
        .attribute_name("Id")
        .key_type(KeyType::Hash)
        .build()
        .map_err(|e| e.to_string())?;
    client()
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(definition)
        .key_schema(key)
        .send()
        .await
        .map_err(|e| format!("create table: {e}"))?;
    Ok(name)
}

/// The Python peer's rows, when `POWERTOOLS_PYTHON` is set.
fn powertools_peer() {
    let Ok(python) = std::env::var("POWERTOOLS_PYTHON") else {
        println!("(POWERTOOLS_PYTHON unset: the Powertools peer is skipped)");
        return;
    };
    let script =
        dev_testing::workspace_root().join("shared/dev-bench/peers/powertools_idempotency.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .arg(RECORDS.to_string())
        .output();
    let Ok(output) = output else {
        println!("(the Powertools peer could not start)");
        return;
    };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(row) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let num = |k: &str| row[k].as_f64().unwrap_or(0.0);
        let failed = match num("failures") {
            0.0 => String::new(),
            n => format!("  ({n} of {} records failed)", num("records")),
        };
        println!(
            "{:<12} {:<17} {:>10.0} {:>13.2} {:>12.2}{failed}",
            "powertools",
            row["delivery"].as_str().unwrap_or("?"),
            num("records_per_s"),
            num("calls_per_record"),
            num("wcu_per_record")
        );
    }
    if !output.status.success() {
        println!(
            "(the Powertools peer failed: {})",
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
}
