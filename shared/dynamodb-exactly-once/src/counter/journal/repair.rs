//! The exact repair of days the roll-up could not read (an outage longer than the stream
//! keeps records, a shard that left the stream unfinished): `ops counter repair --from D
//! --to D`. Whole UTC days of the keys' first put, recounted from the journal table.
//!
//! # Why it is exact
//!
//! A key's journal item holds its first put's time `at` for its whole life (a put again
//! changes nothing), so every key belongs to one UTC day `D` for good. For each counter item,
//! counter name and day, the roll-up adds each key it applies both to the counter and to the
//! day's sum `d_D` ([`super::days`]), in one conditional update, each key once (the
//! watermarks). So at any time `d_D` is the sum of the keys of `D` the roll-up applied, and
//! the counter holds `d_D` for them. The journal holds *every* key of `D` (`J_D`): all were
//! put before the repair (it takes a day only an hour after it ended) and none has expired
//! (it takes days at most [`super::days::REPAIR_DAYS`] old; the journal keeps a key 14
//! days). The repair reads `J_D`'s sum `t_D`, reads the item's `d_D` and, on the condition
//! that `d_D` is still what it read, adds `t_D − d_D` to the counter, sets `d_D := t_D` and
//! marks `D` repaired. After it, the counter holds `t_D` for the keys of `D`: each exactly
//! once. A roll-up update that would add a key of `D` carries `attribute_not_exists` of the
//! mark, so after the repair it is refused and drops the keys of `D` (moving its watermarks
//! past them); before it, it changes `d_D`, so the repair's condition fails and it reads
//! again. Run twice, the repair finds `d_D = t_D` and the mark: it writes nothing.
//!
//! Keys the roll-up kept as dead letters are not in `t_D` (they are in the journal table
//! under `~dead`); a key the repair finds adding to a counter the item holds as another type
//! is kept as a dead letter by the repair (sort key `repair#<journal key>`) and not counted;
//! so is a key that arrived at its source before its item forgot inline keys
//! (`<prefix>forgot`, an item migrated from the inline mode: a `too_old` letter, as the
//! roll-up keeps it, see [`super::migrate`]): the journal's sum `t_D` leaves out every key the
//! roll-up would have refused.
//!
//! The days come from the operator (`--from`, `--to`) or from the messages Lambda sent to the
//! mapping's on-failure destination about the batches it gave up on
//! ([`super::StreamFailure`], [`RepairDays::of_failures`]: the days of their records'
//! arrivals, an hour either side).
//!
//! # Cost
//!
//! A consistent parallel `Scan` of the whole journal table (read units for its size: the
//! journal keeps 14 days of keys), then per counter item and day with keys: one consistent
//! `GetItem` and, unless already repaired and exact, one `UpdateItem` (again on a race).
//!
//! # Failure modes
//!
//! * A day that ended less than an hour ago, or began more than
//!   [`super::days::REPAIR_DAYS`] days before today (its sums may be gone): refused.
//! * A counter item whose update DynamoDB refuses (an item over 400 KB), or a day whose sum
//!   of one counter needs more than 38 digits (keys each valid, as `1e20` and `1e-20`): listed
//!   in the report (`refused_items`), not repaired, and the rest is; run again once fixed
//!   (the roll-up keeps such a key as a dead letter).
//! * A key the roll-up keeps as a dead letter *while* the repair runs (after its read of the
//!   dead letters) for another reason than a counter of another type (which the repair
//!   dead-letters too) is counted by the repair and also listed as a letter: check the
//!   letters of the repaired days before adding any by hand.
//! * Stopped at any point: run it again (each item-day is repaired on its own and a repaired
//!   one is left as it is).
//! * A key journaled under another `journal_spread` is another journal item: counted again,
//!   as by the roll-up.
//! * A key the roll-up took for a duplicate because an item of the inline layout held it in
//!   its key buckets (a migration from inline: keys applied inline and delivered again to the
//!   journal writer within the inline window) is counted by the repair: do not repair the
//!   day of a migration from inline if the gap covers its first hour.
//! * A key put by a writer of a version that overwrote journal items (before the first put
//!   won) may have moved to another day: repair only days after every writer was upgraded.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::Client;
use futures::StreamExt;

