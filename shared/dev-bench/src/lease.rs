//! Lease lock benchmark: latency of acquire (a consistent read and one conditional write),
//! heartbeat and release (one conditional write each) over a few hundred rounds against
//! DynamoDB Local, and how long a takeover waits past a short lease. Prints figures only.

use std::time::Duration;

use dev_testing::{client_with, template_tables};
use dynamodb_exactly_once::lease::{
    AcquireOutcome, HeartbeatOutcome, Lease, LeaseConfig, ReleaseOutcome,
};
use tokio::time::Instant;

/// Options of `bench lease`.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Measured acquire / heartbeat / release rounds.
    #[arg(long, default_value_t = 300)]
    rounds: usize,
    /// Takeover rounds (each waits at least one lease).
    #[arg(long, default_value_t = 10)]
    takeovers: usize,
    /// Lease of the takeover rounds, in ms.
    #[arg(long, default_value_t = 200)]
    takeover_lease_ms: u64,
}

pub async fn run(options: Options) -> Result<(), String> {
    println!(
        "lease benchmark against DynamoDB Local ({})",
        dev_testing::endpoint()
    );
    let client = client_with(None, 3);
    let table = template_tables(&client, &["LockTable"]).await["LockTable"].clone();
    let lease = Lease::new(
        client.clone(),
        LeaseConfig::builder(&table)
            .build()
            .expect("valid configuration"),
    );
    // Warm-up: connections, credentials and DynamoDB Local's JIT.
    rounds(&lease, 50).await?;
    let (acquire, heartbeat, release) = rounds(&lease, options.rounds).await?;
    println!(
        "{} rounds on one lock, one warm client; acquire = consistent GetItem + conditional UpdateItem,",
        options.rounds
    );
    println!("heartbeat and release = one conditional UpdateItem each");
    println!();
    println!(
        "{:<10} {:>7} {:>8} {:>8} {:>8}",
        "op", "rounds", "p50_ms", "p99_ms", "max_ms"
    );
    print_row("acquire", acquire);
    print_row("heartbeat", heartbeat);
    print_row("release", release);
    let short = LeaseConfig::builder(&table)
        .lease(Duration::from_millis(options.takeover_lease_ms))
        .poll_interval(Duration::from_millis(options.takeover_lease_ms / 10))
        .build()
        .expect("valid configuration");
    let takeovers = takeovers(&Lease::new(client, short), options.takeovers).await?;
    print_row("takeover", takeovers);
    println!(
        "(takeover: from the first read of an abandoned lock to holding it; lease {} ms, poll every {} ms)",
        options.takeover_lease_ms,
        options.takeover_lease_ms / 10
    );
    Ok(())
}

type Latencies = Vec<Duration>;

/// `n` rounds of acquire, heartbeat, release on one lock.
async fn rounds(lease: &Lease, n: usize) -> Result<(Latencies, Latencies, Latencies), String> {
    let (mut acquire, mut heartbeat, mut release) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let started = Instant::now();
        let outcome = lease
            .try_acquire("bench", "bench")
            .await
            .map_err(|e| e.to_string())?;
        acquire.push(started.elapsed());
        let AcquireOutcome::Acquired { mut holding, .. } = outcome else {
            return Err(format!("the bench lock is held: {outcome:?}"));
        };
        let started = Instant::now();
        let beat = lease
            .heartbeat(&mut holding)
            .await
            .map_err(|e| e.to_string())?;
        heartbeat.push(started.elapsed());
        let started = Instant::now();
        let released = lease.release(holding).await.map_err(|e| e.to_string())?;
        release.push(started.elapsed());
        if beat != HeartbeatOutcome::Extended || released != ReleaseOutcome::Released {
            return Err(format!("unexpected {beat:?} / {released:?}"));
        }
    }
    Ok((acquire, heartbeat, release))
}

/// `n` takeovers of a lock whose holder went away.
async fn takeovers(lease: &Lease, n: usize) -> Result<Latencies, String> {
    let mut waits = Vec::new();
    for i in 0..n {
        let lock = format!("takeover-{i}");
        let _ = lease
            .try_acquire(&lock, "gone")
            .await
            .map_err(|e| e.to_string())?;
        let started = Instant::now();
        let outcome = lease
            .acquire(&lock, "next", Duration::from_secs(10))
            .await
            .map_err(|e| e.to_string())?;
        waits.push(started.elapsed());
        if !matches!(
            outcome,
            AcquireOutcome::Acquired {
                took_over_from: Some(_),
                ..
            }
        ) {
            return Err(format!("expected a takeover: {outcome:?}"));
        }
    }
    Ok(waits)
}

fn print_row(op: &str, mut latencies: Latencies) {
    latencies.sort();
    let ms = |q: f64| {
        let n = latencies.len();
        let i = ((q * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1;
        latencies.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "{:<10} {:>7} {:>8.2} {:>8.2} {:>8.2}",
        op,
        latencies.len(),
        ms(0.50),
        ms(0.99),
        ms(1.0)
    );
}
