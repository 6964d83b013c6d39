//! Part 3, issue 39's cost goals at the shapes it names (`--part goals`): billed write units
//! per event of the journal mode with the roll-up as the handler of the journal stream's
//! mapping (the emulator, `dev_testing::mapping`, over the Streams double, rollover every 4 h),
//! at 1 key/s, 1 key/min and 6 keys/h per item, without a hold (`TumblingWindowInSeconds` 60)
//! and with a 15-minute tumbling window holding the keys; after 30 simulated days.
//!
//! **The sample, and why it carries over.** The tables (600,000 items at 6 keys/h,
//! 60,000 at 1 key/min: 1,000 keys/s each; at 1 key/s the same 1,000 keys/s over 1,000
//! items) are billions of events over 30 days. The mapping reads each shard lineage on its
//! own: a batch, a window and its state never hold two lineages' records, and an item's
//! partition key stays in one lineage. So the table's cost per event is one lineage's. A
//! lineage (one shard of the 30, rolling over every 4 h) gets 1/30 of the items and of the
//! keys: 20,000 items at 6 keys/h, 2,000 at 1 key/min, 33 at 1 key/s (33.3 keys/s), with the
//! stack's mapping settings (`BatchSize` 1000, `MaximumBatchingWindowInSeconds` 60, the
//! window), so that each batch and each window's state holds what production's would. Two
//! phases on one mapping and one clock:
//!
//! 1. **30 days** on `--goal-tracked` further items of the lineage, with the clock compressed:
//!    one key every 2 hours per item adding what the item's rate adds in 2 hours (so each
//!    4-hour shard generation and each day gets its watermark and day sum, with production's
//!    magnitudes): the attributes an item accumulates and the bound removes are
//!    production's, so its size at day 30 and its removals (the bound's writes) over 30 days
//!    are too. The removals are charged per event as (removal units per item in 30 days) /
//!    (the item's events in 30 days at its rate).
//! 2. **The measured segment** at day 30 (`--goal-minutes`, aligned on 15-minute windows):
//!    every item of the lineage at its rate, keys spread evenly over each item's period,
//!    journaled in ticks of 5 s of clock, the mapping stepped after each tick; then flushed.
//!    Journal `INSERT`s are billed `ceil(size / 1 KB)` (DynamoDB Local reports no capacity
//!    for PartiQL); the roll-up's own `write_units` bill its updates, removals and failed
//!    conditions. Every counter must read exactly its keys.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::{Shape, StreamsDouble};
use dynamodb_exactly_once::__private::item_size;
use dynamodb_exactly_once::counter::journal::{Rollup, RollupConfig};
use dynamodb_exactly_once::counter::CounterConfig;
use dynamodb_exactly_once::Item;
use dynamodb_exactly_once::{Clock, ItemKey};

use crate::rollup_run::{MappingRollup, RunReport, Settings};

use super::capture::Writer;
use super::goals_report::{self, Day, Goal, GoalRow, Segment, Tracked};
use super::meter::{Meter, Mirror, Tap};
use super::report::Rate;
use super::tables::{self, item_key, Tables};
use super::Options;

const SEC: u64 = 1000;
const HOUR: u64 = 3600 * SEC;
const DAY: u64 = 24 * HOUR;
/// The tracked items' step: one key every 2 hours (two per 4-hour generation).
const TRACK_STEP: u64 = 2 * HOUR;
/// The segment's tick: the keys of 5 s journaled, then the mapping stepped.
const TICK: u64 = 5 * SEC;

