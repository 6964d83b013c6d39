//! Holding a cold item's keys in process memory ([`RollupConfig::hold`]): an item with fewer
//! than [`RollupConfig::hold_keys`] pending keys, the oldest younger than the hold, is not
//! updated in this pass; its keys wait in the [`Rollup`] (like its in-memory shard positions)
//! and go with the item's next keys, one update for several.
//!
//! Exactly once: a held key is never behind a saved checkpoint. Before a shard's checkpoint
//! is saved every held key of that shard is applied in the same pass (an item holding one is
//! not held again); a failed apply blocks the item's shards, so no checkpoint moves past it,
//! and the held keys stay held. A process that stops loses its held keys together with its
//! positions: the next one reads from the saved checkpoints, which are before them; the
//! watermarks turn away what was applied already. A held key whose shard's saved checkpoint
//! is at or past it (another process read and applied it), or whose shard is no longer
//! listed, is dropped.
//!
//! [`RollupConfig::hold`]: super::RollupConfig::hold
//! [`RollupConfig::hold_keys`]: super::RollupConfig::hold_keys

use std::collections::{BTreeMap, HashSet};

use super::checkpoint::Checkpoints;
use super::event::{Event, Seq};
use super::Rollup;
use crate::ddb::ItemKey;

/// Keys held in memory: item (canonical key) → the item's key and its held keys.
pub(super) type HeldKeys = BTreeMap<String, (ItemKey, Vec<HeldEvent>)>;

/// A key held: its shard by id (indexes change between runs) and when this process first held
/// it (epoch ms).
#[derive(Debug, Clone)]
pub(super) struct HeldEvent {
    shard: String,
    since_ms: u64,
    event: Event,
}

/// One item's keys in a pass: new (read in this pass) and taken from the held ones.
#[derive(Debug, Default)]
pub(super) struct Pending {
    pub(super) new: Vec<Event>,
    pub(super) held: Vec<(Event, u64)>,
}

impl Pending {
    /// Every key, sorted by shard then sequence number (what one update applies).
    pub(super) fn all(&self) -> Vec<Event> {
        let mut all: Vec<Event> = self.held.iter().map(|(e, _)| e.clone()).collect();
        all.extend(self.new.iter().cloned());
        all.sort_by_key(|e| (e.shard, e.seq));
        all
    }
}

impl Rollup {
    /// Take every held key out of memory, with its shard's index in `ids`; drop those already
    /// behind their shard's saved checkpoint (applied by whoever saved it) and those of shards
    /// no longer listed.
    pub(super) fn take_held(
        &self,
        ids: &[String],
        checkpoints: &Checkpoints,
    ) -> BTreeMap<String, (ItemKey, Vec<(Event, u64)>)> {
        let taken = std::mem::take(&mut *self.held.lock().unwrap_or_else(|p| p.into_inner()));
        let mut out = BTreeMap::new();
        for (item, (key, events)) in taken {
            let mut kept = Vec::new();
            for held in events {
                let saved = checkpoints.shards.get(&held.shard);
                let behind = saved.is_some_and(|c| {
                    c.done
                        || c.seq
                            .as_deref()
                            .and_then(Seq::parse)
                            .is_some_and(|s| s >= held.event.seq)
                });
                let Some(at) = ids.iter().position(|id| *id == held.shard) else {
                    tracing::error!(shard = %held.shard, seq = %held.event.seq_text,
                        "journal roll-up: a held key's shard is no longer listed (dropped; a gap if unfinished)");
                    continue;
                };
                if behind {
                    continue;
                }
                let mut event = held.event;
                event.shard = at;
                kept.push((event, held.since_ms));
            }
            if !kept.is_empty() {
                out.insert(item, (key, kept));
            }
        }
        out
    }

    /// Whether an item with `pending` keys is held in this pass: a hold is set, it has fewer
    /// than `hold_keys` keys, none of a shard in `saving`, the oldest younger than the hold.
    pub(super) fn holds(&self, pending: &Pending, saving: &HashSet<usize>, now_ms: u64) -> bool {
        let hold_ms = self.config.hold.as_millis();
        let count = pending.new.len() + pending.held.len();
        if hold_ms == 0 || count >= self.config.hold_keys {
            return false;
        }
        let news = pending.new.iter().map(|e| (e, now_ms));
        let helds = pending.held.iter().map(|(e, since)| (e, *since));
        let mut oldest = u64::MAX;
        for (event, since) in news.chain(helds) {
            if saving.contains(&event.shard) {
                return false;
            }
            let Some(at) = event.at_ms else { return false };
            oldest = oldest.min(at.min(since));
        }
        u128::from(now_ms.saturating_sub(oldest)) < hold_ms
    }

    /// Keep an item's keys in memory: the held ones again; the new ones unless their shard is
    /// `blocked` (its position does not move: they are read again). The keys now held.
    pub(super) fn keep_held(
        &self,
        key: ItemKey,
        pending: Pending,
        ids: &[String],
        blocked: &HashSet<usize>,
        now_ms: u64,
    ) -> usize {
        let news = pending
            .new
            .into_iter()
            .filter(|e| !blocked.contains(&e.shard))
            .map(|e| (e, now_ms));
        let events: Vec<HeldEvent> = pending
            .held
            .into_iter()
            .chain(news)
            .map(|(event, since_ms)| HeldEvent {
                shard: ids[event.shard].clone(),
                since_ms,
                event,
            })
            .collect();
        let count = events.len();
        if count > 0 {
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            let entry = held
                .entry(key.canonical().to_string())
                .or_insert_with(|| (key, Vec::new()));
            entry.1.extend(events);
        }
        count
    }

    /// Keys held in memory, and the oldest one's age (ms) at `now_ms`.
    pub(super) fn held_now(&self, now_ms: u64) -> (usize, u64) {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let mut count = 0;
        let mut oldest = now_ms;
        for (_, events) in held.values() {
            count += events.len();
            for e in events {
                oldest = oldest.min(e.event.at_ms.unwrap_or(e.since_ms).min(e.since_ms));
            }
        }
        (count, now_ms.saturating_sub(oldest))
    }
}
