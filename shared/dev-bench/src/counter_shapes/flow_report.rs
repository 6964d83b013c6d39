//! What part 2 prints: per rate, the runs and their lag; then the highest sustained rates.

use crate::rollup_run::RunReport as RollupReport;

use super::Options;

/// Which traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Each event on a random one of many items, `journal_spread` 1.
    Cold(usize),
    /// Every event on one item, `journal_spread` 16.
    Hot,
}

/// The longest lag counted as sustained.
const MAX_LAG_MS: u64 = 120_000;

/// One roll-up run of part 2.
#[derive(Debug, Clone)]
pub struct RunStat {
    /// Clock (epoch ms) when it started.
    pub start_ms: u64,
    /// Wall seconds it took.
    pub secs: f64,
    pub report: RollupReport,
    pub get_records: u64,
    /// Keys applied by this run and the earlier ones.
    pub applied_total: u64,
    /// Events injected by the run's end and not applied yet.
    pub backlog: u64,
    /// At the run's end, the age of the newest event applied so far (events numbered in
    /// injection order; the `applied_total`-th one).
    pub newest_age_ms: Option<u64>,
}

/// One rate of one kind of traffic.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub kind: Kind,
    pub rate: usize,
    pub seconds: u64,
    pub interval: u64,
    pub injected: u64,
    pub runs: Vec<RunStat>,
    /// Clock (epoch ms) when the feed started.
    pub start: u64,
    /// (clock ms, injected so far).
    pub log: Vec<(u64, u64)>,
    /// The last event applied this long after the load stopped (`None`: not caught up).
    pub catch_up_ms: Option<u64>,
    /// `MaximumBatchingWindowInSeconds`.
    pub batching_window: i64,
}

impl Outcome {
    fn applied(&self) -> u64 {
        self.runs.last().map_or(0, |r| r.applied_total)
    }

    /// Events injected before the last run started (what it could apply at best).
    fn due(&self) -> u64 {
        let Some(last) = self.runs.last() else {
            return 0;
        };
        self.log
            .iter()
            .take_while(|(ms, _)| *ms <= last.start_ms)
            .last()
            .map_or(0, |(_, n)| *n)
    }

    /// Keys applied per second of clock up to the last run's start.
    fn applied_per_sec(&self) -> f64 {
        let span = self
            .runs
            .last()
            .map_or(0, |r| r.start_ms.saturating_sub(self.start));
        self.applied() as f64 * 1000.0 / span.max(1) as f64
    }

    fn max_lag(&self) -> u64 {
        let age = self.runs.iter().filter_map(|r| r.newest_age_ms).max();
        let iterator = self.runs.iter().map(|r| r.report.iterator_age_ms).max();
        age.unwrap_or(u64::MAX).max(iterator.unwrap_or(0))
    }

    fn backlog_grows(&self) -> bool {
        let backlogs: Vec<u64> = self.runs.iter().map(|r| r.backlog).collect();
        let Some(last) = backlogs.last() else {
            return true;
        };
        let typical = median(&backlogs);
        let per_interval = self.rate as u64 * self.interval;
        *last as f64 > 1.5 * typical as f64 && *last > per_interval
    }

    /// Applied ≥ 95 % of what was due, every lag ≤ 2 min, no growing backlog.
    pub fn sustained(&self) -> bool {
        let due = self.due().max(1) as f64;
        self.applied() as f64 / due >= 0.95 && self.max_lag() <= MAX_LAG_MS && !self.backlog_grows()
    }

    fn label(&self) -> String {
        match self.kind {
            Kind::Cold(items) => format!("(a) {items} cold items, spread 1"),
            Kind::Hot => "(b) one hot counter, spread 16".to_string(),
        }
    }
}

