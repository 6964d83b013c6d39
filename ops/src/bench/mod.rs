//! Benchmarks against DynamoDB Local. Each scenario runs in a child process (`ops bench-worker`)
//! so that its peak RSS (VmHWM) is the function's own, not the harness's.

mod counter;
mod latency;
mod ratchet;
mod txn;

use crate::args::Args;

pub async fn run(mut args: Args) -> Result<(), String> {
    match args.next_positional().as_deref() {
        Some("ratchet") => ratchet::run(args).await,
        Some("txn") => txn::run(args).await,
        Some("counter") => counter::run(args).await,
        other => Err(format!(
            "bench: unknown benchmark {other:?} (ratchet, counter)"
        )),
    }
}

pub async fn worker(mut args: Args) -> Result<(), String> {
    match args.next_positional().as_deref() {
        Some("ratchet") => ratchet::worker(args).await,
        Some("txn") => txn::worker(args).await,
        Some("counter") => counter::worker(args).await,
        other => Err(format!("bench-worker: unknown benchmark {other:?}")),
    }
}

/// Warm a client as a warm Lambda container is: credentials resolved and `connections`
/// pooled connections open. Reads of absent `PK`/`SK` items only; no write is made.
pub async fn warm_up(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    connections: usize,
) -> Result<(), String> {
    use aws_sdk_dynamodb::types::AttributeValue;
    let reads = futures::future::join_all((0..connections.max(1)).map(|i| {
        client
            .get_item()
            .table_name(table)
            .key("PK", AttributeValue::S(format!("warmup#{i}")))
            .key("SK", AttributeValue::S("warmup".into()))
            .send()
    }))
    .await;
    match reads.into_iter().find_map(Result::err) {
        Some(e) => Err(format!("warm-up read failed: {e}")),
        None => Ok(()),
    }
}

/// A Kinesis-shaped batch of JSON bodies with sequence numbers `0…0`, `0…1`, ...
pub fn kinesis_batch(bodies: &[serde_json::Value]) -> shared::source::Batch {
    shared::source::Batch {
        kind: shared::source::SourceKind::Kinesis,
        records: bodies
            .iter()
            .enumerate()
            .map(|(i, b)| shared::source::SourceRecord {
                position: shared::source::SourcePosition {
                    kind: shared::source::SourceKind::Kinesis,
                    source_arn: None,
                    id: format!("{i:020}"),
                    shard_id: None,
                    partition_key: None,
                },
                body: b.to_string().into_bytes(),
            })
            .collect(),
    }
}

/// Peak resident set size of this process in KiB (Linux `VmHWM`).
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Run `ops bench-worker <args>` and return its stdout (one JSON line).
pub fn spawn_worker(args: &[String]) -> Result<serde_json::Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .env("AWS_ENDPOINT_URL_DYNAMODB", shared::testing::endpoint())
        .arg("bench-worker")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "worker {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().ok_or("worker printed nothing")?;
    serde_json::from_str(line).map_err(|e| format!("worker output {line:?}: {e}"))
}
