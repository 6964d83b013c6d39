//! The batch processor's own overhead against Powertools for AWS Lambda (Python)'s
//! `BatchProcessor` + `process_partial_response` on the same SQS event: records/s and µs per
//! record with a handler that does nothing, every record succeeding or 10 % failing (a
//! partial batch response). No DynamoDB: only the processors run.
//!
//! Our handler gets a typed record, so each body is decoded (into a `serde_json::Value`, or
//! only checked with `IgnoredAny`); Powertools hands the body over as text, so its rows are
//! with a handler that does not read it and with one that `json.loads` it (the same work).
//!
//! Ours is timed from the event as `lambda_runtime` hands it over (a `serde_json::Value`) to
//! the partial batch response (`Batch::from_event`, then `handle_batch`, which also logs the
//! batch summary and prints its EMF metrics line); Powertools' from the event dict to its
//! response dict. Each side runs in a process of its own, one round untimed first; a row is
//! the median round. The Python
//! peer (`shared/dev-bench/peers/powertools_processor.py`) runs when `POWERTOOLS_PYTHON` names a
//! Python with `aws-lambda-powertools` installed.

use std::time::{Duration, Instant};

use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError};
use dynamodb_exactly_once_lambda::Batch;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::{json, Value};

use crate::common::next_arg;

/// Options of `bench processor`.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Records in the SQS event.
    #[arg(long, default_value_t = 1000)]
    records: usize,
    /// Timed rounds (the event processed again each round; the median round counts).
    #[arg(long, default_value_t = 100)]
    rounds: usize,
}

/// One row: which processor, how configured, and what it did.
struct Case {
    peer: &'static str,
    setting: String,
    failing_percent: usize,
}

pub async fn run(options: Options) -> Result<(), String> {
    let Options { records, rounds } = options;
    println!(
        "processor benchmark: one SQS event of {records} records (a 37-byte JSON body each), \
         a handler that does nothing; the median of {rounds} timed rounds after one untimed"
    );
    println!();
    println!(
        "{:<12} {:<36} {:>8} {:>12} {:>10} {:>9}",
        "peer", "setting", "failing", "records/s", "µs/record", "reported"
    );
    for (concurrency, failing, body) in [
        (8, 0, "value"),
        (1, 0, "value"),
        (8, 10, "value"),
        (8, 0, "ignored"),
        (0, 0, "decode"),
    ] {
        let mut args = [records, rounds, concurrency, failing]
            .map(|n| n.to_string())
            .to_vec();
        args.push(body.into());
        let row = ours(&args)?;
        let setting = match body {
            "value" => format!("Value body, concurrency {concurrency}"),
            "ignored" => format!("body checked only, concurrency {concurrency}"),
            _ => "of which decoding the event".to_string(),
        };
        let case = Case {
            peer: "this crate",
            setting,
            failing_percent: failing,
        };
        print_row(&case, &row);
    }
    powertools_peer(records, rounds);
    Ok(())
}

fn print_row(case: &Case, row: &Value) {
    let rate = row["records_per_s"].as_f64().unwrap_or(0.0);
    let per_record = if rate > 0.0 { 1e6 / rate } else { 0.0 };
    println!(
        "{:<12} {:<36} {:>7}% {:>12.0} {:>10.2} {:>9}",
        case.peer,
        case.setting,
        case.failing_percent,
        rate,
        per_record,
        row["reported"].as_u64().unwrap_or(0)
    );
}

/// Our row, measured in a child process (`bench worker processor ...`): its last stdout line.
fn ours(args: &[String]) -> Result<Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args(["worker", "processor"])
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "processor worker failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().ok_or("the worker printed nothing")?;
    serde_json::from_str(line).map_err(|e| format!("worker output {line:?}: {e}"))
}

