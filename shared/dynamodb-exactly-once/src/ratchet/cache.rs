//! The warm-redelivery cache: per process, the version each recently written key is known to
//! hold in the table at least, so that a redelivered batch on a warm function is answered
//! without a DynamoDB call.
//!
//! Invariant: a key's stored version only grows (every write is conditioned on moving it
//! forward), so a version this process wrote, or read back from a failed condition, is a
//! lower bound of the stored one for as long as the item exists. A record at or below that
//! bound is answered from the cache: `duplicate` when it is the cached version itself,
//! `stale` when it is below. A record above it always goes to DynamoDB: the cache can only
//! ever answer "nothing to write", never skip a write that is still needed, whatever other
//! writers (other processes, other settings) did meanwhile.
//!
//! The one way a stored version goes down is a tombstone expiring (TTL deletes the item, and
//! an older put may then apply, as it would without the cache): entries are dropped after
//! `min(tombstone lifetime, CACHE_MAX_AGE)`. The cache is bounded (least recently used keys
//! go first) and shared by every clone of one [`super::Ratchet`]; one with another
//! configuration has its own.
//!
//! Cost: none in DynamoDB; memory about 200 bytes per key (10,000 keys by default, `0` turns
//! it off). In history mode the history rows are still written (idempotently): only the
//! latest-state write is skipped.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;

use super::outcome::RatchetOutcome;
use super::ts::Ts;

/// Keys the cache holds by default.
pub(crate) const DEFAULT_CACHE_KEYS: usize = 10_000;
/// Longest time an entry is trusted (a tombstone may expire after it).
pub(crate) const CACHE_MAX_AGE: Duration = Duration::from_secs(600);

/// A known lower bound of one key's stored version.
#[derive(Debug, Clone)]
struct Known {
    ts: Ts,
    token: String,
    at: Instant,
}

/// The cache (see the module documentation); `None` inside when turned off.
#[derive(Clone)]
pub(crate) struct VersionCache {
    keys: Option<Arc<Mutex<LruCache<String, Known>>>>,
    max_age: Duration,
}

impl std::fmt::Debug for VersionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let capacity = self
            .keys
            .as_ref()
            .and_then(|k| k.lock().ok().map(|k| k.cap().get()));
        f.debug_struct("VersionCache")
            .field("capacity", &capacity)
            .field("max_age", &self.max_age)
            .finish()
    }
}

impl VersionCache {
    /// A cache of `capacity` keys (`0`: off), entries trusted for `max_age` at most.
    pub(crate) fn new(capacity: usize, tombstone_ttl: Duration) -> Self {
        VersionCache {
            keys: NonZeroUsize::new(capacity).map(|n| Arc::new(Mutex::new(LruCache::new(n)))),
            max_age: tombstone_ttl.min(CACHE_MAX_AGE),
        }
    }

    /// The outcome a record of `key` at `version` certainly has, when the cache knows it.
    pub(crate) fn answer(&self, key: &str, version: (&Ts, &str)) -> Option<RatchetOutcome> {
        let mut keys = self.keys.as_ref()?.lock().ok()?;
        let known = keys.get(key)?;
        if known.at.elapsed() > self.max_age {
            keys.pop(key);
            return None;
        }
        match (&known.ts, known.token.as_str()).cmp(&version) {
            std::cmp::Ordering::Equal => Some(RatchetOutcome::Duplicate),
            std::cmp::Ordering::Greater => Some(RatchetOutcome::Stale),
            std::cmp::Ordering::Less => None,
        }
    }

    /// Record that the table holds at least `version` for `key` (seen now).
    pub(crate) fn note(&self, key: &str, version: (&Ts, &str)) {
        let Some(keys) = &self.keys else {
            return;
        };
        let Ok(mut keys) = keys.lock() else {
            return;
        };
        let fresher = keys
            .peek(key)
            .is_none_or(|k| (&k.ts, k.token.as_str()) <= version || k.at.elapsed() > self.max_age);
        if fresher {
            keys.put(
                key.to_string(),
                Known {
                    ts: version.0.clone(),
                    token: version.1.to_string(),
                    at: Instant::now(),
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(n: u64) -> Ts {
        Ts::from(n)
    }

    #[test]
    fn only_versions_at_or_below_the_known_one_are_answered() {
        let cache = VersionCache::new(2, Duration::from_secs(3600));
        assert_eq!(cache.answer("a", (&ts(5), "t")), None);
        cache.note("a", (&ts(5), "t"));
        assert_eq!(
            cache.answer("a", (&ts(5), "t")),
            Some(RatchetOutcome::Duplicate)
        );
        assert_eq!(
            cache.answer("a", (&ts(4), "z")),
            Some(RatchetOutcome::Stale)
        );
        assert_eq!(cache.answer("a", (&ts(5), "u")), None);
        assert_eq!(cache.answer("a", (&ts(6), "a")), None);
        // A lower version seen later never lowers the bound.
        cache.note("a", (&ts(3), "t"));
        assert_eq!(
            cache.answer("a", (&ts(4), "z")),
            Some(RatchetOutcome::Stale)
        );
        // Bounded: the least recently used key goes.
        cache.note("b", (&ts(1), "t"));
        cache.note("c", (&ts(1), "t"));
        assert_eq!(cache.answer("a", (&ts(4), "z")), None);
    }

    #[test]
    fn a_cache_of_zero_keys_or_past_its_age_answers_nothing() {
        let off = VersionCache::new(0, Duration::from_secs(3600));
        off.note("a", (&ts(5), "t"));
        assert_eq!(off.answer("a", (&ts(1), "t")), None);
        let brief = VersionCache::new(8, Duration::ZERO);
        brief.note("a", (&ts(5), "t"));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(brief.answer("a", (&ts(1), "t")), None);
    }
}
