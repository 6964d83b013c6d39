//! Which watermarks a counter item no longer needs, so that an item carries about one
//! watermark per shard that may still deliver its keys, not one per shard that ever did.
//!
//! A watermark guards against applying a shard's records twice. It can go once no run will
//! apply a record of its shard again:
//!
//! * the shard is **done** (closed, read to its end, every key applied: no run starts reading
//!   it again), and [`PRUNE_DELAY`] has passed since, longer than a run may last
//!   ([`super::rollup::MAX_RUN`]), so that a run that read it before it was done has ended;
//! * the shard left the stream unfinished (its checkpoint is marked lost: it cannot be read),
//!   and its watermark has not moved for [`PRUNE_DELAY`];
//! * the roll-up knows nothing of the shard (no checkpoint, not listed) and its watermark has
//!   not moved for [`WATERMARK_KEEP_SECONDS`] (longer than the stream keeps a record).
//!
//! The update that adds an item's keys returns the item (`ALL_NEW`); the names found
//! removable are kept in memory (bounded) and removed by the item's next update, at no extra
//! write.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use super::event::{parse_watermark, watermark_name, WATERMARK_KEEP_SECONDS};
use super::Rollup;
use crate::ddb::{Item, ItemKey};

/// How long after its shard is done (or, for a lost shard, after it last moved) a watermark
/// is kept: longer than a run lasts.
pub(super) const PRUNE_DELAY: Duration = Duration::from_secs(20 * 60);
/// Counter items whose removable watermark names are remembered.
pub(super) const PRUNE_CACHE_ITEMS: usize = 100_000;

/// What the roll-up knows of a shard, by watermark name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ShardState {
    /// It may still deliver keys (listed, not done).
    Active,
    /// Done since these epoch seconds.
    Done(u64),
    /// It left the stream unfinished.
    Lost,
}

/// The roll-up's view of the shards, for the run in progress.
pub(super) type ShardStates = HashMap<String, ShardState>;

/// The bounded memory of removable watermark names per counter item.
pub(super) type PruneCache = std::sync::Mutex<lru::LruCache<String, Vec<String>>>;

pub(super) fn prune_cache() -> PruneCache {
    std::sync::Mutex::new(lru::LruCache::new(
        NonZeroUsize::new(PRUNE_CACHE_ITEMS).unwrap_or(NonZeroUsize::MIN),
    ))
}

/// The states of `shards` (id → state) by their watermark names under `prefix`.
pub(super) fn states<'a>(
    prefix: &str,
    shards: impl IntoIterator<Item = (&'a str, ShardState)>,
) -> ShardStates {
    shards
        .into_iter()
        .map(|(id, state)| (watermark_name(prefix, id), state))
        .collect()
}

impl Rollup {
    /// The watermark names of `key` found removable by its last update.
    pub(super) fn prunable(&self, key: &ItemKey) -> Vec<String> {
        let mut cache = self.prune.lock().unwrap_or_else(|p| p.into_inner());
        cache.pop(key.canonical()).unwrap_or_default()
    }

    /// Remember which of `item`'s watermarks its next update may remove.
    pub(super) fn learn_watermarks(&self, key: &ItemKey, item: Option<&Item>) {
        let Some(item) = item else { return };
        let prefix = format!("{}w_", self.config.counter.attribute_prefix);
        let now = self.clock.now_secs();
        let states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let delay = PRUNE_DELAY.as_secs();
        let removable: Vec<String> = item
            .iter()
            .filter(|(name, _)| name.starts_with(&prefix))
            .filter(|(name, value)| {
                let moved = match value {
                    AttributeValue::B(_) => parse_watermark(value).map(|(_, at)| at),
                    _ => Some(0), // not a watermark this version writes
                };
                let Some(moved) = moved else { return false };
                match states.get(name.as_str()) {
                    Some(ShardState::Active) => false,
                    Some(ShardState::Done(at)) => at.saturating_add(delay) < now,
                    Some(ShardState::Lost) => moved.saturating_add(delay) < now,
                    None => moved.saturating_add(WATERMARK_KEEP_SECONDS) < now,
                }
            })
            .map(|(name, _)| name.clone())
            .take(50)
            .collect();
        drop(states);
        let mut removable = removable;
        let layout = self.config.counter.bucket_attribute();
        if !item.contains_key(&layout) && self.forgotten_expired(item, now) {
            removable.push(self.config.counter.forgotten_attribute());
        }
        if removable.is_empty() {
            return;
        }
        let mut cache = self.prune.lock().unwrap_or_else(|p| p.into_inner());
        cache.put(key.canonical().to_string(), removable);
    }
}
