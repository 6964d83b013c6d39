//! Part 1's configurations, totals and table, and the header of `bench counter-shapes`.

use crate::rollup_run::RunReport as RollupReport;

use super::Options;

/// A per-item rate of new keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// 1 key/s: 60 keys per item each minute.
    Second,
    /// 1 key/min.
    Minute,
    /// 6 keys/h: one key per item each 10th minute (all items in the same minute).
    SixPerHour,
}

impl Rate {
    /// Keys per item in `minute` of the measured window.
    pub fn keys_in_minute(self, minute: u64) -> usize {
        match self {
            Rate::Second => 60,
            Rate::Minute => 1,
            Rate::SixPerHour => usize::from(minute.is_multiple_of(10)),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Rate::Second => "1 key/s",
            Rate::Minute => "1 key/min",
            Rate::SixPerHour => "6 keys/h",
        }
    }
}

/// One configuration of part 1.
#[derive(Debug, Clone)]
pub struct Config {
    pub shards: usize,
    pub rate: Rate,
    pub spread: u32,
    pub items: usize,
    /// Measured minutes (the end of the span).
    pub window_min: u64,
    pub span_min: u64,
    /// The roll-up's hold (`RollupConfig::hold`, seconds; 0: none).
    pub hold_secs: u64,
}

/// What the measured window's runs added up to.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    pub events: usize,
    pub runs: u64,
    /// Minutes of the window without a key (their runs not made).
    pub skipped: u64,
    pub journal_wcu: f64,
    /// The meter's units on the counter table (successful updates).
    pub update_wcu: f64,
    /// The meter's units on the journal table (checkpoints, dead letters).
    pub checkpoint_wcu: f64,
    /// The roll-up's own `write_units` (failed conditions included).
    pub rollup_wcu: f64,
    pub item_updates: usize,
    pub applied: usize,
    pub get_records: u64,
    pub max_shards_listed: usize,
    pub max_iterator_age_ms: u64,
    /// The oldest key held in memory at the end of a run (the hold's lag), and the most held.
    pub max_held_age_ms: u64,
    pub max_held: usize,
    /// Wall seconds journaling and rolling up in the window.
    pub journal_secs: f64,
    pub rollup_secs: f64,
}

impl Totals {
    pub fn add_run(&mut self, report: &RollupReport, gets: u64, events: usize) {
        self.events += events;
        self.runs += 1;
        self.rollup_wcu += report.write_units;
        self.item_updates += report.item_updates;
        self.applied += report.applied;
        self.get_records += gets;
        self.max_shards_listed = self.max_shards_listed.max(report.shards_listed);
    }
}

/// One configuration's result.
#[derive(Debug, Clone)]
pub struct Row {
    pub config: Config,
    pub totals: Totals,
    /// Mean (write units, `GetRecords`) of a run without new keys.
    pub idle: (f64, f64),
    /// Per item: (watermarks, size in bytes) at the end.
    pub items: Vec<(usize, usize)>,
    pub shards_listed: usize,
    pub wall_secs: f64,
    pub checks: Vec<String>,
}

pub fn header(o: &Options) {
    println!(
        "counter journal at stream shapes (Streams double over DynamoDB Local at {})",
        dev_testing::endpoint()
    );
    println!(
        "{}  release build: {}",
        crate::common::provenance(),
        if cfg!(debug_assertions) { "NO" } else { "yes" }
    );
    println!("options: {o:?}");
    println!();
}

pub fn steady_header(o: &Options, configs: &[Config]) {
    println!("## Part 1: cost in the steady state");
    println!(
        "simulated clock from the real time now; double: N shards, rollover every 4 h of clock, {}; writer and roll-up write to DynamoDB Local (billed from its ConsumedCapacity); roll-up (default RollupConfig) at the end of each minute that had keys, budget 50 s",
        if o.upstream { "fed by DynamoDB Local's stream (sync_stream after each write)" } else { "fed by mirroring every successful put into the journal table (writer's keys, roll-up's checkpoints) into a synthetic stream as it lands" }
    );
    println!(
        "span: {} days + 30 min (each window ends 30 min after a rollover); warm-up (the span before the measured window): 1 key per item and one roll-up every {} simulated min; measured: the window at the rate (keys written at :30 of each minute, one apply() for all items, the roll-up at the minute's end); 6 keys/h: every item at each 10th minute",
        o.days,
        o.warmup_step_min
    );
    println!(
        "skipped: minutes without a key (no run made); an idle run (no new key) is measured {} times at the end of each configuration and its cost shown apart",
        o.idle_runs
    );
    for c in configs {
        println!(
            "  config: {} shards, {}, spread {}, {} items, measured {:.1} h of {:.1} h, hold {} s",
            c.shards,
            c.rate.label(),
            c.spread,
            c.items,
            c.window_min as f64 / 60.0,
            c.span_min as f64 / 60.0,
            c.hold_secs
        );
    }
    println!();
}