fn median(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

fn spread(v: &[u64]) -> String {
    let mut s = v.to_vec();
    s.sort_unstable();
    match (s.first(), s.last()) {
        (Some(min), Some(max)) => format!("{min} / {} / {max}", median(&s)),
        _ => "–".into(),
    }
}

pub fn header(o: &Options) {
    println!("## Part 2: throughput and lag");
    println!(
        "double: 30 shards, every answer delayed {} ms, a synthetic stream (no DynamoDB Local stream) fed by StreamsDouble::inject with the journal writer's own items (captured from its BatchWriteItem, never sent); counter items updated in DynamoDB Local",
        o.latency_ms
    );
    println!(
        "clock = real time; each rate fed for {} s; the roll-up as the handler of the emulated event source mapping (BatchSize 1000, MaximumBatchingWindowInSeconds {}, a 60 s tumbling window, one batch per shard at once), polled continuously (a poll: one step of the mapping, every shard read and one batch per ready shard invoked); after the load, polled until every event is applied",
        o.seconds,
        o.batching_window,
    );
    println!("rows: the polls that applied keys; newest-applied age: at a poll's end, the clock minus the injection time of the k-th injected event, k = keys applied so far (shards progress evenly: an estimate); sustained: applied ≥ 95 % of the events injected before the last run started, every lag ≤ 2 min, backlog not growing");
    println!();
}

pub fn outcome(o: &Outcome) {
    println!(
        "{} at {} events/s: injected {} in {} s ({:.0}/s), {} runs",
        o.label(),
        o.rate,
        o.injected,
        o.seconds,
        o.injected as f64 / o.seconds.max(1) as f64,
        o.runs.len()
    );
    println!("| run | wall s | records | keys applied | item updates | passes | caught_up | iterator_age_ms | newest-applied age ms | backlog at end | GetRecords | shards read | write units |");
    println!("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|");
    for (i, r) in o.runs.iter().enumerate() {
        let p = &r.report;
        println!(
            "| {} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} |",
            i + 1,
            r.secs,
            p.records,
            p.applied,
            p.item_updates,
            p.passes,
            p.caught_up,
            p.iterator_age_ms,
            r.newest_age_ms.map_or("–".into(), |a| a.to_string()),
            r.backlog,
            r.get_records,
            p.shards,
            p.write_units
        );
    }
    let ages: Vec<u64> = o.runs.iter().map(|r| r.report.iterator_age_ms).collect();
    let newest: Vec<u64> = o.runs.iter().filter_map(|r| r.newest_age_ms).collect();
    let secs: Vec<u64> = o.runs.iter().map(|r| (r.secs * 1000.0) as u64).collect();
    println!(
        "  applied {} of {} due ({:.1} %) = {:.0} keys/s; iterator_age_ms min/median/max {}; newest-applied age ms {}; run ms {}; backlog grows: {}; sustained: {}; caught up {} after the load stopped",
        o.applied(),
        o.due(),
        100.0 * o.applied() as f64 / o.due().max(1) as f64,
        o.applied_per_sec(),
        spread(&ages),
        spread(&newest),
        spread(&secs),
        if o.backlog_grows() { "yes" } else { "no" },
        if o.sustained() { "yes" } else { "NO" },
        catch_up(o)
    );
    println!();
}

/// The catch-up after the load, in ms and batching windows.
fn catch_up(o: &Outcome) -> String {
    match o.catch_up_ms {
        Some(ms) => format!(
            "{ms} ms ({:.2} batching windows)",
            ms as f64 / (o.batching_window.max(1) * 1000) as f64
        ),
        None => "NOT (gave up)".into(),
    }
}

pub fn summary(outcomes: &[Outcome]) {
    println!("| traffic | rate tried (events/s) | keys applied/s | max lag ms | sustained | caught up after the load |");
    println!("|---|---:|---:|---:|---|---|");
    for o in outcomes {
        println!(
            "| {} | {} | {:.0} | {} | {} | {} |",
            o.label(),
            o.rate,
            o.applied_per_sec(),
            o.max_lag(),
            if o.sustained() { "yes" } else { "no" },
            catch_up(o)
        );
    }
    for cold in [true, false] {
        let best = outcomes
            .iter()
            .filter(|o| matches!(o.kind, Kind::Cold(_)) == cold && o.sustained())
            .map(|o| o.rate)
            .max();
        let what = if cold {
            "(a) cold items"
        } else {
            "(b) hot counter"
        };
        match best {
            Some(rate) => {
                println!("highest sustained rate found, {what}: {rate} events/s (lag ≤ 2 min)")
            }
            None => println!("highest sustained rate found, {what}: none of the rates tried"),
        }
    }
    println!();
}
