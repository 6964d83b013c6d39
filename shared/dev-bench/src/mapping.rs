//! `bench mapping`: a stream handler driven through the event source mapping emulator
//! (`dev_testing::mapping`) over the Streams double at N shards: records injected at a
//! rate in real time, the emulator stepping as fast as it can (one batch per shard at once),
//! the handler summing each batch per item in memory (the roll-up's shape without its
//! writes). Prints the emulator's throughput and the lag of the records it delivers (the age
//! of each record when its batch reached the handler), during the load and after it stops.
//! Figures only: nothing is asserted but that every record was delivered once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dev_testing::mapping::{Mapping, MappingConfig};
use dev_testing::{Shape, StreamsDouble};
use dynamodb_exactly_once::Clock;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::figures::Figures;

/// Options of `bench mapping`.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Shards of the stream (the double's partitions).
    #[arg(long, default_value_t = 30)]
    shards: usize,
    /// Records injected per second of real time.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Seconds of load.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Distinct items (partition keys) the records name.
    #[arg(long, default_value_t = 100_000)]
    items: u64,
    /// `BatchSize`.
    #[arg(long, default_value_t = 1000)]
    batch_size: i64,
    /// `MaximumBatchingWindowInSeconds`.
    #[arg(long, default_value_t = 0)]
    batching_window: i64,
    /// `ParallelizationFactor`.
    #[arg(long, default_value_t = 1)]
    parallelization: i64,
    /// The seed of the keys drawn.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// What the handler saw.
#[derive(Debug, Default)]
struct Meter {
    /// Each delivered record's age (ms) when its batch reached the handler, with the time
    /// since the run started (ms) at which it was delivered.
    ages: Vec<(u64, u64)>,
    /// The per-item sums (the roll-up's shape).
    sums: HashMap<String, u64>,
    max_batch: usize,
}

pub async fn run(o: Options) -> Result<(), String> {
    let clock = Clock::system();
    let double = StreamsDouble::start(Shape::shards(o.shards), clock.clone()).await?;
    let arn =
        "arn:aws:dynamodb:us-east-1:000000000000:table/benchmapping/stream/2027-01-01T00:00:00.000";
    double.add_stream(arn, "pk");
    let config = MappingConfig::builder()
        .batch_size(o.batch_size)
        .maximum_batching_window_secs(o.batching_window)
        .parallelization_factor(o.parallelization)
        .report_batch_item_failures(true)
        .build()
        .map_err(|e| e.to_string())?;
    let mut mapping = Mapping::new(double.client(), arn, config).with_clock(clock.clone());
    let meter = Arc::new(Mutex::new(Meter::default()));
    let started = Instant::now();
    let handler = {
        let (meter, clock) = (Arc::clone(&meter), clock.clone());
        move |event: Value| {
            record(&meter, &clock, &event, started);
            async { Ok::<_, String>(json!({"batchItemFailures": []})) }
        }
    };
    let injected = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let injector = tokio::spawn(inject(
        double.clone(),
        arn.to_string(),
        o.clone(),
        Arc::clone(&injected),
        Arc::clone(&done),
    ));
    let mut steps = 0u64;
    let mut load_end = None;
    let limit = Duration::from_secs(o.seconds * 4 + 60);
    loop {
        mapping.step(&handler).await.map_err(|e| e.to_string())?;
        steps += 1;
        if done.load(Ordering::SeqCst) {
            let end = *load_end.get_or_insert_with(Instant::now);
            let delivered = mapping.stats().records_succeeded;
            if delivered >= injected.load(Ordering::SeqCst) {
                let catch_up = end.elapsed();
                injector.await.map_err(|e| e.to_string())??;
                return report(&o, &mapping, &meter, &double, steps, started, catch_up);
            }
        }
        if started.elapsed() > limit {
            return Err(format!(
                "not caught up after {limit:?}: {} of {} delivered",
                mapping.stats().records_succeeded,
                injected.load(Ordering::SeqCst)
            ));
        }
    }
}

