//! What the benchmarks share: warm clients, peak RSS, worker processes.

use std::str::FromStr;

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

/// Peak resident set size of this process in KiB (Linux `VmHWM`).
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Run `bench worker <args>` and return its stdout (one JSON line).
pub fn spawn_worker(args: &[String]) -> Result<serde_json::Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .env("AWS_ENDPOINT_URL_DYNAMODB", dev_testing::endpoint())
        .arg("worker")
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

/// The next positional argument of a worker, parsed.
pub fn next_arg<T: FromStr>(
    args: &mut impl Iterator<Item = String>,
    what: &str,
) -> Result<T, String> {
    let text = args
        .next()
        .ok_or_else(|| format!("worker: {what} is missing"))?;
    text.parse()
        .map_err(|_| format!("worker: {what}: cannot parse {text:?}"))
}

/// CPU time (user + system) this process used so far, ms (from `/proc/self/stat`, at the
/// usual 100 clock ticks per second); `None` where it cannot be read.
pub fn cpu_ms() -> Option<u64> {
    process_cpu_ms("self")
}

/// CPU time DynamoDB Local used so far, ms, when `BENCH_DYNAMODB_PID` names its process
/// (`scripts/bench.sh` sets it for the emulator it starts).
pub fn server_cpu_ms() -> Option<u64> {
    let pid = std::env::var("BENCH_DYNAMODB_PID").ok()?;
    process_cpu_ms(pid.trim())
}

fn process_cpu_ms(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 10)
}

/// A client (with `interceptor`, if any), through a loopback proxy that delays each answer
/// `latency_ms` when it is above 0: a simulated network round trip.
pub async fn client_with_latency(
    interceptor: Option<dev_testing::FaultInjector>,
    latency_ms: u64,
) -> Result<aws_sdk_dynamodb::Client, String> {
    if latency_ms == 0 {
        return Ok(dev_testing::client_with(interceptor, 3));
    }
    let delay = std::time::Duration::from_millis(latency_ms);
    let proxy = dev_testing::proxy::delaying(delay).await?;
    Ok(dev_testing::client_for(&proxy, interceptor, 3))
}

fn command(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

/// Where and when a run was taken: `commit <short hash>  date <UTC>  load: <uptime's load
/// averages>` (the benchmarks page dates each figure with its commit).
pub fn provenance() -> String {
    format!(
        "commit {}  date {}  load:{}",
        command("git", &["rev-parse", "--short", "HEAD"]),
        command("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        command("uptime", &[])
            .rsplit_once("load average")
            .map_or(String::new(), |(_, l)| l.to_string())
    )
}
