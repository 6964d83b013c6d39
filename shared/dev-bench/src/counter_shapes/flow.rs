//! Part 2, throughput and lag: journal records made by the writer (captured, [`super::capture`])
//! injected into a synthetic stream of the double (30 shards, each answer delayed) at `R`
//! events per clock second, the clock being the real time; the roll-up is the handler of the
//! emulated mapping (`BatchSize` 1000, `MaximumBatchingWindowInSeconds` `--batching-window`,
//! one batch per shard at once), polled continuously as Lambda polls, against the double and
//! DynamoDB Local's counter table; after the load stops, polled until every event is applied.
//! Per poll that applied keys: keys applied, the age of the newest applied event, the backlog;
//! then how long the catch-up took, in batching windows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dev_testing::{Shape, StreamsDouble};
use dynamodb_exactly_once::counter::journal::{Rollup, RollupConfig};

use crate::rollup_run::{MappingRollup, Settings};
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once::counter::CounterConfig;
use dynamodb_exactly_once::Clock;
use rand::{Rng, SeedableRng};

use super::capture::Writer;
use super::flow_report::{self, Kind, Outcome, RunStat};
use super::tables::{self, item_key};
use super::Options;

/// Injection ticks (wall time = clock time).
const TICK: Duration = Duration::from_millis(50);
/// Events made and injected at once at most.
const MAX_CHUNK: u64 = 5_000;

/// (clock ms, events injected so far), one entry per injection.
type Log = Arc<Mutex<Vec<(u64, u64)>>>;

pub async fn run(o: &Options) -> Result<(), String> {
    flow_report::header(o);
    let mut outcomes = Vec::new();
    let ladders = [
        (Kind::Cold(o.cold_items), &o.cold_rates),
        (Kind::Hot, &o.hot_rates),
    ];
    for (kind, rates) in ladders {
        for &rate in rates.iter() {
            let outcome = scenario(kind, rate, o).await?;
            flow_report::outcome(&outcome);
            let sustained = outcome.sustained();
            outcomes.push(outcome);
            if !sustained {
                break;
            }
        }
    }
    flow_report::summary(&outcomes);
    Ok(())
}

/// One rate of one kind of traffic, on fresh tables and a fresh double.
async fn scenario(kind: Kind, rate: usize, o: &Options) -> Result<Outcome, String> {
    let ddb = dev_testing::client();
    let tables = tables::create(&ddb, "flow").await?;
    let clock = Clock::from_fn(epoch_millis);
    let shape = Shape::shards(30).latency(Duration::from_millis(o.latency_ms));
    let double = StreamsDouble::start(shape, clock.clone()).await?;
    // Synthetic: the double never reads DynamoDB Local's stream of this journal.
    double.add_stream(&tables.arn, "pk");
    let config = CounterConfig::builder(&tables.counters)
        .journal(&tables.journal)
        .cache_keys(0)
        .journal_spread(if kind == Kind::Hot { 16 } else { 1 })
        .build()
        .map_err(|e| e.to_string())?;
    let writer = Writer::new(config.clone(), clock.clone())?;
    let rollup_config = RollupConfig::builder(config)
        .build()
        .map_err(|e| e.to_string())?;
    let rollup = Rollup::new(ddb, rollup_config).with_clock(clock.clone());
    let settings = Settings {
        batching_window_secs: o.batching_window,
        ..Settings::default()
    };
    let rollup = MappingRollup::with_settings(
        double.client(),
        &tables.arn,
        rollup,
        clock.clone(),
        settings,
    )?;
    // The writer reads the counter table's key schema once, before the clock starts.
    writer.records(vec![(item_key(0)?, "warm".into())]).await?;
    let start = clock.now_ms();
    let end = start + o.seconds * 1000;
    let log: Log = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = tokio::spawn(feed(
        Feed {
            writer,
            double: double.clone(),
            arn: tables.arn.clone(),
            kind,
            rate: rate as u64,
            start,
            end,
        },
        Arc::clone(&log),
        Arc::clone(&stop),
    ));
    let runs = poll(&rollup, &double, &clock, &log, start, end, o).await;
    stop.store(true, Ordering::SeqCst);
    let fed = feeder.await.map_err(|e| format!("feeder: {e}"))?;
    let injected = fed?;
    let (runs, catch_up_ms) = runs?;
    let log = std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(Outcome {
        catch_up_ms,
        batching_window: o.batching_window,
        kind,
        rate,
        seconds: o.seconds,
        interval: o.interval,
        injected,
        runs,
        start,
        log,
    })
}