use super::days::{self, DAY_MS, REPAIR_DAYS};
use super::RollupConfig;
use crate::config::ConfigError;
use crate::ddb::number::Number;
use crate::ddb::{Clock, Cost, ItemKey, StoreError};

/// A repaired day must have ended this long ago: a writer's clock behind and its puts in
/// flight.
const ENDED_SLACK_MS: u64 = 3_600_000;
/// Scan segments read at once.
pub(super) const DEFAULT_SEGMENTS: i32 = 4;
/// Counter items repaired at once.
const DEFAULT_CONCURRENCY: usize = 16;

/// Whether a recount's error concerns its item only (DynamoDB refused the update, or the
/// sums need more than 38 digits): listed, and the rest goes on.
pub(super) fn refused(e: &StoreError) -> bool {
    e.class() == crate::ddb::ErrorClass::InvalidRequest || matches!(e, StoreError::Inconsistent(_))
}

/// The UTC days to repair, first to last (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairDays {
    pub(super) first: u64,
    pub(super) last: u64,
}

impl RepairDays {
    /// The days `from` to `to`, each `YYYY-MM-DD` (UTC).
    pub fn parse(from: &str, to: &str) -> Result<RepairDays, ConfigError> {
        let day = |setting: &str, text: &str| {
            days::parse_date(text).ok_or_else(|| {
                ConfigError::new(setting, format!("{text:?} is not a YYYY-MM-DD date"))
            })
        };
        let (first, last) = (day("from", from)?, day("to", to)?);
        if last < first {
            return Err(ConfigError::new("to", "the last day is before the first"));
        }
        Ok(RepairDays { first, last })
    }

    /// The UTC day (`YYYY-MM-DD`) of epoch seconds `secs` (a gap's bounds are in those).
    pub fn utc_day(secs: u64) -> String {
        days::date(secs / 86_400)
    }
}

/// What [`Repair::run`] did.
#[must_use = "a refused repair did nothing: handle it"]
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum RepairOutcome {
    /// The days were recounted.
    Repaired(RepairReport),
    /// Nothing was done: a day cannot be repaired (the reason says which and why).
    Refused(String),
}

/// What a repair found and did.
#[must_use = "the report holds what was repaired"]
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RepairReport {
    /// The days repaired (`YYYY-MM-DD`).
    pub days: Vec<String>,
    /// Journal items read by the scan.
    pub scanned: u64,
    /// Keys of those days found in the journal (dead letters excepted).
    pub keys: usize,
    /// Counter items × days with keys.
    pub item_days: usize,
    /// Item-days whose counters were corrected (the roll-up had missed or not yet read keys).
    pub corrected: usize,
    /// Item-days already exact and marked repaired (nothing written).
    pub unchanged: usize,
    /// Keys not counted and kept as dead letters (a counter of another type on the item).
    pub dead_letters: usize,
    /// Counter items whose update DynamoDB refused (not repaired), with the error.
    pub refused_items: Vec<String>,
    /// Write units as AWS bills them.
    pub write_units: f64,
}

/// Where a repair is, for a progress display.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairProgress {
    /// Journal items scanned so far, of about `of` (DynamoDB's estimate, if known).
    Scanned {
        /// Items scanned.
        items: u64,
        /// DynamoDB's estimate of the table's items (updated about every 6 hours).
        of: Option<u64>,
    },
    /// Item-days done so far, of `of`.
    Recounted {
        /// Item-days done.
        done: usize,
        /// Item-days to do.
        of: usize,
    },
}

