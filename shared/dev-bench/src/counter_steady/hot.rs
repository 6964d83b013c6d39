//! The hot counter: `rate` events/s with distinct idempotency keys into one counter item for
//! `seconds` simulated seconds in journal mode, the roll-up run at the end of the span as its
//! schedule fires it (in real time from then). Every write is logged per item with its
//! simulated time; the figure is the most write units any one item received within one
//! simulated second. Inline mode is computed, not run (it cannot hold the keys).

use std::collections::BTreeMap;
use std::time::Instant;

use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once::counter::CounterConfig;
use serde_json::Value;

use super::journal::{apply, Journal};
use super::setup::{item_key, Env};
use super::sim::SimClock;

/// Records per invocation (a Kinesis batch).
const BATCH: usize = 500;

/// What the simulation found.
#[derive(Debug, Default)]
pub struct Hot {
    pub events: usize,
    pub write_seconds: f64,
    pub rollup_runs: usize,
    pub rollup_seconds: f64,
    pub counter_updates: usize,
    /// Kind of item → (most units in one simulated second, items of that kind, writes).
    pub peaks: BTreeMap<&'static str, (u64, usize, usize)>,
    pub total: i64,
}

pub async fn run(env: &Env, rate: usize, seconds: usize, start_ms: u64) -> Result<Hot, String> {
    let j = Journal::new(env, SimClock::at(start_ms), "hot").await?;
    let events = rate * seconds;
    let mut hot = Hot {
        events,
        ..Hot::default()
    };
    env.meter.start_log(&j.sim);
    let started = Instant::now();
    for first in (0..events).step_by(BATCH) {
        j.sim.set(start_ms + (first as u64 * 1000) / rate as u64);
        let batch: Vec<_> = (first..(first + BATCH).min(events))
            .map(|i| (0, format!("hot-{i}")))
            .collect();
        let labels = apply(&j.warm, &batch).await?;
        if labels.iter().any(|l| *l != "journaled") {
            return Err(format!("hot: a record was not journaled ({labels:?})"));
        }
    }
    hot.write_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    // The roll-up's run starts at the span's end, or at the real time if journaling took
    // longer: it reads each shard up to its run's start, and DynamoDB Local stamps stream
    // records with the real time.
    let end = (start_ms + seconds as u64 * 1000).max(epoch_millis());
    let report = j.roll_up(end).await?;
    hot.rollup_runs = 1;
    hot.counter_updates = report.item_updates;
    hot.rollup_seconds = started.elapsed().as_secs_f64();
    let log = env.meter.take_log();
    let mut per_second: BTreeMap<(&'static str, String, u64), u64> = BTreeMap::new();
    let mut items: BTreeMap<&'static str, (std::collections::BTreeSet<String>, usize)> =
        BTreeMap::new();
    for w in log {
        let kind = if w.item.contains("hotcounters/") {
            "counter item (roll-up updates)"
        } else {
            "journal items (one per key)"
        };
        *per_second
            .entry((kind, w.item.clone(), w.sim_ms / 1000))
            .or_default() += w.units;
        let entry = items.entry(kind).or_default();
        entry.0.insert(w.item);
        entry.1 += 1;
    }
    for ((kind, _, _), units) in per_second {
        let (n, set) = items
            .get(kind)
            .map(|(s, w)| (s.len(), *w))
            .unwrap_or_default();
        let peak = hot.peaks.entry(kind).or_insert((0, n, set));
        peak.0 = peak.0.max(units);
    }
    let got: Option<Value> = j.warm.get(&item_key(0)).await.map_err(|e| e.to_string())?;
    hot.total = got
        .and_then(|v| v.get("n").and_then(Value::as_i64))
        .unwrap_or(0);
    Ok(hot)
}

/// Inline mode at `rate` new keys/s on one item, from its settings: the lines to print.
pub fn inline_analysis(rate: f64, batch: usize) -> Vec<String> {
    let config = CounterConfig::builder("analysis")
        .build()
        .expect("valid configuration");
    let kept = config.capacity().retention_seconds as f64;
    let key_bytes = rate * kept * dynamodb_exactly_once::counter::KEY_BYTES as f64;
    let writes = rate / batch as f64;
    let fit = config.max_fitting_keys_per_second().unwrap_or(0.0);
    let cap_kb = (400.0_f64).min(key_bytes / 1024.0);
    vec![
        format!(
            "inline (computed, not run): {rate:.0} keys/s × {kept:.0} s kept (1 h window, 2 buckets) × 22 B = {:.0} MB of keys in one item; DynamoDB's item limit is 400 KB, the default capacity rule allows {fit} keys/s per item",
            key_bytes / 1e6
        ),
        format!(
            "inline (computed): even at the 400 KB item limit each write is billed {cap_kb:.0} WCU; {rate:.0} events/s in batches of {batch} = {writes:.0} writes/s = {:.0} WCU/s on one item (limit 1,000 WCU/s per partition)",
            cap_kb * writes
        ),
    ]
}
