//! Part 1, the cost in the steady state: for each configuration (shards, per-item rate,
//! spread), fresh tables, a Streams double with rollover every 4 h of clock over DynamoDB
//! Local's stream, one simulated clock shared by the writer, the roll-up and the double, and
//! minute by minute: the minute's keys journaled (at :30), the roll-up run at the minute's end.
//! The double's stream of the journal is fed by mirroring every put into the journal table
//! (the writer's and the roll-up's checkpoints) as it lands ([`super::meter::Tap`]): DynamoDB
//! Local answers a `GetRecords` in ~30 ms here and the double pulls upstream on every request,
//! which made a run of 30 shards take 1.5 s; `--upstream` reads DynamoDB Local's stream
//! instead (`sync_stream` after each write), to compare. A minute without a key is skipped (its run is costed from idle runs
//! measured at the end).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::{Shape, StreamsDouble};
use dynamodb_exactly_once::counter::journal::{Rollup, RollupConfig};

use crate::rollup_run::{MappingRollup, RunReport as RollupReport};
use dynamodb_exactly_once::__private::item_size;
use dynamodb_exactly_once::counter::CounterConfig;
use dynamodb_exactly_once::Clock;

use super::journal::Journal;
use super::meter::{Meter, Mirror, Tap};
use super::report::{self, Config, Rate, Row, Totals};
use super::tables::{self, item_key, Tables};
use super::Options;

const MINUTE: u64 = 60_000;
/// Rollover period of the double's shards.
const ROLLOVER: Duration = Duration::from_secs(4 * 3600);

/// Every configuration of part 1, run one after the other; the table printed.
pub async fn run(o: &Options) -> Result<(), String> {
    let configs = configs(o)?;
    report::steady_header(o, &configs);
    println!("{}", super::journal::billing_check().await?);
    let mut rows = Vec::new();
    for config in &configs {
        let row = Sim::new(config, o.upstream)
            .await?
            .simulate(config, o)
            .await?;
        report::steady_row_progress(&row);
        rows.push(row);
    }
    report::steady_table(&rows);
    Ok(())
}

fn configs(o: &Options) -> Result<Vec<Config>, String> {
    let span = (o.days * 24.0 * 60.0).round() as u64 + 30;
    let hours = |h: f64| (h * 60.0).round() as u64;
    let items = |i: usize| o.items.get(i).copied().unwrap_or(10);
    let mut out = Vec::new();
    for rate in &o.rates {
        let (rate, items, window) = match rate.as_str() {
            "s" => (Rate::Second, items(0), hours(o.fast_hours)),
            "m" => (Rate::Minute, items(1), hours(o.minute_hours)),
            "h" => (Rate::SixPerHour, items(2), hours(o.slow_hours)),
            other => return Err(format!("--rates: {other:?} is not s, m or h")),
        };
        for &shards in &o.shards {
            out.push(Config {
                shards,
                rate,
                spread: 1,
                items,
                window_min: window.min(span),
                span_min: span,
                hold_secs: o.hold_secs,
            });
        }
    }
    if o.spread && o.rates.iter().any(|r| r == "m") {
        out.push(Config {
            shards: 30,
            rate: Rate::Minute,
            spread: 16,
            items: items(1),
            window_min: hours(o.minute_hours).min(span),
            span_min: span,
            hold_secs: o.hold_secs,
        });
    }
    Ok(out)
}

/// One configuration's tables, clock, double, writer and roll-up.
struct Sim {
    ddb: Client,
    tables: Tables,
    now: Arc<AtomicU64>,
    t0: u64,
    double: StreamsDouble,
    journal: Journal,
    rollup: MappingRollup,
    rollup_meter: Meter,
    /// Keys journaled per item (what each counter must read).
    written: Vec<i64>,
    next_key: u64,
    /// The double reads DynamoDB Local's stream (else the puts are mirrored into it).
    upstream: bool,
}

impl Sim {
    async fn new(c: &Config, upstream: bool) -> Result<Sim, String> {
        let ddb = dev_testing::client();
        let tables = tables::create(&ddb, "shape").await?;
        // The real time now: journal TTLs (clock + 14 d) stay ahead of DynamoDB Local's clock.
        let t0 = dynamodb_exactly_once::__private::epoch_millis();
        let now = Arc::new(AtomicU64::new(t0));
        let read = Arc::clone(&now);
        let clock = Clock::from_fn(move || read.load(Ordering::SeqCst));
        let shape = Shape::shards(c.shards).rollover(ROLLOVER);
        let double = StreamsDouble::start(shape, clock.clone()).await?;
        let mirror = match upstream {
            true => {
                double.sync_stream(&tables.arn).await?;
                None
            }
            false => {
                double.add_stream(&tables.arn, "pk");
                Some(Mirror {
                    double: double.clone(),
                    arn: tables.arn.clone(),
                    table: tables.journal.clone(),
                    seen: Arc::default(),
                })
            }
        };
        let config = CounterConfig::builder(&tables.counters)
            .journal(&tables.journal)
            .cache_keys(0)
            .journal_spread(c.spread)
            .build()
            .map_err(|e| e.to_string())?;
        let journal = Journal::new(config.clone(), clock.clone(), mirror.clone())?;
        let rollup_meter = Meter::default();
        let tap = Tap {
            meter: rollup_meter.clone(),
            mirror,
        };
        let rolling = dev_testing::client_intercepted(&dev_testing::endpoint(), tap, 3);
        let rollup_config = RollupConfig::builder(config)
            .build()
            .map_err(|e| e.to_string())?;
        let rollup = Rollup::new(rolling, rollup_config).with_clock(clock.clone());
        let rollup = MappingRollup::new(double.client(), &tables.arn, rollup, clock)?;
        Ok(Sim {
            ddb,
            tables,
            now,
            t0,
            double,
            journal,
            rollup,
            rollup_meter,
            written: vec![0; c.items],
            next_key: 0,
            upstream,
        })
    }

