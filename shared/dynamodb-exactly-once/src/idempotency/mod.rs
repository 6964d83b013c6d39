//! Idempotency for any async function: a run per operation and key, its result returned to
//! every duplicate. Needs the crate feature `idempotency`; no Lambda runtime is involved, so
//! a container's queue consumer (ECS, Kafka) uses it as it is.
//!
//! Wrap a call that must happen once per key ("charge this order", "send this email"); the
//! operation names the call site, so two effects of one message each run once:
//!
//! ```no_run
//! use dynamodb_exactly_once::idempotency::{
//!     DynamoDbPersistence, Idempotency, IdempotencyConfig, Run,
//! };
//! # async fn charge(order: &str) -> Result<String, std::io::Error> { Ok("receipt".into()) }
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let config = IdempotencyConfig::builder("payments-consumer").build()?;
//! let idempotency = Idempotency::new(DynamoDbPersistence::new(client, "Idempotency"), config);
//! // A message a Kafka or SQS consumer received (perhaps for the second time).
//! let order = serde_json::json!({"orderId": "o-1", "amount": 250});
//! match idempotency
//!     .call("charge", "o-1")
//!     .payload(&order)
//!     .run(|| charge("o-1"))
//!     .await?
//! {
//!     Run::Ran(receipt) => println!("charged: {receipt}"),
//!     Run::Replayed(receipt) => println!("a duplicate, charged before: {receipt}"),
//!     other => println!("{other:?}"),
//! }
//! # Ok(()) }
//! ```
//!
//! The Lambda edge (`dynamodb-exactly-once-lambda`) re-exports this module as its
//! `idempotency` and adds what needs a processor record: the key taken from the record
//! (`KeySource`), `run_record`, and a `tower::Layer`.
//!
//! # Invariant
//! For an operation and key, at most one run is in progress at a time, and once a run
//! completed, every call until the record expires ([`IdempotencyConfig::expires_after`]
//! after the completion) is answered from the stored record ([`Run::Replayed`]) without
//! running the function. A run **claims** the key (in progress until the invocation's
//! deadline, or [`IdempotencyConfig::in_progress_expiry`] without one, however short
//! `expires_after` is), runs the function, and stores its result; a function that fails or
//! panics **releases** the key (a retry runs again). A duplicate that finds the key in
//! progress is [`IdempotencyError::InProgress`] (retryable); one with another payload is
//! [`IdempotencyError::PayloadMismatch`] (not retryable: a producer bug).
//!
//! **Exactly once** holds while a run finishes within its claim. A run whose process dies
//! (a timeout, a crash) leaves the key in progress until its claim expires, then a retry runs
//! the function again. A run cut off at its deadline has its future dropped: tasks it
//! spawned and requests already sent are not stopped, and may land after another run took
//! the key over. Pass the key on to services that take one (payment APIs do). A run that
//! outlives its claim and finds the key taken over is [`Run::NotStored`]: its value is not
//! the stored one, and it is never cached.
//!
//! # Cost
//! A new key: one conditional `PutItem` and one `UpdateItem` (1 WCU each for results up to
//! ~900 bytes). A duplicate: one failed conditional `PutItem` returning the stored record
//! (`ALL_OLD`; AWS bills it by the stored record's size, 1 WCU per KB); **none** when the
//! process has it in its cache ([`IdempotencyConfig::cache_keys`],
//! [`IdempotencyConfig::cache_bytes`]). A failure: one `DeleteItem` more.
//!
//! # Failure modes
//! * The table is unavailable: [`IdempotencyError::Store`] (retryable as the error says);
//!   the function did not run.
//! * The result cannot be serialized (a map with non-string keys): the effect ran, so the
//!   key is kept, recorded as completed without a value (logged, counted in
//!   [`IdempotencyStats::result_not_serialized`]); duplicates are
//!   [`Run::ReplayedWithoutValue`]. A payload that cannot be serialized is
//!   [`IdempotencyError::Result`] (the function did not run). A stored result the
//!   caller's type cannot read (a deploy changed it) is [`Run::ReplayedWithoutValue`]: the
//!   run completed; logged and counted.
//! * A result too large for one item (400 KB with the record's attributes) is recorded as
//!   completed without it: duplicates are [`Run::ReplayedWithoutValue`].
//! * The completion write fails after the function ran: sent again, with backoff, while the
//!   claim holds the key (up to 8 more times); if it still fails, [`Run::NotStored`], logged
//!   and counted ([`IdempotencyStats::result_not_stored`]; the Lambda edge prints the EMF
//!   count `IdempotencyResultNotStored`), and the key stays in progress until its
//!   claim expires (a later duplicate may then run again).

mod builder;
mod cache;
mod call;
mod config;
mod dynamodb;
mod hash;
mod java_text;
mod js_json;
mod key;
mod names;
mod persistence;
mod run;
mod stats;