/// The configurations: each rate without and with the window.
pub fn goals(o: &Options) -> Result<Vec<Goal>, String> {
    let scale = if o.quick { 10 } else { 1 };
    let (days, minutes) = match o.quick {
        true => (3.0, 15),
        false => (o.goal_days, o.goal_minutes),
    };
    let mut out = Vec::new();
    for rate in &o.rates {
        let (rate, items) = match rate.as_str() {
            "s" => (Rate::Second, 33),
            "m" => (Rate::Minute, 60_000 / 30),
            "h" => (Rate::SixPerHour, 600_000 / 30),
            other => return Err(format!("--rates: {other:?} is not s, m or h")),
        };
        for window in [false, true] {
            out.push(Goal {
                rate,
                window,
                items: (items / scale).max(1),
                tracked: o.goal_tracked,
                days,
                minutes,
            });
        }
    }
    Ok(out)
}

/// Every goal configuration, one after the other; the tables printed.
pub async fn run(o: &Options) -> Result<(), String> {
    let goals = goals(o)?;
    goals_report::header(&goals);
    let mut rows = Vec::new();
    for goal in &goals {
        let started = Instant::now();
        let mut sim = Sim::new(goal).await?;
        let tracked = sim.track(goal).await?;
        let segment = sim.segment(goal).await?;
        let row = GoalRow {
            goal: goal.clone(),
            tracked,
            segment,
            wall_secs: started.elapsed().as_secs_f64(),
        };
        goals_report::progress(&row);
        rows.push(row);
    }
    goals_report::table(&rows);
    Ok(())
}

/// One configuration's tables, clock, double, writer and roll-up.
struct Sim {
    ddb: Client,
    tables: Tables,
    now: Arc<AtomicU64>,
    t0: u64,
    writer: Writer,
    mirror: Mirror,
    rollup: MappingRollup,
    meter: Meter,
    /// What each item must read (`n`).
    written: Vec<i64>,
    next_key: u64,
}

impl Sim {
    async fn new(g: &Goal) -> Result<Sim, String> {
        let ddb = dev_testing::client();
        let tables = tables::create(&ddb, "goal").await?;
        let t0 = dynamodb_exactly_once::__private::epoch_millis();
        let now = Arc::new(AtomicU64::new(t0));
        let read = Arc::clone(&now);
        let clock = Clock::from_fn(move || read.load(Ordering::SeqCst));
        let shape = Shape::shards(1).rollover(Duration::from_secs(4 * 3600));
        let double = StreamsDouble::start(shape, clock.clone()).await?;
        double.add_stream(&tables.arn, "pk");
        let mirror = Mirror {
            double: double.clone(),
            arn: tables.arn.clone(),
            table: tables.journal.clone(),
            seen: Arc::default(),
        };
        let config = CounterConfig::builder(&tables.counters)
            .journal(&tables.journal)
            .cache_keys(0)
            .build()
            .map_err(|e| e.to_string())?;
        let writer = Writer::new(config.clone(), clock.clone())?;
        let meter = Meter::default();
        let tap = Tap {
            meter: meter.clone(),
            mirror: Some(mirror.clone()),
        };
        let rolling = dev_testing::client_intercepted(&dev_testing::endpoint(), tap, 3);
        let rollup_config = RollupConfig::builder(config)
            .hold_in_window(g.window)
            .build()
            .map_err(|e| e.to_string())?;
        let rollup = Rollup::new(rolling, rollup_config).with_clock(clock.clone());
        let settings = Settings {
            batch_size: 1000,
            batching_window_secs: 60,
            tumbling_window_secs: g.tumbling_secs(),
        };
        let rollup =
            MappingRollup::with_settings(double.client(), &tables.arn, rollup, clock, settings)?;
        Ok(Sim {
            ddb,
            tables,
            now,
            t0,
            writer,
            mirror,
            rollup,
            meter,
            written: vec![0; g.items + g.tracked],
            next_key: 0,
        })
    }

    fn set(&self, ms: u64) {
        self.now.store(self.t0 + ms, Ordering::SeqCst);
    }