    fn set(&self, ms: u64) {
        self.now.store(self.t0 + ms, Ordering::SeqCst);
    }

    /// Journal `per_item` keys on every item at `at_ms` (from t0); the double takes them in.
    /// The write units billed.
    async fn journal(&mut self, per_item: usize, at_ms: u64) -> Result<f64, String> {
        self.set(at_ms);
        let mut events = Vec::new();
        for item in 0..self.written.len() {
            for _ in 0..per_item {
                self.next_key += 1;
                events.push((item_key(item)?, format!("k{}", self.next_key)));
            }
            self.written[item] += per_item as i64;
        }
        let units = self.journal.put(events).await?;
        if self.upstream {
            self.double.sync_stream(&self.tables.arn).await?;
        }
        Ok(units)
    }

    /// One roll-up run at `at_ms`: its report and `GetRecords` calls.
    async fn roll_up(&self, at_ms: u64) -> Result<(RollupReport, u64), String> {
        self.set(at_ms);
        let before = get_records(&self.double);
        let report = self
            .rollup
            .run()
            .await
            .map_err(|e| format!("roll-up: {e}"))?;
        Ok((report, get_records(&self.double) - before))
    }

    async fn simulate(mut self, c: &Config, o: &Options) -> Result<Row, String> {
        let started = Instant::now();
        let warm_end = c.span_min - c.window_min;
        let mut totals = Totals::default();
        let mut checks = Vec::new();
        for minute in 0..c.span_min {
            let measured = minute >= warm_end;
            let per_item = match measured {
                false => usize::from(minute.is_multiple_of(o.warmup_step_min.max(1))),
                true => c.rate.keys_in_minute(minute),
            };
            if per_item == 0 {
                totals.skipped += u64::from(measured);
                continue;
            }
            let r0 = self.rollup_meter.bill();
            let wall = Instant::now();
            let journal_wcu = self.journal(per_item, minute * MINUTE + MINUTE / 2).await?;
            let journal_secs = wall.elapsed().as_secs_f64();
            let (report, gets) = self.roll_up((minute + 1) * MINUTE).await?;
            let rollup_secs = wall.elapsed().as_secs_f64() - journal_secs;
            note(&report, minute, &mut checks);
            if measured {
                let rolled = self.rollup_meter.bill().since(&r0);
                totals.add_run(&report, gets, per_item * self.written.len());
                totals.journal_secs += journal_secs;
                totals.rollup_secs += rollup_secs;
                totals.journal_wcu += journal_wcu;
                totals.update_wcu += rolled.units(&self.tables.counters);
                totals.checkpoint_wcu += rolled.units(&self.tables.journal);
            }
        }
        let idle = self.idle_runs(c.span_min, o.idle_runs, &mut checks).await?;
        let items = self.inspect(&mut checks).await?;
        Ok(Row {
            config: c.clone(),
            totals,
            idle,
            items,
            shards_listed: self.double.listed_shards(&self.tables.arn).len(),
            wall_secs: started.elapsed().as_secs_f64(),
            checks,
        })
    }

    /// `n` runs a minute apart with no new key: mean write units and `GetRecords` per run.
    async fn idle_runs(
        &self,
        from_min: u64,
        n: usize,
        checks: &mut Vec<String>,
    ) -> Result<(f64, f64), String> {
        let (mut wcu, mut gets) = (0.0, 0);
        for k in 0..n as u64 {
            let (report, g) = self.roll_up((from_min + 1 + k) * MINUTE).await?;
            note(&report, from_min + 1 + k, checks);
            wcu += report.write_units;
            gets += g;
        }
        let n = n.max(1) as f64;
        Ok((wcu / n, gets as f64 / n))
    }

    /// Each item read with a plain `GetItem`: watermarks, size, and whether it counts its keys.
    async fn inspect(&self, checks: &mut Vec<String>) -> Result<Vec<(usize, usize)>, String> {
        let mut out = Vec::new();
        for (i, want) in self.written.iter().enumerate() {
            let item = self
                .ddb
                .get_item()
                .table_name(&self.tables.counters)
                .set_key(Some(item_key(i)?.to_item().map_err(|e| e.to_string())?))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| format!("get item: {e:?}"))?
                .item
                .unwrap_or_default();
            let marks = item.keys().filter(|k| k.starts_with("ctr_w_")).count();
            let got = match item.get("n") {
                Some(AttributeValue::N(n)) => n.parse::<i64>().unwrap_or(-1),
                _ => 0,
            };
            if got != *want {
                checks.push(format!("item {i} reads {got}, {want} keys were journaled"));
            }
            out.push((marks, item_size(&item)));
        }
        Ok(out)
    }
}

/// Anything a run reports that is not the steady state's normal.
fn note(report: &RollupReport, minute: u64, checks: &mut Vec<String>) {
    let odd = !report.caught_up
        || report.trimmed > 0
        || report.dead_letters > 0
        || report.failed_items > 0
        || report.failed_shards > 0;
    if odd && checks.len() < 10 {
        checks.push(format!(
            "minute {minute}: caught_up {}, trimmed {}, dead {}, failed items {}, failed invocations {}",
            report.caught_up,
            report.trimmed,
            report.dead_letters,
            report.failed_items,
            report.failed_shards,
        ));
    }
}

fn get_records(double: &StreamsDouble) -> u64 {
    double.stats().calls.get("GetRecords").copied().unwrap_or(0)
}