pub fn steady_row_progress(r: &Row) {
    println!(
        "  done: {} shards, {}, spread {}: {} events, {} runs, {:.1} s of wall time",
        r.config.shards,
        r.config.rate.label(),
        r.config.spread,
        r.totals.events,
        r.totals.runs,
        r.wall_secs
    );
    for c in &r.checks {
        println!("    check: {c}");
    }
}

fn per(x: f64, n: usize) -> f64 {
    x / n.max(1) as f64
}

pub fn steady_table(rows: &[Row]) {
    println!();
    println!("| shards | rate/item | spread | items | events | runs (skipped min) | journal WCU/event | roll-up update WCU/event | roll-up checkpoint WCU/event | roll-up WCU/event (report) | **total WCU/event** | idle run WCU | total incl. skipped runs as idle | watermarks/item end (mean, max) | item bytes end (max) | GetRecords/run | idle GetRecords/run | shards listed |");
    println!(
        "|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"
    );
    let mut figures = crate::figures::Figures::new("counter-shapes");
    for r in rows {
        let t = &r.totals;
        let journal = per(t.journal_wcu, t.events);
        let total = journal + per(t.rollup_wcu, t.events);
        figures.push(serde_json::json!({
            "shards": r.config.shards,
            "rate": r.config.rate.label(),
            "spread": r.config.spread,
            "items": r.config.items,
            "events": t.events,
            "wcu_per_event": total,
        }));
        let with_idle = total + per(t.skipped as f64 * r.idle.0, t.events);
        let marks: Vec<usize> = r.items.iter().map(|(m, _)| *m).collect();
        let mean = per(marks.iter().sum::<usize>() as f64, marks.len());
        let max_marks = marks.iter().copied().max().unwrap_or(0);
        let bytes = r.items.iter().map(|(_, b)| *b).max().unwrap_or(0);
        println!(
            "| {} | {} | {} | {} | {} | {} ({}) | {:.3} | {:.3} | {:.3} | {:.3} | **{:.3}** | {:.2} | {:.3} | {:.1}, {} | {} | {:.1} | {:.1} | {} |",
            r.config.shards,
            r.config.rate.label(),
            r.config.spread,
            r.config.items,
            t.events,
            t.runs,
            t.skipped,
            journal,
            per(t.update_wcu, t.events),
            per(t.checkpoint_wcu, t.events),
            per(t.rollup_wcu, t.events),
            total,
            r.idle.0,
            with_idle,
            mean,
            max_marks,
            bytes,
            per(t.get_records as f64, t.runs as usize),
            r.idle.1,
            r.shards_listed
        );
    }
    figures.write();
    println!();
    runs_table(rows);
}

/// The runs' side figures: updates, their units, wall time.
fn runs_table(rows: &[Row]) {
    println!("| shards | rate/item | spread | item updates/run | WCU per item update | keys applied | max iterator_age_ms | hold s, max held keys, max held age ms | max shards listed in a run | wall ms/run: journal, roll-up | wall s |");
    println!("|---:|---|---:|---:|---:|---:|---:|---|---:|---|---:|");
    for r in rows {
        let t = &r.totals;
        println!(
            "| {} | {} | {} | {:.2} | {:.3} | {} | {} | {}, {}, {} | {} | {:.0}, {:.0} | {:.1} |",
            r.config.shards,
            r.config.rate.label(),
            r.config.spread,
            per(t.item_updates as f64, t.runs as usize),
            per(t.update_wcu, t.item_updates),
            t.applied,
            t.max_iterator_age_ms,
            r.config.hold_secs,
            t.max_held,
            t.max_held_age_ms,
            t.max_shards_listed,
            per(t.journal_secs * 1000.0, t.runs as usize),
            per(t.rollup_secs * 1000.0, t.runs as usize),
            r.wall_secs
        );
    }
    println!();
}
