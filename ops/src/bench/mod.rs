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
