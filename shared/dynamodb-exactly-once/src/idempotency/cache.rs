//! Completed results kept in the process, least recently used first out, bounded by count
//! and by bytes. Only results this process stored or read back are kept: never a result
//! whose completion was refused.

use std::sync::Mutex;

use lru::LruCache;

/// A completed result kept in memory.
#[derive(Debug, Clone)]
pub(super) struct Cached {
    pub payload_hash: String,
    pub operation: Option<String>,
    /// `None`: completed, the result not kept.
    pub result: Option<Vec<u8>>,
    pub expires_at_s: u64,
}

impl Cached {
    fn bytes(&self, key: &str) -> usize {
        key.len() + self.payload_hash.len() + self.result.as_ref().map_or(0, Vec::len) + 64
    }
}

#[derive(Debug)]
struct Inner {
    entries: LruCache<String, Cached>,
    bytes: usize,
}

/// The cache (no entries when `max_keys` or `max_bytes` is 0).
#[derive(Debug)]
pub(super) struct Cache {
    inner: Mutex<Inner>,
    max_keys: usize,
    max_bytes: usize,
}

impl Cache {
    pub(super) fn new(max_keys: usize, max_bytes: usize) -> Self {
        Cache {
            inner: Mutex::new(Inner {
                entries: LruCache::unbounded(),
                bytes: 0,
            }),
            max_keys,
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(inner) => inner,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The live entry of `key` at `now_ms`.
    pub(super) fn get(&self, key: &str, now_ms: u64) -> Option<Cached> {
        if self.max_keys == 0 {
            return None;
        }
        let mut inner = self.lock();
        let hit = inner.entries.get(key)?.clone();
        if hit.expires_at_s < now_ms / 1000 {
            self.remove_locked(&mut inner, key);
            return None;
        }
        Some(hit)
    }

    pub(super) fn put(&self, key: &str, entry: Cached) {
        let size = entry.bytes(key);
        if self.max_keys == 0 || size > self.max_bytes {
            return;
        }
        let mut inner = self.lock();
        self.remove_locked(&mut inner, key);
        inner.bytes += size;
        inner.entries.put(key.to_string(), entry);
        while inner.entries.len() > self.max_keys || inner.bytes > self.max_bytes {
            match inner.entries.pop_lru() {
                Some((k, old)) => inner.bytes = inner.bytes.saturating_sub(old.bytes(&k)),
                None => break,
            }
        }
    }

    /// Forget `key` (its completion was refused, or it is no longer ours).
    pub(super) fn remove(&self, key: &str) {
        let mut inner = self.lock();
        self.remove_locked(&mut inner, key);
    }

    fn remove_locked(&self, inner: &mut Inner, key: &str) {
        if let Some(old) = inner.entries.pop(key) {
            inner.bytes = inner.bytes.saturating_sub(old.bytes(key));
        }
    }

    /// Entries and bytes held.
    #[cfg(test)]
    pub(crate) fn usage(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.entries.len(), inner.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(bytes: usize) -> Cached {
        Cached {
            payload_hash: String::new(),
            operation: None,
            result: Some(vec![b'x'; bytes]),
            expires_at_s: u64::MAX,
        }
    }

    #[test]
    fn the_cache_is_bounded_by_bytes_and_a_result_larger_than_the_bound_is_not_kept() {
        let cache = Cache::new(1000, 10_000);
        for i in 0..10 {
            cache.put(&format!("k{i}"), entry(3_000));
        }
        let (entries, bytes) = cache.usage();
        assert!(
            bytes <= 10_000 && entries == 3,
            "{entries} entries, {bytes} bytes"
        );
        assert!(cache.get("k9", 0).is_some() && cache.get("k0", 0).is_none());
        cache.put("huge", entry(20_000));
        assert!(cache.get("huge", 0).is_none());
    }
}