/// The SQS event as Lambda sends it: `records` messages, bodies like the idempotency bench's.
pub fn sqs_event(records: usize) -> Value {
    let records: Vec<Value> = (0..records)
        .map(|i| {
            json!({
                "messageId": format!("m{i}"),
                "receiptHandle": "h",
                "body": json!({"orderId": format!("o-{i}"), "amountCents": 250}).to_string(),
                "attributes": {"SentTimestamp": "0"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:1:q",
                "awsRegion": "us-east-1",
            })
        })
        .collect();
    json!({ "Records": records })
}

/// `worker processor <records> <rounds> <concurrency> <failing %> <value|ignored|decode>`: one
/// JSON line. `value`: each body decoded into a `serde_json::Value`; `ignored`: only checked
/// (`serde::de::IgnoredAny`); `decode`: only the event turned into source records.
pub async fn worker(args: Vec<String>) -> Result<(), String> {
    let mut args = args.into_iter();
    let records: usize = next_arg(&mut args, "records")?;
    let rounds: usize = next_arg(&mut args, "rounds")?;
    let concurrency: usize = next_arg(&mut args, "concurrency")?;
    let failing: usize = next_arg(&mut args, "failing percent")?;
    let body: String = next_arg(&mut args, "body")?;
    let event = sqs_event(records);
    let (seconds, reported) = match body.as_str() {
        "value" => timed::<Value>(&event, rounds, concurrency, failing).await?,
        "ignored" => timed::<IgnoredAny>(&event, rounds, concurrency, failing).await?,
        "decode" => (decode_only(&event, rounds)?, 0),
        other => return Err(format!("worker: {other:?} is not value, ignored or decode")),
    };
    let rate = records as f64 / seconds;
    println!("{}", json!({"records_per_s": rate, "reported": reported}));
    Ok(())
}

/// `rounds` timed decodings of the event into source records (`Batch::from_event`, the first
/// step of every batch): the seconds.
fn decode_only(event: &Value, rounds: usize) -> Result<f64, String> {
    let mut times = Vec::with_capacity(rounds);
    for round in 0..=rounds {
        let event = event.clone();
        let started = Instant::now();
        let batch = Batch::from_event(event).map_err(|e| e.to_string())?;
        if round > 0 {
            times.push(started.elapsed());
        }
        drop(batch);
    }
    Ok(median(times))
}

/// The median of the rounds' times, in seconds (the machine is shared: a mean would carry
/// every pause of another process).
fn median(mut times: Vec<Duration>) -> f64 {
    times.sort();
    times
        .get(times.len() / 2)
        .copied()
        .unwrap_or_default()
        .as_secs_f64()
}

/// `rounds` timed runs of the event through a processor of `T` bodies (one untimed first):
/// the seconds, and the records the last one reported.
async fn timed<T: DeserializeOwned + Send + 'static>(
    event: &Value,
    rounds: usize,
    concurrency: usize,
    failing: usize,
) -> Result<(f64, usize), String> {
    // Records m0, m10, m20, ... fail at 10 %.
    let every = 100usize.checked_div(failing);
    let processor = Processor::builder("bench", move |record: Record<T>| async move {
        let n: usize = record
            .id()
            .strip_prefix('m')
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        if every.is_some_and(|every| n.is_multiple_of(every)) {
            return Err(RecordError::retry("failing on purpose"));
        }
        Ok(())
    })
    .concurrency(concurrency)
    .build()
    .map_err(|e| e.to_string())?;
    let mut times = Vec::with_capacity(rounds);
    let mut reported = 0;
    for round in 0..=rounds {
        let event = event.clone();
        let started = Instant::now();
        let batch = Batch::from_event(event).map_err(|e| e.to_string())?;
        let report = processor.handle_batch(&batch, Deadline::none()).await;
        if round > 0 {
            times.push(started.elapsed());
        }
        reported = report.response.failed_ids().len();
    }
    Ok((median(times), reported))
}

/// The Python peer's rows, when `POWERTOOLS_PYTHON` is set.
fn powertools_peer(records: usize, rounds: usize) {
    let Ok(python) = std::env::var("POWERTOOLS_PYTHON") else {
        println!("(POWERTOOLS_PYTHON unset: the Powertools peer is skipped)");
        return;
    };
    let script =
        dev_testing::workspace_root().join("shared/dev-bench/peers/powertools_processor.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .args([records.to_string(), rounds.to_string()])
        .output();
    let Ok(output) = output else {
        println!("(the Powertools peer could not start)");
        return;
    };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(row) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let case = Case {
            peer: "powertools",
            setting: row["setting"].as_str().unwrap_or("?").to_string(),
            failing_percent: row["failing_percent"].as_u64().unwrap_or(0) as usize,
        };
        print_row(&case, &row);
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