/// The mapping polled continuously (one step: every shard read, one batch per ready shard
/// invoked; again after 100 ms when it applied nothing) from `start`; after `end`, until every injected event is applied (or four batching
/// windows and a minute more have passed): the polls that applied keys, and when the last
/// event was applied after `end` (ms; `None`: not caught up).
async fn poll(
    rollup: &MappingRollup,
    double: &StreamsDouble,
    clock: &Clock,
    log: &Log,
    start: u64,
    end: u64,
    o: &Options,
) -> Result<(Vec<RunStat>, Option<u64>), String> {
    let give_up = end + (4 * o.batching_window.max(1) as u64 + 60) * 1000;
    let mut runs = Vec::new();
    let mut applied_total = 0u64;
    let _ = start;
    loop {
        let run_start = clock.now_ms();
        let gets = get_records(double);
        let wall = Instant::now();
        let report = rollup
            .run_steps(1)
            .await
            .map_err(|e| format!("roll-up: {e}"))?;
        let run_end = clock.now_ms();
        applied_total += report.applied as u64;
        let injected = injected_by(log, run_end);
        if report.applied > 0 {
            runs.push(RunStat {
                start_ms: run_start,
                secs: wall.elapsed().as_secs_f64(),
                report,
                get_records: get_records(double) - gets,
                applied_total,
                backlog: injected.saturating_sub(applied_total),
                newest_age_ms: injected_at(log, applied_total).map(|at| run_end.saturating_sub(at)),
            });
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if run_end > end {
            let all = injected_by(log, u64::MAX);
            if applied_total >= all && all > 0 {
                return Ok((runs, Some(run_end - end)));
            }
            if run_end > give_up {
                return Ok((runs, None));
            }
        }
    }
}

/// Events injected by clock `at`.
fn injected_by(log: &Log, at: u64) -> u64 {
    let log = log.lock().unwrap_or_else(|p| p.into_inner());
    log.iter()
        .take_while(|(ms, _)| *ms <= at)
        .last()
        .map_or(0, |(_, n)| *n)
}

/// When the `n`-th event was injected (`None` for 0 or beyond what was injected).
fn injected_at(log: &Log, n: u64) -> Option<u64> {
    if n == 0 {
        return None;
    }
    let log = log.lock().unwrap_or_else(|p| p.into_inner());
    log.iter().find(|(_, total)| *total >= n).map(|(ms, _)| *ms)
}

/// What the feeder injects.
struct Feed {
    writer: Writer,
    double: StreamsDouble,
    arn: String,
    kind: Kind,
    rate: u64,
    start: u64,
    end: u64,
}

/// Inject the events due by the clock, every tick, until `end` (or `stop`): events injected.
async fn feed(f: Feed, log: Log, stop: Arc<AtomicBool>) -> Result<u64, String> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut sent = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let now = epoch_millis();
        if now >= f.end {
            break;
        }
        let due = f.rate * (now - f.start) / 1000;
        if due <= sent {
            tokio::time::sleep(TICK).await;
            continue;
        }
        let upto = due.min(sent + MAX_CHUNK);
        let mut events = Vec::with_capacity((upto - sent) as usize);
        for i in sent..upto {
            let item = match f.kind {
                Kind::Cold(items) => rng.random_range(0..items.max(1)),
                Kind::Hot => 0,
            };
            events.push((item_key(item)?, format!("e{i}")));
        }
        let records = f.writer.records(events).await?;
        if records.len() as u64 != upto - sent {
            return Err(format!(
                "the writer made {} records of {} events",
                records.len(),
                upto - sent
            ));
        }
        f.double.inject(&f.arn, records)?;
        sent = upto;
        let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
        log.push((epoch_millis(), sent));
    }
    Ok(sent)
}

fn get_records(double: &StreamsDouble) -> u64 {
    double.stats().calls.get("GetRecords").copied().unwrap_or(0)
}
