//! Day sums: what the roll-up added to a counter item, per UTC day of the keys' first put
//! and counter name (`<prefix>d<yyyymmdd>_<name>`, N), and the mark of a repaired day
//! (`<prefix>r<yyyymmdd>`, N: when it was repaired). The repair ([`super::repair`]) replaces
//! a day's sums by the journal's and marks the day; the roll-up's updates then refuse that
//! day (`attribute_not_exists` of its mark) and drop its keys: the repair counted them.
//!
//! A day's attributes stay on the item until [`KEEP_DAYS`] days after it began (the roll-up
//! removes them with the item's next update after that); the repair takes days up to
//! [`REPAIR_DAYS`] days old, so a day it repairs still has its sums and its mark keeps the
//! roll-up away for as long as the stream (24 hours) can deliver a key of that day.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::AttributeValue;

use super::event::Event;
use crate::ddb::number::Number;
use crate::ddb::Item;

/// Milliseconds in a day.
pub(super) const DAY_MS: u64 = 86_400_000;
/// A day's sums and mark are removed once this many days have begun after it began.
pub const KEEP_DAYS: u64 = 5;
/// The repair takes a day only while at most this many days have begun after it began
/// (today − day ≤ 3), and only an hour after it ended (writers' clocks and puts in flight).
pub const REPAIR_DAYS: u64 = 3;

/// The UTC day (days since the epoch) of epoch milliseconds `ms`.
pub(super) fn day_of_ms(ms: u64) -> u64 {
    ms / DAY_MS
}

/// `yyyymmdd` of `day`.
pub(super) fn label(day: u64) -> String {
    let secs = i64::try_from(day.saturating_mul(86_400)).unwrap_or(i64::MAX);
    chrono::DateTime::from_timestamp(secs, 0)
        .map(|d| d.format("%Y%m%d").to_string())
        .unwrap_or_else(|| "99991231".to_string())
}

/// The day spelled `yyyy-mm-dd` (`None`: not a date).
pub(super) fn parse_date(text: &str) -> Option<u64> {
    let date = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
    let secs = date.and_hms_opt(0, 0, 0)?.and_utc().timestamp();
    u64::try_from(secs).ok().map(|s| s / 86_400)
}

/// `yyyy-mm-dd` of `day`.
pub(super) fn date(day: u64) -> String {
    let l = label(day);
    format!("{}-{}-{}", &l[..4], &l[4..6], &l[6..])
}

/// The attribute of `day`'s sum of counter `name`.
pub(super) fn sum_name(prefix: &str, day: u64, name: &str) -> String {
    format!("{prefix}d{}_{name}", label(day))
}

/// The attribute marking `day` repaired.
pub(super) fn mark_name(prefix: &str, day: u64) -> String {
    format!("{prefix}r{}", label(day))
}

/// A day attribute's day and, for a sum, its counter name.
fn parse(prefix: &str, attribute: &str) -> Option<(u64, Option<String>)> {
    let rest = attribute.strip_prefix(prefix)?;
    let (kind, rest) = rest.split_at_checked(1)?;
    let (digits, rest) = rest.split_at_checked(8)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let day = parse_date(&format!(
        "{}-{}-{}",
        &digits[..4],
        &digits[4..6],
        &digits[6..]
    ))?;
    match (kind, rest) {
        ("r", "") => Some((day, None)),
        ("d", name) => name.strip_prefix('_').map(|n| (day, Some(n.to_string()))),
        _ => None,
    }
}

/// `item`'s sums of `day`: counter name → sum (a value that is not a number: 0).
pub(super) fn sums_of(prefix: &str, item: &Item, day: u64) -> BTreeMap<String, Number> {
    item.iter()
        .filter_map(|(attribute, value)| match parse(prefix, attribute)? {
            (d, Some(name)) if d == day => {
                let sum = match value {
                    AttributeValue::N(n) => Number::parse(n).unwrap_or_else(|_| Number::from(0)),
                    _ => Number::from(0),
                };
                Some((name, sum))
            }
            _ => None,
        })
        .collect()
}

/// Whether `item` marks `day` repaired.
pub(super) fn repaired(prefix: &str, item: &Item, day: u64) -> bool {
    item.contains_key(&mark_name(prefix, day))
}

/// `item`'s day attributes of days that began [`KEEP_DAYS`] or more days before `today`.
pub(super) fn stale(prefix: &str, item: &Item, today: u64) -> Vec<String> {
    item.keys()
        .filter(|a| parse(prefix, a).is_some_and(|(day, _)| day + KEEP_DAYS <= today))
        .cloned()
        .collect()
}

/// The day of an event that adds (`None`: no first-put time, or nothing to add).
pub(super) fn event_day(event: &Event) -> Option<u64> {
    match event.add.is_empty() {
        true => None,
        false => event.at_ms.map(day_of_ms),
    }
}

/// Sums by (day, counter name).
pub(super) type DaySums = BTreeMap<(u64, String), Number>;

/// Per (day, counter name), the sum of `events`' deltas; the days.
pub(super) fn day_sums(events: &[Event]) -> Result<(DaySums, BTreeSet<u64>), String> {
    let mut by_day: BTreeMap<u64, Vec<&BTreeMap<String, Number>>> = BTreeMap::new();
    for event in events {
        if let Some(day) = event_day(event) {
            by_day.entry(day).or_default().push(&event.add);
        }
    }
    let mut sums = BTreeMap::new();
    for (day, adds) in &by_day {
        let totals = crate::counter::update::sum_deltas(adds.iter().copied())
            .map_err(|e| format!("the day sums of one roll-up write: {e}"))?;
        for (name, sum) in totals {
            sums.insert((*day, name.to_string()), sum);
        }
    }
    Ok((sums, by_day.into_keys().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_attributes_name_their_day_and_counter() {
        let day = parse_date("2026-11-27").expect("date");
        assert_eq!(date(day), "2026-11-27");
        assert_eq!(day_of_ms(day * DAY_MS + DAY_MS - 1), day);
        assert_eq!(sum_name("ctr_", day, "n_x"), "ctr_d20261127_n_x");
        assert_eq!(
            parse("ctr_", "ctr_d20261127_n_x"),
            Some((day, Some("n_x".into())))
        );
        assert_eq!(parse("ctr_", &mark_name("ctr_", day)), Some((day, None)));
        assert_eq!(parse("ctr_", "ctr_w_abcdefgh"), None);
        assert_eq!(parse("ctr_", "ctr_d2026112x_n"), None);
        assert!(parse_date("2026-13-01").is_none());
    }
}