    /// Journal `events` (item index, what it adds) at `at_ms`: the write units billed.
    async fn journal(&mut self, events: &[(usize, i64)], at_ms: u64) -> Result<f64, String> {
        self.set(at_ms);
        let mut batch = Vec::with_capacity(events.len());
        for &(item, n) in events {
            self.next_key += 1;
            batch.push((item_key(item)?, format!("k{}", self.next_key), n));
            self.written[item] += n;
        }
        let items = self.writer.items_adding(batch).await?;
        if items.len() != events.len() {
            return Err(format!(
                "journal: {} items for {}",
                items.len(),
                events.len()
            ));
        }
        self.mirror.put(&items)?;
        Ok(items
            .iter()
            .map(|i| item_size(i).div_ceil(1024).max(1) as f64)
            .sum())
    }

    /// The mapping stepped until idle at `at_ms`.
    async fn step(&self, at_ms: u64, sum: &mut RunReport) -> Result<(), String> {
        self.set(at_ms);
        let r = self
            .rollup
            .run()
            .await
            .map_err(|e| format!("roll-up: {e}"))?;
        if !r.caught_up || r.trimmed > 0 || r.dead_letters > 0 {
            return Err(format!("at {at_ms} ms: an odd run: {r:?}"));
        }
        sum.write_units += r.write_units;
        sum.item_updates += r.item_updates;
        sum.applied += r.applied;
        sum.invocations += r.invocations;
        sum.max_state_bytes = sum.max_state_bytes.max(r.max_state_bytes);
        Ok(())
    }

    /// Everything journaled up to `at_ms` delivered: the batching window and the tumbling
    /// window passed.
    async fn flush(&self, g: &Goal, at_ms: u64, sum: &mut RunReport) -> Result<(), String> {
        let window = u64::try_from(g.tumbling_secs()).unwrap_or(60) * SEC;
        for later in [SEC, 62 * SEC, window + 122 * SEC] {
            self.step(at_ms + later, sum).await?;
        }
        Ok(())
    }

    /// Phase 1: the tracked items over the days, one key each every 2 hours.
    async fn track(&mut self, g: &Goal) -> Result<Tracked, String> {
        let per_step = i64::try_from(TRACK_STEP / g.period()).unwrap_or(1);
        let steps = (g.days * DAY as f64 / TRACK_STEP as f64).round() as u64;
        let report_days = [1u64, 2, 5, 10, 20, 30];
        let (mut sum, mut days) = (RunReport::default(), Vec::new());
        let bill0 = self.meter.bill();
        let events: Vec<(usize, i64)> = (g.items..g.items + g.tracked)
            .map(|i| (i, per_step))
            .collect();
        for s in 0..steps {
            let at = s * TRACK_STEP;
            self.journal(&events, at).await?;
            self.flush(g, at, &mut sum).await?;
            let day = (at + TRACK_STEP) / DAY;
            let day_ends = (at + TRACK_STEP).is_multiple_of(DAY);
            if day_ends && (report_days.contains(&day) || s + 1 == steps) {
                days.push(self.inspect_tracked(g, day).await?);
            }
        }
        let bill = self.meter.bill().since(&bill0);
        let (calls, units) = bill
            .tables
            .get(&self.tables.counters)
            .copied()
            .unwrap_or_default();
        Ok(Tracked {
            steps,
            keys_per_step: per_step,
            updates: sum.item_updates,
            counter_calls: calls,
            counter_units: units,
            rollup_units: sum.write_units,
            days,
        })
    }

    /// The tracked items at the end of `day`: the largest (bytes, watermarks, day sums).
    async fn inspect_tracked(&self, g: &Goal, day: u64) -> Result<Day, String> {
        let mut out = Day {
            day,
            ..Day::default()
        };
        for i in g.items..g.items + g.tracked {
            let item = self.get(&item_key(i)?).await?;
            if count(&item) != self.written[i] {
                out.wrong += 1;
            }
            let (bytes, marks, sums) = shape(&item);
            out.bytes = out.bytes.max(bytes);
            out.watermarks = out.watermarks.max(marks);
            out.day_sums = out.day_sums.max(sums);
        }
        Ok(out)
    }