/// The journaled keys of one counter item and day (dead letters excepted), summed by the set
/// of counter names they add to (a group refused as a whole when the item holds one of its
/// counters as another type).
#[derive(Debug, Clone)]
pub(super) struct ItemDay {
    pub(super) item: ItemKey,
    pub(super) day: u64,
    pub(super) keys: usize,
    /// The earliest arrival at its source (epoch seconds) of its keys that carry one.
    pub(super) arrived: Option<u64>,
    /// Why its sums cannot be kept (past 38 digits): listed, not repaired.
    pub(super) overflow: Option<String>,
    pub(super) groups: BTreeMap<Vec<String>, (usize, BTreeMap<String, Number>)>,
}

/// The repair of one journal (see the module documentation).
#[derive(Debug, Clone)]
pub struct Repair {
    pub(super) ddb: Client,
    pub(super) config: RollupConfig,
    pub(super) clock: Clock,
    pub(super) segments: i32,
}

impl Repair {
    /// The repair of the journal and counter items of `config`.
    pub fn new(ddb: Client, config: RollupConfig) -> Self {
        Repair {
            ddb,
            config,
            clock: Clock::system(),
            segments: DEFAULT_SEGMENTS,
        }
    }

    /// The same repair with another clock (which days have ended; tests move time with it).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Recount `days` from the journal, reporting progress to `progress`.
    pub async fn run(
        &self,
        days: RepairDays,
        progress: &(dyn Fn(RepairProgress) + Send + Sync),
    ) -> Result<RepairOutcome, StoreError> {
        if let Some(reason) = self.refusal(days) {
            return Ok(RepairOutcome::Refused(reason));
        }
        let mut report = RepairReport {
            days: (days.first..=days.last).map(days::date).collect(),
            ..RepairReport::default()
        };
        let dead = self.dead_letters().await?;
        let (mut work, scanned) = self.scan(days, &dead, progress).await?;
        report.scanned = scanned;
        work.retain(|w| match &w.overflow {
            Some(reason) => {
                let (item, day) = (w.item.canonical(), days::date(w.day));
                report.refused_items.push(format!("{item} ({day}): {reason}"));
                false
            }
            None => true,
        });
        report.keys = work.iter().map(|w| w.keys).sum();
        report.item_days = work.len();
        let cost = Cost::default();
        let of = work.len();
        let mut results = futures::stream::iter(work)
            .map(|work| {
                let (cost, dead) = (&cost, &dead);
                async move {
                    let item = work.item.canonical().to_string();
                    (item, self.recount(work, dead, cost).await)
                }
            })
            .buffer_unordered(DEFAULT_CONCURRENCY);
        let mut done = 0;
        while let Some((item, result)) = results.next().await {
            done += 1;
            progress(RepairProgress::Recounted { done, of });
            match result {
                Ok(r) => {
                    report.corrected += usize::from(r.corrected);
                    report.unchanged += usize::from(!r.corrected);
                    report.dead_letters += r.dead_letters;
                }
                Err(e) if refused(&e) => {
                    report.refused_items.push(format!("{item}: {e}"));
                }
                Err(e) => return Err(e),
            }
        }
        drop(results);
        report.write_units = cost.billed_write_units();
        Ok(RepairOutcome::Repaired(report))
    }

    /// Why `days` cannot be repaired now, if so.
    pub(super) fn refusal(&self, days: RepairDays) -> Option<String> {
        let now = self.clock.now_ms();
        let today = days::day_of_ms(now);
        if (days.last + 1) * DAY_MS + ENDED_SLACK_MS > now {
            return Some(format!(
                "{} has not ended an hour ago (UTC): keys of it may still be journaled",
                days::date(days.last)
            ));
        }
        if days.first + REPAIR_DAYS < today {
            return Some(format!(
                "{} began more than {REPAIR_DAYS} days ago: its day sums may be gone from the counter items",
                days::date(days.first)
            ));
        }
        None
    }
}
