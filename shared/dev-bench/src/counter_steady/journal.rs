//! The project's journal mode: each regime's invocations journaled by the process under test,
//! the rest of each item's traffic at the declared rate journaled by other processes, and the
//! roll-up run as its schedule would run it (once per interval, in real time from the
//! interval's end); its cost is shared by the keys it rolled up.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dynamodb_exactly_once::counter::journal::{Rollup, RollupConfig};
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::{Deadline, Protocol};
use serde_json::Value;

use super::meter::Tally;
use super::setup::{count_labels, item_key, Env, Event, Regime, RollupShare, Row};
use super::sim::SimClock;
use crate::rollup_run::{MappingRollup, RunReport as RollupReport};

/// Operations of DynamoDB Streams (free for a Lambda trigger; a request unit when polled).
pub const STREAM_OPS: [&str; 4] = [
    "DescribeStream",
    "GetShardIterator",
    "GetRecords",
    "ListStreams",
];
/// Records per invocation of the other processes' traffic.
const FILL_BATCH: usize = 500;

/// The journal design's pieces.
pub struct Journal {
    pub warm: Counter,
    pub cold: Counter,
    /// The other processes writing the items' remaining traffic.
    pub others: Counter,
    pub rollup: MappingRollup,
    pub sim: SimClock,
    /// Keys added per item (what each counter must read in the end).
    pub expected: BTreeMap<usize, i64>,
    pub checks: Vec<String>,
}

impl Journal {
    pub async fn new(env: &Env, sim: SimClock, tag: &str) -> Result<Self, String> {
        let counters = env
            .table(&format!("{tag}counters"), &["PK", "SK"], false)
            .await?;
        let journal = env
            .table(&format!("{tag}journal"), &["pk", "sk"], true)
            .await?;
        let config = CounterConfig::builder(&counters)
            .journal(&journal)
            .build()
            .map_err(|e| e.to_string())?;
        let counter = |cache: Option<usize>| -> Result<Counter, String> {
            let mut c = config.to_builder();
            if let Some(keys) = cache {
                c = c.cache_keys(keys);
            }
            let config = c.build().map_err(|e| e.to_string())?;
            Ok(Counter::new(env.ddb.clone(), config).with_clock(sim.clock()))
        };
        let rollup_config = RollupConfig::builder(config.clone())
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Journal {
            warm: counter(None)?,
            cold: counter(Some(0))?,
            others: counter(Some(0))?,
            rollup: MappingRollup::new(
                env.streams.clone(),
                &stream_arn(env, &journal).await?,
                Rollup::new(env.ddb.clone(), rollup_config).with_clock(sim.clock()),
                sim.clock(),
            )?,
            sim,
            expected: BTreeMap::new(),
            checks: Vec::new(),
        })
    }

    /// Run the roll-up once from simulated time `at_ms`, until it has caught up.
    pub async fn roll_up(&self, at_ms: u64) -> Result<RollupReport, String> {
        self.sim.run_from(at_ms);
        let report = self
            .rollup
            .run()
            .await
            .map_err(|e| format!("roll-up: {e}"))?;
        if !report.caught_up {
            return Err(format!("the roll-up did not catch up: {report:?}"));
        }
        Ok(report)
    }
}

/// The latest stream of `table`.
async fn stream_arn(env: &Env, table: &str) -> Result<String, String> {
    let described = env.ddb.describe_table().table_name(table).send().await;
    described
        .map_err(|e| format!("{table}: {e}"))?
        .table()
        .and_then(|t| t.latest_stream_arn())
        .map(str::to_string)
        .ok_or_else(|| format!("{table} has no stream"))
}

