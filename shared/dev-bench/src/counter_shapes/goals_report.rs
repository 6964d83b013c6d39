//! Part 3's results and tables (see [`super::goals`]).

use super::report::Rate;

/// The window with the hold (the 15 minutes).
const WINDOW_SECS: i64 = 900;

/// One goal configuration.
#[derive(Debug, Clone)]
pub struct Goal {
    pub rate: Rate,
    /// A 15-minute tumbling window holding the keys (else: 60 s, no hold).
    pub window: bool,
    /// Items of the lineage (the table's / 30).
    pub items: usize,
    /// Items tracked over the days.
    pub tracked: usize,
    pub days: f64,
    pub minutes: u64,
}

impl Goal {
    pub fn tumbling_secs(&self) -> i64 {
        if self.window {
            WINDOW_SECS
        } else {
            60
        }
    }

    /// The goal (billed write units per event).
    pub fn target(&self) -> f64 {
        match (self.rate, self.window) {
            (Rate::Second, _) => 1.05,
            (Rate::Minute, true) => 1.2,
            (Rate::SixPerHour, true) => 1.8,
            _ => 2.0,
        }
    }

    /// A key's period per item (ms).
    pub(super) fn period(&self) -> u64 {
        match self.rate {
            Rate::Second => 1000,
            Rate::Minute => 60_000,
            Rate::SixPerHour => 600_000,
        }
    }
}

/// The tracked items at the end of a day: the largest figures among them.
#[derive(Debug, Clone, Default)]
pub struct Day {
    pub day: u64,
    pub bytes: usize,
    pub watermarks: usize,
    pub day_sums: usize,
    /// Tracked items not reading their keys.
    pub wrong: usize,
}

/// Phase 1: the tracked items over the days.
#[derive(Debug, Clone, Default)]
pub struct Tracked {
    pub steps: u64,
    pub keys_per_step: i64,
    pub updates: usize,
    /// Successful writes on the counter table (updates and removals) and their units.
    pub counter_calls: u64,
    pub counter_units: f64,
    /// The roll-up's own units (failed conditions included).
    pub rollup_units: f64,
    pub days: Vec<Day>,
}

impl Tracked {
    /// The bound's removals (writes on the counter table that are not key updates).
    pub fn removals(&self) -> u64 {
        self.counter_calls.saturating_sub(self.updates as u64)
    }

    /// Units of those removals: the roll-up's units less one per update (items under 1 KB:
    /// checked by the bytes reported).
    pub fn removal_units(&self) -> f64 {
        (self.rollup_units - self.updates as f64).max(0.0)
    }
}

/// Phase 2: the measured segment.
#[derive(Debug, Clone, Default)]
pub struct Segment {
    pub events: usize,
    pub journal_units: f64,
    pub rollup_units: f64,
    pub updates: usize,
    pub removals: u64,
    pub invocations: u64,
    pub max_state_bytes: usize,
    pub wall_secs: f64,
    /// Items not reading their keys.
    pub wrong: usize,
}

/// One configuration's result.
#[derive(Debug, Clone)]
pub struct GoalRow {
    pub goal: Goal,
    pub tracked: Tracked,
    pub segment: Segment,
    pub wall_secs: f64,
}

impl GoalRow {
    /// Events of one item in the days at its rate.
    fn item_events(&self) -> f64 {
        let per_day = match self.goal.rate {
            Rate::Second => 86_400.0,
            Rate::Minute => 1_440.0,
            Rate::SixPerHour => 144.0,
        };
        per_day * self.goal.days
    }

    /// The bound's removal units per event: per tracked item over the days, over the item's
    /// events in the days.
    pub fn removal_share(&self) -> f64 {
        let per_item = self.tracked.removal_units() / self.goal.tracked.max(1) as f64;
        per_item / self.item_events()
    }

    pub fn journal(&self) -> f64 {
        self.segment.journal_units / self.segment.events.max(1) as f64
    }

    pub fn rollup(&self) -> f64 {
        self.segment.rollup_units / self.segment.events.max(1) as f64
    }

    pub fn total(&self) -> f64 {
        self.journal() + self.rollup() + self.removal_share()
    }
}

