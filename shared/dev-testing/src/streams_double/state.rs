//! What the server tasks and the [`StreamsDouble`](super::StreamsDouble) handle share: the
//! clock, the lineage rules, the streams, the upstream feeds, the counters and the throttle.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use dynamodb_exactly_once::Clock;

use super::error::ApiError;
use super::model::{Rules, Stream};
use super::upstream::{Feed, Upstream};
use super::Stats;

/// At most this many `GetRecords` of one shard at once (AWS: "no more than 2 processes").
const READERS_PER_SHARD: usize = 2;

/// The mutable part, behind one lock never held across an `await`.
#[derive(Debug)]
pub(crate) struct State {
    pub streams: HashMap<String, Stream>,
    pub stats: Stats,
    pub throttle_percent: u32,
    pub empty_pages: usize,
    rng: u64,
    readers: HashMap<String, usize>,
    pub injected: u64,
}

/// Shared by the server's tasks and the handle.
#[derive(Debug)]
pub(crate) struct Shared {
    pub clock: Clock,
    pub rules: Rules,
    pub latency: Duration,
    pub upstream: Upstream,
    state: Mutex<State>,
    /// The upstream readers; the lock also serializes registering and pulling.
    feeds: tokio::sync::Mutex<HashMap<String, Feed>>,
}

/// A `GetRecords` in flight on one shard; leaves on drop.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    shared: &'a Shared,
    key: String,
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if let Some(n) = state.readers.get_mut(&self.key) {
            *n = n.saturating_sub(1);
        }
    }
}

impl Shared {
    pub fn new(
        clock: Clock,
        rules: Rules,
        latency: Duration,
        upstream: Upstream,
        seed: u64,
    ) -> Self {
        Shared {
            clock,
            rules,
            latency,
            upstream,
            state: Mutex::new(State {
                streams: HashMap::new(),
                stats: Stats::default(),
                throttle_percent: 0,
                empty_pages: 0,
                rng: seed,
                readers: HashMap::new(),
                injected: 0,
            }),
            feeds: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The state (a panic elsewhere while it was held leaves it usable).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether this call is throttled (`throttle_percent`, seeded); counts it.
    pub fn throttle(&self) -> Result<(), ApiError> {
        let mut state = self.lock();
        // splitmix64: seeded, good enough for a share of calls.
        state.rng = state.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        if z % 100 < u64::from(state.throttle_percent) {
            state.stats.throttled += 1;
            return Err(ApiError::throttled("Rate exceeded (throttle_percent)"));
        }
        Ok(())
    }

    /// Enter a `GetRecords` of `shard`: refused past two at once.
    pub fn enter(&self, stream: &str, shard: &str) -> Result<Reader<'_>, ApiError> {
        let key = format!("{stream}|{shard}");
        let mut state = self.lock();
        let readers = state.readers.entry(key.clone()).or_insert(0);
        if *readers >= READERS_PER_SHARD {
            state.stats.throttled += 1;
            return Err(ApiError::throttled(format!(
                "No more than {READERS_PER_SHARD} processes per shard ({shard})"
            )));
        }
        *readers += 1;
        Ok(Reader { shared: self, key })
    }

    /// Register `arn` on first sight (from upstream) and ingest what upstream wrote since the
    /// last pull; `refresh` also looks for new upstream shards. Returns the records ingested.
    pub async fn feed(&self, arn: &str, refresh: bool) -> Result<usize, ApiError> {
        let mut feeds = self.feeds.lock().await;
        let known = self.lock().streams.contains_key(arn);
        if known && !feeds.contains_key(arn) {
            return Ok(0); // synthetic: nothing upstream
        }
        if !known {
            let (meta, feed) = self.upstream.open(arn).await?;
            feeds.insert(arn.to_string(), feed);
            let stream = Stream::new(arn, meta, &self.rules, self.clock.now_ms());
            self.lock().streams.insert(arn.to_string(), stream);
        }
        let Some(feed) = feeds.get_mut(arn) else {
            return Ok(0);
        };
        if refresh && known {
            self.upstream.refresh(feed).await?;
        }
        let records = self.upstream.pull(feed).await?;
        let count = records.len();
        self.ingest(arn, records).map_err(ApiError::internal)?;
        Ok(count)
    }

    /// Ingest what upstream wrote to `arn` so far, then stop reading it and disable it (see
    /// `Stream::disable`).
    pub async fn disable(&self, arn: &str) -> Result<(), ApiError> {
        self.feed(arn, true).await?;
        let mut feeds = self.feeds.lock().await;
        feeds.remove(arn);
        let now = self.clock.now_ms();
        let mut state = self.lock();
        let stream = state
            .streams
            .get_mut(arn)
            .ok_or_else(|| ApiError::not_found(format!("unknown stream {arn}")))?;
        stream.disable(&self.rules, now);
        Ok(())
    }

    /// The streams read from upstream.
    pub async fn fed_streams(&self) -> Vec<String> {
        self.feeds.lock().await.keys().cloned().collect()
    }

    /// Keep `records` in `arn` as written now.
    pub fn ingest(&self, arn: &str, records: Vec<serde_json::Value>) -> Result<(), String> {
        let now = self.clock.now_ms();
        let mut state = self.lock();
        let state = &mut *state;
        let stream = state
            .streams
            .get_mut(arn)
            .ok_or_else(|| format!("unknown stream {arn}: call sync_stream or add_stream first"))?;
        stream.advance(&self.rules, now);
        for record in records {
            stream.ingest(record, now)?;
            state.stats.records_ingested += 1;
        }
        Ok(())
    }

    /// Run `f` on stream `arn` with its lineage and trimming brought up to the clock.
    pub fn with_stream<T>(
        &self,
        arn: &str,
        f: impl FnOnce(&mut Stream, &mut Stats, u64) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let now = self.clock.now_ms();
        let mut state = self.lock();
        let state = &mut *state;
        let stream = state
            .streams
            .get_mut(arn)
            .ok_or_else(|| ApiError::not_found(format!("Requested resource not found: {arn}")))?;
        stream.advance(&self.rules, now);
        f(stream, &mut state.stats, now)
    }
}