/// Apply `events` with `counter` (1 per record on counter `n`); the outcome labels.
pub async fn apply(counter: &Counter, events: &[Event]) -> Result<Vec<&'static str>, String> {
    let records = events
        .iter()
        .map(|(item, key)| counter.record(item_key(*item), [("n", 1)], key.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let applied = counter
        .apply(records.into_iter().enumerate().collect(), Deadline::none())
        .await;
    Ok(applied.results.iter().map(|(_, r)| r.label()).collect())
}

/// The journal design in every regime, in order (one set of tables, roll-ups in between).
pub async fn run(
    env: &Env,
    regimes: &[Regime],
    rate: f64,
    interval: u64,
    start_ms: u64,
) -> Result<(Vec<Row>, Vec<String>), String> {
    let mut j = Journal::new(env, SimClock::at(start_ms), "j").await?;
    let mut rows = Vec::new();
    // Each regime starts where the previous one's schedule ended.
    let (mut t0, mut a_at) = (start_ms, start_ms);
    for regime in regimes {
        // Whatever an earlier regime left in the stream is rolled up first, uncounted.
        j.roll_up(t0).await?;
        let mut row = measure(env, &j, regime, t0).await?;
        row.design = "project journal";
        match regime.redelivery {
            None if regime.name == "a" => a_at = t0,
            Some(_) => row.outcomes += &format!(" ({} simulated s after (a))", (t0 - a_at) / 1000),
            None => {}
        }
        if regime.redelivery.is_none() {
            for inv in &regime.invocations {
                for (item, _) in inv {
                    *j.expected.entry(*item).or_default() += 1;
                }
            }
        }
        if regime.redelivery != Some(true) {
            let share = schedule(env, &mut j, regime, rate, interval, t0).await?;
            t0 += share.runs as u64 * interval * 1000;
            row.rollup = Some(share);
        }
        rows.push(row);
    }
    verify(&mut j).await?;
    Ok((rows, j.checks))
}

/// The regime's invocations, timed, with their calls and units.
pub async fn measure(env: &Env, j: &Journal, regime: &Regime, t0: u64) -> Result<Row, String> {
    let counter = match regime.redelivery {
        Some(false) => &j.cold,
        _ => &j.warm,
    };
    let before = env.meter.tally();
    let mut labels = Vec::new();
    let mut elapsed = Duration::ZERO;
    for (inv, offset) in regime.invocations.iter().zip(&regime.offsets) {
        j.sim.set(t0 + (offset * 1000.0) as u64);
        let started = Instant::now();
        labels.extend(apply(counter, inv).await?);
        elapsed += started.elapsed();
    }
    let tally = env.meter.tally().since(&before);
    Ok(Row {
        regime: regime.name,
        events: regime.events(),
        writer_wcu: tally.wcu,
        writer_calls: tally.total_calls(),
        writer_ops: tally.ops(),
        seconds: elapsed.as_secs_f64(),
        outcomes: count_labels(labels),
        ..Row::default()
    })
}

/// The roll-up on its schedule over the regime's traffic: each interval, the items' traffic
/// completed to the declared rate by the other processes, then one run. A redelivery gets one
/// run and no other traffic, and carries the whole run's cost.
async fn schedule(
    env: &Env,
    j: &mut Journal,
    regime: &Regime,
    rate: f64,
    interval: u64,
    t0: u64,
) -> Result<RollupShare, String> {
    let mut so_far: BTreeMap<usize, usize> = regime.items.iter().map(|i| (*i, 0)).collect();
    if regime.redelivery.is_none() {
        for (item, _) in regime.invocations.iter().flatten() {
            *so_far.entry(*item).or_default() += 1;
        }
    }
    let per_run = (rate * interval as f64).round() as usize;
    let most = so_far.values().copied().max().unwrap_or(0);
    let runs = match regime.redelivery {
        Some(_) => 1,
        None => most.div_ceil(per_run.max(1)).max(1),
    };
    let mut share = RollupShare {
        runs,
        ..RollupShare::default()
    };
    let mut rolled = Tally::default();
    for run in 0..runs {
        let end = t0 + (run as u64 + 1) * interval * 1000;
        if regime.redelivery.is_none() {
            fill(j, regime.name, &mut so_far, per_run * (run + 1), end - 1000).await?;
        }
        let before = env.meter.tally();
        let started = Instant::now();
        let report = j.roll_up(end).await?;
        share.seconds += started.elapsed().as_secs_f64();
        let tally = env.meter.tally().since(&before);
        if (report.write_units - tally.wcu as f64).abs() > 0.5 {
            j.checks.push(format!(
                "regime {}: the roll-up reported {} write units, the meter billed {}",
                regime.name, report.write_units, tally.wcu
            ));
        }
        if regime.redelivery.is_some() && report.applied > 0 {
            j.checks.push(format!(
                "regime {}: the roll-up applied {} redelivered keys",
                regime.name, report.applied
            ));
        }
        share.keys += report.keys;
        rolled = add(&rolled, &tally);
    }
    let per = match regime.redelivery {
        Some(_) => regime.events(),
        None => share.keys,
    } as f64;
    let stream_calls: u64 = STREAM_OPS
        .iter()
        .filter_map(|op| rolled.calls.get(*op))
        .sum();
    share.wcu_per_key = rolled.wcu as f64 / per;
    share.calls_per_key = (rolled.total_calls() - stream_calls) as f64 / per;
    share.stream_calls_per_key = stream_calls as f64 / per;
    Ok(share)
}

fn add(a: &Tally, b: &Tally) -> Tally {
    let mut sum = a.clone();
    for (op, n) in &b.calls {
        *sum.calls.entry(op.clone()).or_default() += n;
    }
    sum.wcu += b.wcu;
    sum.failed_without_item += b.failed_without_item;
    sum
}

/// The other processes' traffic: each item's keys brought up to `target`, at `at_ms`.
async fn fill(
    j: &mut Journal,
    tag: &str,
    so_far: &mut BTreeMap<usize, usize>,
    target: usize,
    at_ms: u64,
) -> Result<(), String> {
    let mut events = Vec::new();
    for (item, n) in so_far.iter_mut() {
        while *n < target {
            events.push((*item, format!("fill-{tag}-{item}-{n}")));
            *n += 1;
            *j.expected.entry(*item).or_default() += 1;
        }
    }
    j.sim.set(at_ms);
    for chunk in events.chunks(FILL_BATCH) {
        let labels = apply(&j.others, chunk).await?;
        if labels.iter().any(|l| *l != "journaled") {
            return Err(format!("fill: {}", count_labels(labels)));
        }
    }
    Ok(())
}

/// Every counter reads the keys journaled for it, each once.
async fn verify(j: &mut Journal) -> Result<(), String> {
    let mut wrong = 0;
    for (item, want) in &j.expected {
        let got: Option<Value> = j
            .warm
            .get(&item_key(*item))
            .await
            .map_err(|e| e.to_string())?;
        let got = got
            .and_then(|v| v.get("n").and_then(Value::as_i64))
            .unwrap_or(0);
        if got != *want {
            wrong += 1;
            j.checks.push(format!(
                "journal: cust#{item:04} reads {got}, {want} keys were journaled"
            ));
        }
    }
    if wrong == 0 {
        j.checks.push(format!(
            "journal: all {} counters read exactly their distinct keys ({} keys) after the roll-ups",
            j.expected.len(),
            j.expected.values().sum::<i64>()
        ));
    }
    Ok(())
}
