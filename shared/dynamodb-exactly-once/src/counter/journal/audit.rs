//! The exactness audit (`ops counter audit [--repair]`): for days the journal and the day sums
//! still hold, the journal's sum of each counter item's keys of a day against what the roll-up
//! added for that day (`<prefix>d<yyyymmdd>_<name>`, [`super::days`]), every difference
//! reported and, asked to, repaired by the exact day repair ([`super::repair`]).
//!
//! A difference on a day whose records the stream can no longer deliver (the days of
//! [`RepairDays::auditable`]: ended more than 25 hours ago) is a loss (the counter is short:
//! a batch the mapping gave up on, records trimmed unread, a stream switched off) or a count
//! the journal does not explain (over: a key counted twice, or a journal item deleted by
//! hand). On a more recent day, a short counter may only be the roll-up's lag. Keys the repair
//! would keep as dead letters (a counter of another type on the item, the migration guard's
//! `too_old`) show as short until a repair letters them.
//!
//! # Cost and bounds
//!
//! The journal's consistent parallel scan (read units for the table's size), then per counter
//! item and day with keys one consistent `GetItem`; with `--repair`, the repair's writes for
//! the item-days that differ only. One call stops at its [`AuditLimits`] (journal items
//! scanned, time): an audit cut short compares nothing (an item-day's keys may lie in the
//! part not read) and says so (`complete: false`): run it with larger limits, or on fewer
//! days. An item-day with day sums on the counter item but no key left in the journal is not
//! seen.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::days::{self, REPAIR_DAYS};
use super::repair::{ItemDay, Repair, RepairDays, RepairProgress, RepairReport};
use super::scan::ScanBudget;
use crate::config::ConfigError;
use crate::ddb::number::Number;
use crate::ddb::{Cost, Read, StoreError};

/// Counter item-days compared (or repaired) at once.
const CONCURRENCY: usize = 16;
/// Differences listed in a report (all are counted).
const MAX_LISTED: usize = 100;
/// How long after a day ended its records may still be delivered (the stream's 24 hours
/// and an hour of writers' clocks).
const DELIVERABLE_MS: u64 = 25 * 3_600_000;

/// How much one audit may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditLimits {
    max_items: u64,
    time: Duration,
}

impl AuditLimits {
    /// At most `max_items` journal items scanned, for at most `time`; both above zero.
    pub fn new(max_items: u64, time: Duration) -> Result<AuditLimits, ConfigError> {
        if max_items == 0 {
            return Err(ConfigError::new("max_items", "must be at least 1"));
        }
        if time.is_zero() {
            return Err(ConfigError::new("time", "must be above zero"));
        }
        Ok(AuditLimits { max_items, time })
    }
}

impl Default for AuditLimits {
    /// 100 million journal items, 1 hour.
    fn default() -> Self {
        AuditLimits {
            max_items: 100_000_000,
            time: Duration::from_secs(3600),
        }
    }
}

/// One counter of one item and day whose sums differ.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditDifference {
    /// The counter item (canonical key).
    pub item: String,
    /// The day, `YYYY-MM-DD` (UTC, of the keys' first put).
    pub day: String,
    /// The counter's name.
    pub counter: String,
    /// The sum of the day's keys in the journal (dead letters excepted).
    pub journal: String,
    /// What the roll-up (or a repair) added for the day.
    pub counted: String,
}

/// What an audit found (and repaired).
#[must_use = "the report holds the differences found"]
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct AuditReport {
    /// The days audited (`YYYY-MM-DD`).
    pub days: Vec<String>,
    /// Whether the whole journal was read within the limits (if not, nothing was compared).
    pub complete: bool,
    /// Journal items read.
    pub scanned: u64,
    /// Counter items × days with keys.
    pub item_days: usize,
    /// Item-days whose every counter matched the journal.
    pub exact: usize,
    /// Counters × item-days short of the journal (keys not counted).
    pub short: usize,
    /// Counters × item-days above the journal (counted without a journal key).
    pub over: usize,
    /// The first differences (at most 100).
    pub differences: Vec<AuditDifference>,
    /// With repair: what the repair of the item-days that differed did.
    pub repaired: Option<RepairReport>,
}

/// What [`Repair::audit`] did.
#[must_use = "a refused audit did nothing: handle it"]
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum AuditOutcome {
    /// The days were audited (see [`AuditReport::complete`]).
    Audited(AuditReport),
    /// Nothing was done: a day cannot be audited (the reason says which and why).
    Refused(String),
}

/// Whether `d` is a count above the journal's.
fn is_over(d: &AuditDifference) -> bool {
    Number::parse(&d.counted)
        .ok()
        .zip(Number::parse(&d.journal).ok())
        .and_then(|(c, j)| c.checked_add(&j.negated()).ok())
        .is_some_and(|x| !x.is_zero() && !x.canonical().starts_with('-'))
}

/// The difference reported for an item-day whose journal sum needs more than 38 digits.
fn overflowing(work: &ItemDay, reason: &str) -> AuditDifference {
    AuditDifference {
        item: work.item.canonical().to_string(),
        day: days::date(work.day),
        counter: "*".into(),
        journal: format!("not representable: {reason}"),
        counted: String::new(),
    }
}

impl RepairDays {
    /// The days an audit at `now_ms` finds losses on: ended more than 25 hours ago (no record
    /// of them left in the stream) and begun at most [`REPAIR_DAYS`] days ago. `None`: none
    /// yet (between midnight and 01:00 UTC the first is still deliverable).
    pub fn auditable(now_ms: u64) -> Option<RepairDays> {
        let first = days::day_of_ms(now_ms).checked_sub(REPAIR_DAYS)?;
        let last = days::day_of_ms(now_ms.checked_sub(DELIVERABLE_MS)?).checked_sub(1)?;
        (first <= last).then_some(RepairDays { first, last })
    }
}

