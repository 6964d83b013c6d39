//! Idempotency for any async function: a run per key, its result returned to every duplicate.
//!
//! Wrap a call that must happen once per key ("charge this order", "send this email"):
//!
//! ```no_run
//! use dynamodb_exactly_once_lambda::idempotency::{
//!     DynamoDbPersistence, Idempotency, IdempotencyConfig,
//! };
//! # async fn charge(order: &str) -> Result<String, std::io::Error> { Ok("receipt".into()) }
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let config = IdempotencyConfig::builder("orders-fn").build()?;
//! let idempotency = Idempotency::new(DynamoDbPersistence::new(client, "Idempotency"), config);
//! let order = serde_json::json!({"orderId": "o-1", "amount": 250});
//! let deadline_ms = None; // the invocation's deadline (`Context::deadline`), when there is one
//! let receipt = idempotency
//!     .run("o-1", &order, deadline_ms, || charge("o-1"))
//!     .await?
//!     .into_value();
//! # Ok(()) }
//! ```
//!
//! Behind the [batch processor](crate::processor), a handler is one call: the key taken from
//! the record by a [`KeySource`] (its id, its sequence number, a JSON pointer into the body,
//! a closure), the payload the record's body, the key held until the record's deadline
//! ([`Idempotency::run_record`]; its errors become the right [`RecordError`] with `?`). A
//! `tower::Service` is wrapped by [`IdempotencyLayer`] instead.
//!
//! [`RecordError`]: crate::processor::RecordError
//!
//! # Invariant
//! For a key, at most one run is in progress at a time, and once a run completed, every call
//! with that key until the record expires ([`IdempotencyConfig::expires_after`]) returns the
//! stored result ([`Run::Replayed`]) without running the function. A run **claims** the key
//! (in progress until the invocation's deadline, or [`IdempotencyConfig::in_progress_expiry`]
//! without one), runs the function, and stores its result; a function that fails
//! **releases** the key (a retry runs again). A duplicate that finds the key in progress is
//! [`IdempotencyError::InProgress`] (retryable: report the record, it comes back); one with
//! another payload under the same key is [`IdempotencyError::PayloadMismatch`] (not
//! retryable: a producer bug, keep it as a dead letter).
//!
//! **Exactly once** holds while a run finishes within its claim. A run whose process dies
//! (a timeout, a crash) leaves the key in progress until its claim expires, then a retry runs
//! the function again: the function's own effect may then have happened twice, as with any
//! idempotency layer that is not inside the effect's own transaction; pass the key on to
//! services that take one (payment APIs do). A lost response on the claim is recognised (the
//! retried claim finds its own token); a lost response on the completion is retried by the
//! SDK (conditioned on the token, so it applies once).
//!
//! # Cost
//! A new key: one conditional `PutItem` and one `UpdateItem` (1 WCU each for results up to
//! ~900 bytes). A duplicate: one failed conditional `PutItem` returning the stored record
//! (`ALL_OLD`, billed 1 WCU for a small record, no read); **none** when the process has it
//! in its cache ([`IdempotencyConfig::cache_keys`]). A failure: one `DeleteItem` more.
//!
//! # Failure modes
//! * The table is unavailable: [`IdempotencyError::Store`] (retryable as the error says);
//!   the function did not run.
//! * The result cannot be serialized or a stored one read back:
//!   [`IdempotencyError::Result`].
//! * The completion write fails after the function ran: sent again, with backoff, while the
//!   claim holds the key (up to 8 more times); if it still fails, logged and the value
//!   returned, and the key stays in progress until its claim expires (a later duplicate may
//!   then run again).

mod config;
mod dynamodb;
mod key;
mod layer;
mod persistence;
mod records;

pub use config::{
    IdempotencyConfig, IdempotencyConfigBuilder, DEFAULT_CACHE_KEYS, DEFAULT_EXPIRES_AFTER,
    DEFAULT_IN_PROGRESS_EXPIRY, MAX_KEY_BYTES,
};
pub use dynamodb::DynamoDbPersistence;
pub use key::{KeyError, KeyExpression, KeyFn, KeySource, KEY_SETTING};
pub use layer::{IdempotencyLayer, IdempotentFuture, IdempotentService, RequestKey};
pub use persistence::{Claim, ClaimRequest, InMemory, Persistence, Status, StoredRecord};

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Mutex;

use dynamodb_exactly_once::ddb::clock::epoch_millis;
use dynamodb_exactly_once::ddb::retry::Backoff;
use dynamodb_exactly_once::{ErrorClass, StoreError};
use lru::LruCache;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// How a call ended: the function ran now, or an earlier run's result was returned.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run<T> {
    /// The function ran in this call.
    Ran(T),
    /// A duplicate: the stored result of the run that completed earlier.
    Replayed(T),
}

