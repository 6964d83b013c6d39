//! Ratchet writer benchmark: N records over K keys, shuffled, with a share of duplicates,
//! written (a) by the pipeline with coalescing and concurrency, (b) as the seed did: one
//! conditional PutItem per record, sequentially.

use std::time::Instant;

use dev_testing::{client_with, template_tables, FaultInjector};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::{Batch, Writer};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::common::{next_arg, peak_rss_kib, spawn_worker};

/// Options of `bench ratchet`.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Batch sizes, comma-separated.
    #[arg(long, default_value = "1000,10000")]
    records: String,
    /// Distinct item keys.
    #[arg(long, default_value_t = 100)]
    keys: usize,
    /// Share of duplicated records.
    #[arg(long, default_value_t = 0.1)]
    duplicates: f64,
    /// Keys written at once (the ratchet's default concurrency).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Simulated round trip of the extra run, in ms.
    #[arg(long, default_value_t = 5)]
    latency_ms: u64,
}

pub async fn run(options: Options) -> Result<(), String> {
    let Options {
        records: sizes,
        keys,
        duplicates: dup,
        concurrency,
        latency_ms,
    } = options;
    println!(
        "ratchet-writer benchmark against DynamoDB Local ({})",
        dev_testing::endpoint()
    );
    println!(
        "records over {keys} keys, shuffled, {:.0}% duplicates; one batch per run; {concurrency} keys written at once",
        dup * 100.0
    );
    println!("baseline = the seed's approach: one conditional PutItem per record, sequential");
    let worker = |mode: &str, n: usize, latency: u64| {
        spawn_worker(&[
            "ratchet".into(),
            mode.into(),
            n.to_string(),
            keys.to_string(),
            dup.to_string(),
            concurrency.to_string(),
            latency.to_string(),
        ])
    };
    // DynamoDB Local is a JVM: warm it up so the first measured run is not its JIT time.
    for mode in ["coalesced", "baseline"] {
        worker(mode, 2000, 0)?;
    }
    println!();
    print_header();
    let mut runs: Vec<(usize, u64)> = sizes
        .split(',')
        .filter_map(|s| s.trim().parse::<usize>().ok())
        .map(|n| (n, 0))
        .collect();
    if latency_ms > 0 {
        // With a simulated network round trip, as to a regional endpoint (1000 records only:
        // the sequential baseline pays the round trip once per record).
        runs.push((1000, latency_ms));
    }
    for (n, latency) in runs {
        let mut rates = Vec::new();
        for mode in ["coalesced", "baseline"] {
            let r = worker(mode, n, latency)?;
            rates.push(print_row(mode, n, keys, latency, &r));
        }
        if let [fast, slow] = rates[..] {
            println!(
                "{:<10} {n:>8} records, rtt {latency} ms: coalesced is {:.1}x the baseline's records/s",
                "=>",
                fast / slow.max(f64::MIN_POSITIVE)
            );
        }
    }
    // A batch delivered again: a warm function answers it from its cache, a cold one (or one
    // with the cache off) asks DynamoDB once per distinct key.
    println!();
    for mode in ["redelivered-warm", "redelivered-cold"] {
        let r = worker(mode, 1000, 0)?;
        print_row(mode, 1000, keys, 0, &r);
    }
    Ok(())
}

fn print_header() {
    println!(
        "{:<10} {:>8} {:>6} {:>8} {:>10} {:>11} {:>10} {:>12} {:>13} {:>13}",
        "mode",
        "records",
        "keys",
        "rtt_ms",
        "time_ms",
        "records/s",
        "put_calls",
        "calls/record",
        "distinct/rec",
        "peak_rss_MiB"
    );
}

/// Print one worker's figures; returns its records/s.
fn print_row(mode: &str, n: usize, keys: usize, latency: u64, r: &Value) -> f64 {
    let num = |k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    println!(
        "{:<10} {:>8} {:>6} {:>8} {:>10.0} {:>11.0} {:>10.0} {:>12.3} {:>13.3} {:>13.1}",
        mode,
        n,
        keys,
        latency,
        num("millis"),
        num("records_per_s"),
        num("put_calls"),
        num("put_calls") / n as f64,
        num("distinct_keys") / n as f64,
        num("peak_rss_kib") / 1024.0
    );
    num("records_per_s")
}