pub use builder::DynamoDbPersistenceBuilder;
pub use call::Call;
pub use config::{
    IdempotencyConfig, IdempotencyConfigBuilder, MissingKey, PayloadCheck, DISABLED_ENV,
    MAX_KEY_BYTES,
};
pub use dynamodb::{DynamoDbPersistence, MAX_ITEM_BYTES};
pub use hash::RecordFormat;
pub use key::KeySourceError;
#[doc(hidden)]
pub use key::RecordKey;
pub use names::AttributeNames;
pub use persistence::{
    Claim, ClaimRequest, Completion, InMemory, Persistence, Status, StoredRecord,
};
pub use stats::IdempotencyStats;

use crate::{ErrorClass, StoreError};

/// How a call ended.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a replay or a result not stored is not an error; handle it"]
pub enum Run<T> {
    /// The function ran in this call, and its result is the stored one.
    Ran(T),
    /// A duplicate: the stored result of the run that completed earlier.
    Replayed(T),
    /// The function ran in this call, but its result is not the stored one: the key was
    /// taken over after this run's claim expired, the completion could not be written, or
    /// the record had no key ([`MissingKey::Run`]). Another delivery may get another value.
    NotStored(T),
    /// A duplicate of a run that completed, whose result cannot be given: too large to
    /// keep, or not readable by this type. The function did not run.
    ReplayedWithoutValue(NoValue),
}

/// Why a completed run's result cannot be given.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoValue {
    /// The result was too large for one item; only its completion was recorded.
    NotKept,
    /// The stored result does not deserialize into this type (e.g. changed by a deploy).
    Unreadable {
        /// The deserializer's message.
        error: String,
    },
}

impl<T> Run<T> {
    /// The value, when there is one.
    pub fn value(self) -> Option<T> {
        match self {
            Run::Ran(v) | Run::Replayed(v) | Run::NotStored(v) => Some(v),
            Run::ReplayedWithoutValue(_) => None,
        }
    }

    /// Whether this call was a duplicate (the function did not run).
    pub fn is_replayed(&self) -> bool {
        matches!(self, Run::Replayed(_) | Run::ReplayedWithoutValue(_))
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
    /// The key was seen with another payload, or under another operation.
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
    /// A payload could not be serialized (the function did not run).
    #[error("idempotency payload: {0}")]
    Result(#[source] serde_json::Error),
    /// The tower layer only: the key's run completed earlier, but its response cannot be
    /// given ([`Run::ReplayedWithoutValue`]); the service was not called.
    #[error("the key {key:?} completed earlier; its stored response cannot be given: {why:?}")]
    Completed {
        /// The request's key.
        key: String,
        /// Why.
        why: NoValue,
    },
    /// The record or request gave no usable key (the edge's `KeySource`), or the operation is not
    /// usable; the function did not run.
    #[error(transparent)]
    Key(KeySourceError),
}

impl<E> IdempotencyError<E> {
    /// Whether retrying the call later can succeed (the function's own errors: `None`, the
    /// caller knows).
    pub fn is_retryable(&self) -> Option<bool> {
        match self {
            IdempotencyError::InProgress { .. } => Some(true),
            IdempotencyError::PayloadMismatch { .. }
            | IdempotencyError::Result(_)
            | IdempotencyError::Completed { .. }
            | IdempotencyError::Key(_) => Some(false),
            IdempotencyError::Store(e) => Some(e.class() != ErrorClass::InvalidRequest),
            IdempotencyError::Handler(_) => None,
        }
    }
}

/// The layer: runs a function once per operation and key over a [`Persistence`].
#[derive(Debug)]
pub struct Idempotency<P> {
    persistence: P,
    config: IdempotencyConfig,
    cache: cache::Cache,
    counters: stats::Counters,
}

impl<P: Persistence> Idempotency<P> {
    /// The layer over `persistence`.
    pub fn new(persistence: P, config: IdempotencyConfig) -> Self {
        Idempotency {
            cache: cache::Cache::new(config.cache_keys, config.cache_bytes),
            persistence,
            config,
            counters: stats::Counters::default(),
        }
    }

    /// The store.
    pub fn persistence(&self) -> &P {
        &self.persistence
    }

    /// The settings.
    pub fn config(&self) -> &IdempotencyConfig {
        &self.config
    }

    /// What this layer did since it was built (replays, in-progress refusals, results not
    /// stored, ...).
    pub fn stats(&self) -> IdempotencyStats {
        self.counters.snapshot()
    }

    /// Call `hook` each time a run's result is not stored (the Lambda edge prints its EMF
    /// count there).
    #[doc(hidden)]
    pub fn on_result_not_stored(mut self, hook: fn()) -> Self {
        self.counters.on_not_stored = Some(hook);
        self
    }
}