impl<T> Run<T> {
    /// The value, either way.
    pub fn into_value(self) -> T {
        match self {
            Run::Ran(v) | Run::Replayed(v) => v,
        }
    }

    /// Whether this call was a duplicate.
    pub fn is_replayed(&self) -> bool {
        matches!(self, Run::Replayed(_))
    }
}

/// Why a call did not return a value.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError<E> {
    /// Another run holds the key (until `until_ms`, epoch ms): retry later.
    #[error("another run of this key is in progress (until {until_ms} ms)")]
    InProgress {
        /// When its claim expires.
        until_ms: u64,
    },
    /// The key was seen with another payload.
    #[error("the key {key:?} was used before with another payload")]
    PayloadMismatch {
        /// The stored key.
        key: String,
    },
    /// The function failed (the key was released: a retry runs it again).
    #[error("the function failed: {0}")]
    Handler(E),
    /// The store failed; the function did not run.
    #[error(transparent)]
    Store(StoreError),
    /// A result could not be serialized, or a stored one read back.
    #[error("idempotency result: {0}")]
    Result(#[source] serde_json::Error),
    /// The record or request gave no usable key ([`KeySource`]); the function did not run.
    #[error(transparent)]
    Key(KeyError),
}

impl<E> IdempotencyError<E> {
    /// Whether retrying the call later can succeed (the function's own errors: `None`, the
    /// caller knows).
    pub fn is_retryable(&self) -> Option<bool> {
        match self {
            IdempotencyError::InProgress { .. } => Some(true),
            IdempotencyError::PayloadMismatch { .. }
            | IdempotencyError::Result(_)
            | IdempotencyError::Key(_) => Some(false),
            IdempotencyError::Store(e) => Some(e.class() != ErrorClass::InvalidRequest),
            IdempotencyError::Handler(_) => None,
        }
    }
}

/// Waits before sending a failed completion again (while the claim holds the key).
const COMPLETION_RETRY: Backoff = Backoff::new(
    std::time::Duration::from_millis(10),
    std::time::Duration::from_millis(500),
    8,
);

/// A completed result kept in memory.
#[derive(Debug, Clone)]
struct Cached {
    payload_hash: String,
    result: Vec<u8>,
    expires_at_s: u64,
}

/// The layer: runs a function once per key over a [`Persistence`].
#[derive(Debug)]
pub struct Idempotency<P> {
    persistence: P,
    config: IdempotencyConfig,
    cache: Option<Mutex<LruCache<String, Cached>>>,
}

impl<P: Persistence> Idempotency<P> {
    /// The layer over `persistence`.
    pub fn new(persistence: P, config: IdempotencyConfig) -> Self {
        let cache = NonZeroUsize::new(config.cache_keys).map(|n| Mutex::new(LruCache::new(n)));
        Idempotency {
            persistence,
            config,
            cache,
        }
    }

    /// The store.
    pub fn persistence(&self) -> &P {
        &self.persistence
    }