/// Deterministic records: `n` records over `keys` keys, a `dup` share being exact copies.
fn records(n: usize, keys: usize, dup: f64) -> Vec<Value> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let unique = ((n as f64) * (1.0 - dup)).round() as usize;
    let mut out: Vec<Value> = (0..unique)
        .map(|i| {
            let k = i % keys;
            if rng.random_bool(0.05) {
                json!({"op":"delete","key":{"PK":format!("user#{k}"),"SK":"profile"},"ts":1_700_000_000_000u64 + i as u64})
            } else {
                json!({"op":"put","key":{"PK":format!("user#{k}"),"SK":"profile"},"ts":1_700_000_000_000u64 + i as u64,
                       "item":{"rating": rng.random_range(1..=5), "note": format!("record {i}")}})
            }
        })
        .collect();
    while out.len() < n {
        let i = rng.random_range(0..unique.max(1));
        out.push(out[i].clone());
    }
    out.shuffle(&mut rng);
    out
}

pub async fn worker(args: Vec<String>) -> Result<(), String> {
    let mut args = args.into_iter();
    let mode: String = next_arg(&mut args, "mode")?;
    let n: usize = next_arg(&mut args, "records")?;
    let keys: usize = next_arg(&mut args, "keys")?;
    let dup: f64 = next_arg(&mut args, "duplicates")?;
    let concurrency: usize = next_arg(&mut args, "concurrency")?;
    let latency_ms: u64 = next_arg(&mut args, "latency")?;

    let counter = FaultInjector::counting();
    let setup = client_with(None, 3);
    let tables = template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
    let client = crate::common::client_with_latency(Some(counter.clone()), latency_ms).await?;
    let writer = Writer::builder(
        "ratchet-writer",
        Ratchet::new(client.clone(), {
            let c = RatchetConfig::builder(&tables["RatchetTable"]).concurrency(concurrency);
            // The baseline and a cold redelivery: no warm-redelivery cache.
            let c = if mode == "baseline" || mode == "redelivered-cold" {
                c.cache_keys(0)
            } else {
                c
            };
            c.build().expect("valid configuration")
        }),
    )
    .dead_letters(DeadLetters::new(
        client.clone(),
        &tables["DeadLetterTable"],
        "ratchet-writer",
    ))
    .deadline_margin(std::time::Duration::from_secs(1))
    .build()
    .expect("valid writer");
    let bodies = records(n, keys, dup);
    let batch = dev_testing::events::kinesis_batch(&bodies);
    crate::common::warm_up(&client, &tables["RatchetTable"], concurrency).await?;
    if mode.starts_with("redelivered") {
        // The first delivery, not measured: the measured run is the same batch again.
        run_mode("coalesced", &writer, &batch).await?;
    }
    let before = counter.calls_of("PutItem");
    let started = Instant::now();
    run_mode(&mode, &writer, &batch).await?;
    let elapsed = started.elapsed();
    let put_calls = counter.calls_of("PutItem") - before;
    let distinct: std::collections::BTreeSet<String> =
        bodies.iter().map(|b| b["key"].to_string()).collect();
    let _ = setup;
    println!(
        "{}",
        json!({
            "mode": mode, "records": n, "distinct_keys": distinct.len(),
            "millis": elapsed.as_secs_f64() * 1000.0,
            "records_per_s": n as f64 / elapsed.as_secs_f64(),
            "put_calls": put_calls,
            "peak_rss_kib": peak_rss_kib(),
        })
    );
    Ok(())
}

/// The measured part: the whole batch coalesced, or one conditional write per record.
async fn run_mode(mode: &str, writer: &Writer<Ratchet>, batch: &Batch) -> Result<(), String> {
    match mode {
        "coalesced" | "redelivered-warm" | "redelivered-cold" => {
            let report = writer.handle_batch(batch, Deadline::none()).await;
            match report.summary.reported_failures {
                0 => Ok(()),
                n => Err(format!("{n} records failed")),
            }
        }
        "baseline" => {
            for record in &batch.records {
                let parsed = writer
                    .protocol()
                    .parse_record(&record.body)
                    .map_err(|e| e.to_string())?;
                let _ = writer
                    .protocol()
                    .write(&parsed)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        other => Err(format!("unknown mode {other}")),
    }
}