    /// Phase 2: every item of the lineage at its rate for the segment, from a 15-minute
    /// boundary of the clock after the days.
    async fn segment(&mut self, g: &Goal) -> Result<Segment, String> {
        let quarter = 900 * SEC;
        let start_abs = (self.t0 + (g.days * DAY as f64) as u64 + HOUR).div_ceil(quarter) * quarter;
        let start = start_abs - self.t0;
        let end = g.minutes * 60 * SEC;
        let (mut sum, mut seg) = (RunReport::default(), Segment::default());
        let bill0 = self.meter.bill();
        let wall = Instant::now();
        let mut tick = 0;
        while tick < end {
            let events = keys_in(g, tick, tick + TICK);
            seg.events += events.len();
            seg.journal_units += self.journal(&events, start + tick).await?;
            tick += TICK;
            self.step(start + tick, &mut sum).await?;
        }
        self.flush(g, start + end, &mut sum).await?;
        let bill = self.meter.bill().since(&bill0);
        let (calls, _) = bill
            .tables
            .get(&self.tables.counters)
            .copied()
            .unwrap_or_default();
        seg.rollup_units = sum.write_units;
        seg.updates = sum.item_updates;
        seg.removals = calls.saturating_sub(sum.item_updates as u64);
        seg.invocations = sum.invocations;
        seg.max_state_bytes = sum.max_state_bytes;
        seg.wall_secs = wall.elapsed().as_secs_f64();
        seg.wrong = self.wrong_items().await?;
        Ok(seg)
    }

    /// Items whose `n` is not what was journaled (a scan of the counter table).
    async fn wrong_items(&self) -> Result<usize, String> {
        let mut read = vec![0i64; self.written.len()];
        let mut start = None;
        loop {
            let page = self
                .ddb
                .scan()
                .table_name(&self.tables.counters)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| format!("scan: {e:?}"))?;
            for item in page.items() {
                let index = match item.get("PK") {
                    Some(AttributeValue::S(pk)) => pk.trim_start_matches("cust#").parse().ok(),
                    _ => None,
                };
                if let Some(slot) = index.and_then(|i: usize| read.get_mut(i)) {
                    *slot = count(item);
                }
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        Ok(read
            .iter()
            .zip(&self.written)
            .filter(|(r, w)| r != w)
            .count())
    }

    async fn get(&self, key: &ItemKey) -> Result<Item, String> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.tables.counters)
            .set_key(Some(key.to_item().map_err(|e| e.to_string())?))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| format!("get item: {e:?}"))?;
        Ok(out.item.unwrap_or_default())
    }
}

/// The segment's keys in `[from, to)` (ms from its start): each item's keys at its rate, the
/// items' offsets spread evenly over the period.
fn keys_in(g: &Goal, from: u64, to: u64) -> Vec<(usize, i64)> {
    let period = g.period();
    let n = g.items.max(1) as u64;
    let mut out = Vec::new();
    for i in 0..g.items {
        let offset = i as u64 * period / n;
        // The first key time at or after `from`: offset + k * period.
        let k = from.saturating_sub(offset).div_ceil(period);
        let mut at = offset + k * period;
        while at < to {
            out.push((i, 1));
            at += period;
        }
    }
    out
}

/// The counter's `n` (0 when absent).
fn count(item: &Item) -> i64 {
    match item.get("n") {
        Some(AttributeValue::N(n)) => n.parse().unwrap_or(-1),
        _ => 0,
    }
}

/// An item's size in bytes, its watermarks and its day sums.
fn shape(item: &Item) -> (usize, usize, usize) {
    let marks = item.keys().filter(|k| k.starts_with("ctr_w_")).count();
    let sums = item
        .keys()
        .filter(|k| {
            k.strip_prefix("ctr_d")
                .is_some_and(|d| d.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count();
    (item_size(item), marks, sums)
}