impl Repair {
    /// Audit `days` within `limits`; with `repair`, repair every item-day that differs.
    pub async fn audit(
        &self,
        days: RepairDays,
        limits: AuditLimits,
        repair: bool,
        progress: &(dyn Fn(RepairProgress) + Send + Sync),
    ) -> Result<AuditOutcome, StoreError> {
        if let Some(reason) = self.refusal(days) {
            return Ok(AuditOutcome::Refused(reason));
        }
        let budget = ScanBudget {
            max_items: limits.max_items,
            until: Instant::now() + limits.time,
        };
        let dead = self.dead_letters().await?;
        let (work, scanned, complete) = self
            .scan_within(days, &dead, progress, Some(&budget))
            .await?;
        let mut report = AuditReport {
            days: (days.first..=days.last).map(days::date).collect(),
            complete,
            scanned,
            item_days: work.len(),
            ..AuditReport::default()
        };
        if !complete {
            return Ok(AuditOutcome::Audited(report));
        }
        let mut differing = Vec::new();
        let mut compared = futures::stream::iter(work)
            .map(|w| async move {
                let found = self.compare(&w).await;
                (w, found)
            })
            .buffer_unordered(CONCURRENCY);
        while let Some((w, found)) = compared.next().await {
            let found = match (&w.overflow, found) {
                (Some(reason), _) => vec![overflowing(&w, reason)],
                (None, Err(e)) if super::repair::refused(&e) => vec![overflowing(&w, &e.to_string())],
                (None, found) => found?,
            };
            if found.is_empty() {
                report.exact += 1;
                continue;
            }
            for d in found {
                let over = is_over(&d);
                report.over += usize::from(over);
                report.short += usize::from(!over);
                if report.differences.len() < MAX_LISTED {
                    report.differences.push(d);
                }
            }
            differing.push(w);
        }
        drop(compared);
        if repair {
            report.repaired = Some(self.repair_all(days, differing, &dead).await?);
        }
        Ok(AuditOutcome::Audited(report))
    }

    /// The counters of `work`'s item and day whose journal sum differs from its day sum (its
    /// item-days with sums past 38 digits were taken out by the caller).
    async fn compare(&self, work: &ItemDay) -> Result<Vec<AuditDifference>, StoreError> {
        let table = &self.config.counter.table;
        let item = crate::ddb::read::get_item(&self.ddb, table, &work.item, Read::Consistent)
            .await?
            .unwrap_or_default();
        let counted = days::sums_of(&self.config.counter.attribute_prefix, &item, work.day);
        let mut truth = BTreeMap::new();
        for (_, sums) in work.groups.values() {
            super::scan::add_to(&mut truth, sums.clone())?;
        }
        let names: BTreeSet<&String> = truth.keys().chain(counted.keys()).collect();
        let value = |m: &BTreeMap<String, Number>, n: &str| {
            m.get(n).map_or_else(|| "0".to_string(), Number::canonical)
        };
        Ok(names
            .into_iter()
            .filter(|n| value(&truth, n) != value(&counted, n))
            .map(|n| AuditDifference {
                item: work.item.canonical().to_string(),
                day: days::date(work.day),
                counter: n.clone(),
                journal: value(&truth, n),
                counted: value(&counted, n),
            })
            .collect())
    }

    /// Repair the item-days of `work` (as [`Repair::run`] does for whole days).
    async fn repair_all(
        &self,
        days: RepairDays,
        work: Vec<ItemDay>,
        dead: &super::scan::Dead,
    ) -> Result<RepairReport, StoreError> {
        let cost = Cost::default();
        let mut report = RepairReport {
            days: (days.first..=days.last).map(days::date).collect(),
            item_days: work.len(),
            keys: work.iter().map(|w| w.keys).sum(),
            ..RepairReport::default()
        };
        let mut results = futures::stream::iter(work)
            .map(|w| {
                let cost = &cost;
                async move {
                    let item = w.item.canonical().to_string();
                    (item, self.recount(w, dead, cost).await)
                }
            })
            .buffer_unordered(CONCURRENCY);
        while let Some((item, result)) = results.next().await {
            match result {
                Ok(r) => {
                    report.corrected += usize::from(r.corrected);
                    report.unchanged += usize::from(!r.corrected);
                    report.dead_letters += r.dead_letters;
                }
                Err(e) if super::repair::refused(&e) => {
                    report.refused_items.push(format!("{item}: {e}"));
                }
                Err(e) => return Err(e),
            }
        }
        drop(results);
        report.write_units = cost.billed_write_units();
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::journal::days::DAY_MS;

    #[test]
    fn the_auditable_days_are_those_the_stream_can_no_longer_deliver() {
        let day = days::parse_date("2026-11-28").expect("date");
        let at = |hour: u64| day * DAY_MS + hour * 3_600_000;
        let span = |d: Option<RepairDays>| d.map(|d| (d.first(), d.last()));
        // At 00:30 the 26th ended 24.5 h ago: still deliverable; the 25th is the first.
        assert_eq!(
            span(RepairDays::auditable(at(0) + 1_800_000)),
            Some(("2026-11-25".into(), "2026-11-25".into()))
        );
        assert_eq!(
            span(RepairDays::auditable(at(2))),
            Some(("2026-11-25".into(), "2026-11-26".into()))
        );
        assert!(AuditLimits::new(0, Duration::from_secs(1)).is_err());
        assert!(AuditLimits::new(1, Duration::ZERO).is_err());
    }
}