    /// Run `function` once for `key` (see the module documentation); `payload` is what the
    /// key stands for (its hash is checked across calls), `deadline_ms` the invocation's
    /// deadline (epoch ms), until which the run holds the key.
    pub async fn run<T, E, F, Fut>(
        &self,
        key: &str,
        payload: &impl Serialize,
        deadline_ms: Option<u64>,
        function: F,
    ) -> Result<Run<T>, IdempotencyError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        if !self.config.enabled {
            return function()
                .await
                .map(Run::Ran)
                .map_err(IdempotencyError::Handler);
        }
        let key = self.stored_key(key);
        let hash = self.payload_hash(payload)?;
        let now_ms = epoch_millis();
        if let Some(cached) = self.cached(&key, now_ms) {
            return self.replay(&key, &hash, &cached.payload_hash, &cached.result);
        }
        let request = ClaimRequest {
            key: key.clone(),
            payload_hash: hash.clone(),
            token: format!("{:032x}", rand::random::<u128>()),
            now_ms,
            in_progress_until_ms: deadline_ms
                .unwrap_or_else(|| now_ms.saturating_add(millis(self.config.in_progress_expiry))),
            expires_at_s: (now_ms / 1000).saturating_add(self.config.expires_after.as_secs()),
        };
        match self.persistence.claim(&request).await {
            Err(e) => Err(IdempotencyError::Store(e)),
            Ok(Claim::Claimed) => self.run_claimed(&request, function).await,
            Ok(Claim::Existing(record)) => match record.status {
                Status::InProgress { until_ms } if self.matches(&hash, &record.payload_hash) => {
                    Err(IdempotencyError::InProgress { until_ms })
                }
                Status::InProgress { .. } => Err(IdempotencyError::PayloadMismatch { key }),
                Status::Completed { result } => {
                    let value = self.replay(&key, &hash, &record.payload_hash, &result)?;
                    self.remember(&key, &record.payload_hash, result, record.expires_at_s);
                    Ok(value)
                }
            },
        }
    }

    /// The function, under our claim: its result stored, or the key released.
    async fn run_claimed<T, E, F, Fut>(
        &self,
        claim: &ClaimRequest,
        function: F,
    ) -> Result<Run<T>, IdempotencyError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let value = match function().await {
            Ok(value) => value,
            Err(e) => {
                if let Err(err) = self.persistence.release(&claim.key, &claim.token).await {
                    tracing::warn!(key = %claim.key, error = %err,
                        "could not release the idempotency key; it frees itself when its claim expires");
                }
                return Err(IdempotencyError::Handler(e));
            }
        };
        let result = serde_json::to_vec(&value).map_err(IdempotencyError::Result)?;
        match self.store_result(claim, &result).await {
            Ok(()) => self.remember(&claim.key, &claim.payload_hash, result, claim.expires_at_s),
            Err(err) => tracing::error!(key = %claim.key, error = %err,
                "the function ran but its result could not be stored; the key stays in progress until its claim expires"),
        }
        Ok(Run::Ran(value))
    }

    /// Store the run's result: the completion, sent again after a retryable failure while
    /// the claim holds the key (it is conditioned on the claim's token, so sending it again
    /// is safe; once the claim expired another run may own the key).
    async fn store_result(&self, claim: &ClaimRequest, result: &[u8]) -> Result<(), StoreError> {
        let mut waits = COMPLETION_RETRY.delays();
        loop {
            let done = self
                .persistence
                .complete(&claim.key, &claim.token, result, claim.expires_at_s)
                .await;
            let err = match done {
                Err(err) if err.is_retryable() => err,
                done => return done,
            };
            let left = claim.in_progress_until_ms.saturating_sub(epoch_millis());
            let wait = match waits.next() {
                Some(wait) if wait.as_millis() < u128::from(left) => wait,
                _ => return Err(err),
            };
            tracing::warn!(key = %claim.key, error = %err, "storing the result failed; sending it again");
            tokio::time::sleep(wait).await;
        }
    }

    /// A stored result returned to a duplicate (after the payload check).
    fn replay<T: DeserializeOwned, E>(
        &self,
        key: &str,
        hash: &str,
        stored_hash: &str,
        result: &[u8],
    ) -> Result<Run<T>, IdempotencyError<E>> {
        if !self.matches(hash, stored_hash) {
            return Err(IdempotencyError::PayloadMismatch { key: key.into() });
        }
        serde_json::from_slice(result)
            .map(Run::Replayed)
            .map_err(IdempotencyError::Result)
    }

    fn matches(&self, hash: &str, stored: &str) -> bool {
        !self.config.validate_payload || stored.is_empty() || hash == stored
    }

    /// `<namespace>#<key>`, or the namespace and the key's SHA-256 when it is long.
    fn stored_key(&self, key: &str) -> String {
        let full = format!("{}#{key}", self.config.namespace);
        if full.len() <= MAX_KEY_BYTES {
            return full;
        }
        format!(
            "{}#sha256:{}",
            self.config.namespace,
            hex::encode(Sha256::digest(key.as_bytes()))
        )
    }

    fn payload_hash<E>(&self, payload: &impl Serialize) -> Result<String, IdempotencyError<E>> {
        if !self.config.validate_payload {
            return Ok(String::new());
        }
        // serde_json's maps are sorted: one spelling per value.
        let value = serde_json::to_value(payload).map_err(IdempotencyError::Result)?;
        let bytes = serde_json::to_vec(&value).map_err(IdempotencyError::Result)?;
        Ok(hex::encode(&Sha256::digest(&bytes)[..16]))
    }

    fn cached(&self, key: &str, now_ms: u64) -> Option<Cached> {
        let mut cache = self.cache.as_ref()?.lock().ok()?;
        let hit = cache.get(key)?.clone();
        if hit.expires_at_s.saturating_mul(1000) <= now_ms {
            cache.pop(key);
            return None;
        }
        Some(hit)
    }

    fn remember(&self, key: &str, payload_hash: &str, result: Vec<u8>, expires_at_s: u64) {
        if let Some(Ok(mut cache)) = self.cache.as_ref().map(Mutex::lock) {
            cache.put(
                key.to_string(),
                Cached {
                    payload_hash: payload_hash.to_string(),
                    result,
                    expires_at_s,
                },
            );
        }
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
