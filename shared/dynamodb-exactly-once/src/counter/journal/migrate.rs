//! Items migrated from the inline mode: the inline age guard kept exactly, from what the
//! items carry, with no operator step.
//!
//! An inline writer refuses (`too_old`) a record that arrived before its item *forgot* keys:
//! `<prefix>forgot`, the span end of the newest key bucket removed (see `counter::forget`).
//! The journal's writers accept records up to the journal's window (14 days), so once the
//! inline buckets are gone, a late redelivery of a key applied inline would be journaled as a
//! new key. The roll-up keeps the inline rule instead:
//!
//! * the journal item carries the record's arrival at its source (`arr`, epoch seconds);
//! * when the roll-up removes an item's expired inline buckets it raises `<prefix>forgot` to
//!   their span end, in the same update (as the inline writer does);
//! * every update of an item is conditioned on `<prefix>forgot` being absent or not after the
//!   earliest arrival of its keys (no read, no extra write); when that fails, the keys that
//!   arrived before it are kept as `too_old` dead letters (never counted), the rest applied.
//!
//! Exact: a key applied inline is in a bucket of the item until that bucket is removed, and a
//! removal raises `<prefix>forgot` past the key's arrival; so a key that arrived after
//! `<prefix>forgot` and was applied inline is still in a bucket (a duplicate), and one that
//! arrived before it is refused, as inline. `<prefix>forgot` is removed (by the item's next
//! update) once no record that arrived before it can still be read: the journal's writers
//! refuse records older than the window (plus an hour of clock), and the stream keeps a
//! record 24 hours. A record without an arrival time (a source that gives none) is not
//! guarded, as inline.

use aws_sdk_dynamodb::types::AttributeValue;

use super::entry::{MIN_RETENTION, TTL_SLACK_SECONDS};
use super::event::{Event, STREAM_RETENTION_SECS as RETENTION_SECS};
use super::Rollup;
use crate::ddb::{Item, Placeholders};

/// Why a key the roll-up refused for arriving before its item forgot keys is not counted.
pub(super) fn too_old_reason(arrived: u64, forgotten: u64) -> String {
    format!(
        "too_old: the record arrived at epoch second {arrived}, before {forgotten}, when its \
         counter item forgot keys of the inline mode (it may have been counted inline)"
    )
}

impl Rollup {
    /// The condition that every key of `events` with an arrival time arrived after the item
    /// last forgot keys.
    pub(super) fn not_forgotten(
        &self,
        p: &mut Placeholders,
        events: &[Event],
        conditions: &mut Vec<String>,
    ) {
        let Some(arrived) = events.iter().filter_map(|e| e.arrived).min() else {
            return;
        };
        let fg = p.name(self.config.counter.forgotten_attribute());
        let arr = p.value(AttributeValue::N(arrived.to_string()));
        conditions.push(format!("(attribute_not_exists({fg}) OR {fg} <= {arr})"));
    }

    /// After a failed condition: take out of `events` those that arrived before `old` forgot
    /// keys, with that time.
    pub(super) fn forgotten_events(
        &self,
        old: &Item,
        events: &mut Vec<Event>,
    ) -> Vec<(Event, u64)> {
        let Some(forgotten) = forgotten(old, &self.config.counter.forgotten_attribute()) else {
            return Vec::new();
        };
        let (old_keys, rest): (Vec<Event>, Vec<Event>) = std::mem::take(events)
            .into_iter()
            .partition(|e| e.arrived.is_some_and(|a| a < forgotten));
        *events = rest;
        old_keys.into_iter().map(|e| (e, forgotten)).collect()
    }

    /// Whether `item`'s `<prefix>forgot` guards nothing any more: every record that arrived
    /// before it is older than the journal's writers accept, and out of the stream.
    pub(super) fn forgotten_expired(&self, item: &Item, now: u64) -> bool {
        let Some(at) = forgotten(item, &self.config.counter.forgotten_attribute()) else {
            return false;
        };
        let accepted = self.config.counter.window.max(MIN_RETENTION).as_secs();
        at.saturating_add(accepted)
            .saturating_add(TTL_SLACK_SECONDS)
            .saturating_add(RETENTION_SECS)
            < now
    }
}

/// `item`'s `<prefix>forgot` (`name`), epoch seconds.
pub(super) fn forgotten(item: &Item, name: &str) -> Option<u64> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse().ok(),
        _ => None,
    }
}
