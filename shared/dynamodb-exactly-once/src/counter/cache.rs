//! The warm-redelivery cache: per process, the idempotency keys this process applied (or found
//! applied) on each item, so that a redelivered batch on a warm function is answered
//! `duplicate` without a DynamoDB call.
//!
//! Invariant: a key applied at time `t` (on the protocol's clock) stays in its item until at
//! least `t + window` (its bucket is kept a window past its span), so while an entry is younger
//! than [`CounterConfig::window`]`/ 2` (and [`CACHE_MAX_AGE`]) the item certainly holds the
//! key, and DynamoDB would answer `duplicate` too: the cache never skips a delta that still has
//! to be counted. The half window leaves room for writers whose clocks run ahead, which may
//! remove a bucket up to two bucket lengths early. The cache is bounded (least recently used
//! first out) and shared by every clone of one [`super::Counter`].
//!
//! Cost: none in DynamoDB; about 150 bytes of memory per key (10,000 by default, `0`: off).

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;

use super::config::CounterConfig;

/// Keys the cache holds by default.
pub(crate) const DEFAULT_CACHE_KEYS: usize = 10_000;
/// Longest time (seconds) an entry is trusted.
pub(crate) const CACHE_MAX_AGE: u64 = 600;

/// (item, key hash) → when it was seen applied (epoch seconds, the protocol's clock).
type Keys = LruCache<(String, String), u64>;

/// The cache (see the module documentation).
#[derive(Clone)]
pub(crate) struct KeyCache {
    keys: Option<Arc<Mutex<Keys>>>,
    trusted_secs: u64,
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache")
            .field("on", &self.keys.is_some())
            .field("trusted_secs", &self.trusted_secs)
            .finish()
    }
}

impl KeyCache {
    pub(crate) fn of(config: &CounterConfig) -> Self {
        KeyCache {
            keys: NonZeroUsize::new(config.cache_keys)
                .map(|n| Arc::new(Mutex::new(LruCache::new(n)))),
            trusted_secs: (config.window.as_secs() / 2).min(CACHE_MAX_AGE),
        }
    }

    /// Whether `item` certainly holds key `hash` at `now` (epoch seconds).
    pub(crate) fn holds(&self, item: &str, hash: &str, now: u64) -> bool {
        let Some(Ok(mut keys)) = self.keys.as_ref().map(|k| k.lock()) else {
            return false;
        };
        let entry = (item.to_string(), hash.to_string());
        match keys.get(&entry) {
            Some(seen) if now >= *seen && now - seen < self.trusted_secs => true,
            Some(_) => {
                keys.pop(&entry);
                false
            }
            None => false,
        }
    }

    /// Record that `item` held key `hash` at `now`.
    pub(crate) fn note(&self, item: &str, hash: &str, now: u64) {
        if let Some(Ok(mut keys)) = self.keys.as_ref().map(|k| k.lock()) {
            keys.put((item.to_string(), hash.to_string()), now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_key_is_known_for_half_the_window_at_most_ten_minutes() {
        let mut config = CounterConfig::builder("ttt")
            .window(Duration::from_secs(60))
            .build()
            .expect("valid");
        let cache = KeyCache::of(&config);
        cache.note("i", "k", 1000);
        assert!(cache.holds("i", "k", 1000));
        assert!(cache.holds("i", "k", 1029));
        assert!(!cache.holds("i", "k", 1030));
        assert!(!cache.holds("i", "other", 1000));
        config.window = Duration::from_secs(3600);
        let cache = KeyCache::of(&config);
        cache.note("i", "k", 0);
        assert!(cache.holds("i", "k", 599) && !cache.holds("i", "k", 600));
        config.cache_keys = 0;
        let off = KeyCache::of(&config);
        off.note("i", "k", 0);
        assert!(!off.holds("i", "k", 0));
    }
}
