//! Counter writer benchmark: coalesced conditional updates against the baseline of one
//! conditional UpdateItem per record, sequential. Scenarios (one child process each):
//!
//! * `ten`: 1000 records over 10 counters, 10% producer duplicates, one batch;
//! * `hot`: 10,000 records on one counter, one batch;
//! * `redelivered`: the `ten` batch delivered a second time (only the redelivery is timed);
//! * `baseline`: the `ten` records, one `Counter::add` (one conditional UpdateItem) each, in order.

use std::collections::BTreeSet;
use std::time::Instant;

use dev_testing::{client_with, template_tables, FaultInjector};
use dynamodb_exactly_once::__private::item_size;
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once::ItemKey;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::Writer;
use serde_json::{json, Value};

use crate::common::{next_arg, peak_rss_kib, spawn_worker};

const SCENARIOS: [(&str, &str); 4] = [
    ("ten", "1000 records, 10 counters, 10% duplicates"),
    ("hot", "10000 records, 1 hot counter"),
    ("redelivered", "the 1000-record batch again"),
    ("baseline", "1000 records, 1 UpdateItem each, sequential"),
];

pub async fn run() -> Result<(), String> {
    println!(
        "counter-writer benchmark against DynamoDB Local ({})",
        dev_testing::endpoint()
    );
    println!();
    // DynamoDB Local is a JVM: warm it up so the first measured run is not its JIT time.
    spawn_worker(&["counter".into(), "ten".into()])?;
    spawn_worker(&["counter".into(), "baseline".into()])?;
    println!(
        "{:<12} {:<44} {:>8} {:>9} {:>10} {:>12} {:>12} {:>11} {:>13}",
        "scenario",
        "what",
        "records",
        "time_ms",
        "records/s",
        "write_calls",
        "calls/record",
        "item_bytes",
        "peak_rss_MiB"
    );
    let mut rate = std::collections::BTreeMap::new();
    for (name, what) in SCENARIOS {
        let r = spawn_worker(&["counter".into(), name.into()])?;
        let num = |k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        println!(
            "{:<12} {:<44} {:>8.0} {:>9.0} {:>10.0} {:>12.0} {:>12.4} {:>11.0} {:>13.1}",
            name,
            what,
            num("records"),
            num("millis"),
            num("records_per_s"),
            num("write_calls"),
            num("write_calls") / num("records").max(1.0),
            num("max_item_bytes"),
            num("peak_rss_kib") / 1024.0
        );
        rate.insert(name, num("records_per_s"));
    }
    let base = rate
        .get("baseline")
        .copied()
        .unwrap_or(0.0)
        .max(f64::MIN_POSITIVE);
    println!();
    for name in ["ten", "hot", "redelivered"] {
        println!(
            "{name:<12} {:.1}x the baseline's records/s",
            rate.get(name).copied().unwrap_or(0.0) / base
        );
    }
    Ok(())
}

/// `n` records over `counters` items; every tenth record (with `duplicates`) repeats the
/// idempotency key of an earlier one, under a different message id.
fn records(n: usize, counters: usize, duplicates: bool) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let k = if duplicates && i % 10 == 9 { i - 5 } else { i };
            json!({
                "key": {"PK": format!("acct#{}", k % counters), "SK": "2024-11-22"},
                "add": {"logins": 1, "authz": (k % 7) as i64},
                "idempotencyKey": format!("ECloudFrontId/acct{}/2024-11-22/{k:06}.bench", k % counters),
            })
        })
        .collect()
}

pub async fn worker(args: Vec<String>) -> Result<(), String> {
    let mut args = args.into_iter();
    let scenario: String = next_arg(&mut args, "scenario")?;
    let injector = FaultInjector::counting();
    let client = client_with(Some(injector.clone()), 3);
    let tables = template_tables(&client, &["CounterTable", "DeadLetterTable"]).await;
    let table = tables["CounterTable"].clone();
    let protocol = Counter::new(
        client.clone(),
        CounterConfig::builder(&table)
            .build()
            .map_err(|e| e.to_string())?,
    );
    let writer = Writer::builder("counter-writer", protocol)
        .dead_letters(DeadLetters::new(
            client.clone(),
            &tables["DeadLetterTable"],
            "counter-writer",
        ))
        .deadline_margin(std::time::Duration::from_secs(1))
        .build()
        .map_err(|e| e.to_string())?;
    let bodies = match scenario.as_str() {
        "hot" => records(10_000, 1, false),
        _ => records(1000, 10, true),
    };
    let batch = dev_testing::events::kinesis_batch(&bodies);
    if scenario == "redelivered" {
        let first = writer.handle_batch(&batch, Deadline::none()).await;
        if first.summary.reported_failures > 0 {
            return Err(format!(
                "{} records failed",
                first.summary.reported_failures
            ));
        }
    }
    crate::common::warm_up(
        &client,
        &table,
        dynamodb_exactly_once::counter::CounterConfig::builder(&table)
            .build()
            .map_err(|e| e.to_string())?
            .concurrency(),
    )
    .await?;
    let before = injector.calls_of("UpdateItem");
    let started = Instant::now();
    let (mut applied, mut duplicates) = (0usize, 0usize);
    match scenario.as_str() {
        "ten" | "hot" | "redelivered" => {
            let report = writer.handle_batch(&batch, Deadline::none()).await;
            if report.summary.reported_failures > 0 {
                return Err(format!(
                    "{} records failed",
                    report.summary.reported_failures
                ));
            }
            applied = report.summary.count("applied");
            duplicates = report.summary.count("duplicate");
        }
        "baseline" => {
            for record in &batch.records {
                let parsed = writer
                    .protocol()
                    .parse_record(&record.body)
                    .map_err(|e| e.to_string())?;
                match writer
                    .protocol()
                    .add(&parsed)
                    .await
                    .map_err(|e| e.to_string())?
                {
                    dynamodb_exactly_once::counter::CounterOutcome::Applied => applied += 1,
                    dynamodb_exactly_once::counter::CounterOutcome::Duplicate
                    | dynamodb_exactly_once::counter::CounterOutcome::ConflictingDuplicate => {
                        duplicates += 1
                    }
                    other => return Err(format!("an outcome the bench does not count: {other:?}")),
                }
            }
        }
        other => return Err(format!("unknown scenario {other}")),
    }
    let elapsed = started.elapsed();
    let write_calls = injector.calls_of("UpdateItem") - before;
    let items: BTreeSet<String> = bodies
        .iter()
        .map(|b| b["key"]["PK"].as_str().unwrap_or_default().to_string())
        .collect();
    let mut max_item_bytes = 0;
    for pk in items {
        let key = ItemKey::from_json(&json!({"PK": pk, "SK": "2024-11-22"}))?;
        let item = client
            .get_item()
            .table_name(&table)
            .set_key(Some(key.to_item().map_err(|e| e.to_string())?))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .item
            .unwrap_or_default();
        max_item_bytes = max_item_bytes.max(item_size(&item));
    }
    println!(
        "{}",
        json!({
            "scenario": scenario,
            "records": bodies.len(),
            "millis": elapsed.as_secs_f64() * 1000.0,
            "records_per_s": bodies.len() as f64 / elapsed.as_secs_f64().max(1e-9),
            "write_calls": write_calls,
            "applied": applied,
            "duplicates": duplicates,
            "max_item_bytes": max_item_bytes,
            "peak_rss_kib": peak_rss_kib(),
        })
    );
    Ok(())
}