fn label(g: &Goal) -> (&'static str, &'static str) {
    let rate = match g.rate {
        Rate::Second => "1 key/s",
        Rate::Minute => "1 key/min",
        Rate::SixPerHour => "6 keys/h",
    };
    (
        rate,
        if g.window {
            "15 min, hold"
        } else {
            "none (60 s)"
        },
    )
}

pub fn header(goals: &[Goal]) {
    println!(
        "## Part 3: issue 39's cost goals (one shard lineage of 30, production per-shard rate)"
    );
    println!(
        "mapping emulator over the Streams double: 1 shard lineage rolling over every 4 h of clock, BatchSize 1000, MaximumBatchingWindowInSeconds 60, FilterCriteria INSERT, ReportBatchItemFailures; the roll-up as the Lambda handler (apply_window); journal INSERTs captured from the writer and billed ceil(size/1 KB)"
    );
    for g in goals {
        let (rate, window) = label(g);
        println!(
            "  goal config: {rate}, window {window}: {} items in the lineage (x30 = {} in the table), {} tracked over {} days (one key per 2 h each), segment {} min at day {}",
            g.items,
            g.items * 30,
            g.tracked,
            g.days,
            g.minutes,
            g.days
        );
    }
    println!();
}

pub fn progress(r: &GoalRow) {
    let (rate, window) = label(&r.goal);
    println!(
        "  done: {rate}, window {window}: {} events in the segment ({:.1} s), {} invocations, {} wrong items; tracked: {} steps of +{} each, {} removals ({:.0} units on the counter table with the updates), {} wrong at the end; {:.1} s in all",
        r.segment.events,
        r.segment.wall_secs,
        r.segment.invocations,
        r.segment.wrong,
        r.tracked.steps,
        r.tracked.keys_per_step,
        r.tracked.removals(),
        r.tracked.counter_units,
        r.tracked.days.last().map_or(0, |d| d.wrong),
        r.wall_secs
    );
}

pub fn table(rows: &[GoalRow]) {
    println!();
    println!("| per item | window | items (lineage, table) | events measured | journal | roll-up updates | bound's removals (30 d) | **total** | goal | met | updates/event | largest window state (bytes, of 1 MB) | largest item at day {} (bytes, watermarks, day sums) |", rows.first().map_or(0.0, |r| r.goal.days));
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|");
    let mut figures = crate::figures::Figures::new("counter-goals");
    for r in rows {
        let (rate, window) = label(&r.goal);
        let last = r.tracked.days.last().cloned().unwrap_or_default();
        let met = if r.total() <= r.goal.target() {
            "yes"
        } else {
            "no"
        };
        println!(
            "| {rate} | {window} | {}, {} | {} | {:.3} | {:.3} | {:.4} | **{:.3}** | {:.2} | {met} | {:.3} | {} | {}, {}, {} |",
            r.goal.items,
            r.goal.items * 30,
            r.segment.events,
            r.journal(),
            r.rollup(),
            r.removal_share(),
            r.total(),
            r.goal.target(),
            r.segment.updates as f64 / r.segment.events.max(1) as f64,
            r.segment.max_state_bytes,
            last.bytes,
            last.watermarks,
            last.day_sums
        );
        figures.push(serde_json::json!({
            "rate": rate, "window": window, "items": r.goal.items * 30,
            "events": r.segment.events, "journal": r.journal(), "rollup": r.rollup(),
            "removals": r.removal_share(), "wcu_per_event": r.total(), "goal": r.goal.target(),
            "max_state_bytes": r.segment.max_state_bytes, "item_bytes_day30": last.bytes,
        }));
    }
    figures.write();
    println!();
    println!("| per item | window | day | largest tracked item (bytes) | watermarks | day sums | items wrong | removals in the days (units) |");
    println!("|---|---|---:|---:|---:|---:|---:|---|");
    for r in rows {
        let (rate, window) = label(&r.goal);
        for d in &r.tracked.days {
            println!(
                "| {rate} | {window} | {} | {} | {} | {} | {} | {} ({:.0}) |",
                d.day,
                d.bytes,
                d.watermarks,
                d.day_sums,
                d.wrong,
                r.tracked.removals(),
                r.tracked.removal_units()
            );
        }
    }
    println!();
}