/// The handler's bookkeeping: each record's age, the per-item sums.
fn record(meter: &Mutex<Meter>, clock: &Clock, event: &Value, started: Instant) {
    let now = clock.now_ms();
    let at = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let records = event["Records"].as_array().map_or(&[][..], Vec::as_slice);
    let Ok(mut m) = meter.lock() else {
        return;
    };
    m.max_batch = m.max_batch.max(records.len());
    for r in records {
        let created = r["dynamodb"]["ApproximateCreationDateTime"]
            .as_f64()
            .map_or(now, |s| (s * 1000.0) as u64);
        m.ages.push((now.saturating_sub(created), at));
        let key = r["dynamodb"]["Keys"]["pk"]["S"].as_str().unwrap_or("?");
        *m.sums.entry(key.to_string()).or_default() += 1;
    }
}

/// Records at `rate` per second for `seconds`, in ticks of 10 ms.
async fn inject(
    double: StreamsDouble,
    arn: String,
    o: Options,
    injected: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
) -> Result<(), String> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(o.seed);
    let ticks = o.seconds * 100;
    let start = Instant::now();
    for tick in 0..ticks {
        let due = (tick + 1) * o.rate / 100 - tick * o.rate / 100;
        let records = (0..due)
            .map(|_| {
                let pk = format!("item-{}", rng.random_range(0..o.items.max(1)));
                json!({"dynamodb": {
                    "Keys": {"pk": {"S": pk}},
                    "NewImage": {"pk": {"S": pk}, "n": {"N": "1"}},
                }})
            })
            .collect();
        double.inject(&arn, records)?;
        injected.fetch_add(due, Ordering::SeqCst);
        let next = start + Duration::from_millis((tick + 1) * 10);
        tokio::time::sleep_until(next.into()).await;
    }
    done.store(true, Ordering::SeqCst);
    Ok(())
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(
    o: &Options,
    mapping: &Mapping,
    meter: &Mutex<Meter>,
    double: &StreamsDouble,
    steps: u64,
    started: Instant,
    catch_up: Duration,
) -> Result<(), String> {
    let m = meter.lock().map_err(|e| e.to_string())?;
    let total: u64 = m.sums.values().sum();
    let stats = mapping.stats();
    if total != stats.records_succeeded || stats.records_discarded > 0 {
        return Err(format!("delivered {total}, succeeded {stats:?}"));
    }
    let load_ms = o.seconds * 1000;
    let mut during: Vec<u64> = m
        .ages
        .iter()
        .filter(|(_, at)| *at <= load_ms)
        .map(|(a, _)| *a)
        .collect();
    during.sort_unstable();
    let mut all: Vec<u64> = m.ages.iter().map(|(a, _)| *a).collect();
    all.sort_unstable();
    let calls = double.stats().calls;
    let get_records = calls.get("GetRecords").copied().unwrap_or(0);
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "mapping emulator: {} shards, {} records/s for {} s over {} items, BatchSize {}, window {} s, ParallelizationFactor {}",
        o.shards, o.rate, o.seconds, o.items, o.batch_size, o.batching_window, o.parallelization
    );
    println!(
        "  records delivered      {total} (each once), in {} invocations, largest batch {}",
        stats.invocations, m.max_batch
    );
    println!("  throughput             {:.0} records/s over {elapsed:.1} s ({steps} steps, {get_records} GetRecords)", total as f64 / elapsed);
    println!(
        "  lag during the load    p50 {} ms, p99 {} ms, max {} ms",
        percentile(&during, 0.5),
        percentile(&during, 0.99),
        during.last().copied().unwrap_or(0)
    );
    println!(
        "  lag, every record      max {} ms",
        all.last().copied().unwrap_or(0)
    );
    println!(
        "  caught up              {} ms after the load stopped",
        catch_up.as_millis()
    );
    let mut figures = Figures::new("mapping");
    figures.push(json!({
        "shards": o.shards, "rate": o.rate, "seconds": o.seconds, "items": o.items,
        "batch_size": o.batch_size, "batching_window": o.batching_window,
        "parallelization": o.parallelization, "records": total,
        "invocations": stats.invocations, "largest_batch": m.max_batch,
        "records_per_s": total as f64 / elapsed,
        "lag_p50_ms": percentile(&during, 0.5), "lag_p99_ms": percentile(&during, 0.99),
        "lag_max_ms": all.last().copied().unwrap_or(0),
        "catch_up_ms": u64::try_from(catch_up.as_millis()).unwrap_or(u64::MAX),
    }));
    figures.write();
    Ok(())
}
