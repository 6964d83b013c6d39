//! Idempotent counters: numeric deltas added to an item exactly once per idempotency key.
//!
//! # Invariant
//!
//! For every counter item and every counter name, the stored value is the sum of the deltas of
//! the **distinct** idempotency keys delivered for that item, provided every redelivery of a key
//! arrives within the *window* (below) of its first application. Retried SDK calls, lost
//! responses, redelivered batches, producer duplicates and concurrent invocations never count a
//! key twice. (A key delivered again with *different* deltas is still a duplicate: the first
//! delivery's deltas count.)
//!
//! # Writes
//!
//! No read before the write. Records are grouped by item; within a group, duplicates of the same
//! key are dropped and the rest is **coalesced**: one conditional `UpdateItem` adds the summed
//! deltas and the new keys' hashes, chunked at [`CounterConfig::max_keys_per_write`] keys so that
//! the condition stays within DynamoDB's expression limits (4 KB, 300 operators):
//!
//! ```text
//! SET   ctr_bucket = :b
//! ADD   logins :d0, authz :d1, ctr_keys_<b> :hashes
//! [REMOVE ctr_keys_<old>, …]                                   (only when the bucket rolls over)
//! IF    <bucket guard> AND NOT (contains(ctr_keys_<b>, :k0) OR contains(ctr_keys_<b-1>, :k0) OR …)
//! ```
//!
//! Write cost: one `UpdateItem` per item per batch (per chunk of keys), plus one failed call the
//! first time an item is written in a new bucket (the guard fails, `ALL_OLD` names the item's
//! bucket, the retry rolls it over). When the condition fails because some keys were already
//! applied (a redelivered or partially applied batch), `ReturnValuesOnConditionCheckFailure =
//! ALL_OLD` says which: they become `Duplicate` and the write is retried without them. A
//! redelivered batch therefore costs one failed call per item and chunk, never a read per record.
//! Each write is billed by the size of the item, keys included (a 100 KB item costs about 100
//! write units per update): coalescing keeps the number of writes per item low.
//!
//! # The window
//!
//! The list-with-trim of the published pattern (`SET h = list_append(h,:k) REMOVE h[0]`) is
//! rejected by DynamoDB ("Two document paths overlap"). Here the keys live in **time buckets**:
//! a bucket is [`CounterConfig::bucket_seconds`] long, and the keys applied while the item's
//! bucket is `b` go into the string set `ctr_keys_<b>`. The item keeps the last
//! `window_buckets` (W) buckets; the write that moves an item into a newer bucket `REMOVE`s the
//! buckets that fall out, in the same atomic update (distinct paths, so no overlap). Keys are
//! SHA-256 hashes of the idempotency key, truncated to 128 bits and written as 22 base64url
//! characters ([`KEY_BYTES`]).
//!
//! ```text
//!  time ──►   bucket b-2   │  bucket b-1   │  bucket b (now)
//!                (removed) │  checked      │  checked, new keys added here
//!             ◄───────────────── window_seconds = (W-1) × bucket_seconds ──►
//! ```
//!
//! * A key applied at time `t` is rejected at least until `t + window_seconds`
//!   (`window_seconds = (W-1) × bucket_seconds`). It stays in the item until a write moves the
//!   item W buckets past the key's bucket (at the earliest `W × bucket_seconds` after `t`);
//!   keys still present in a bucket about to be removed are treated as duplicates too.
//! * The item never holds more than W key buckets, so its size is bounded by the keys applied
//!   during W buckets (the capacity rule below).
//! * The item's bucket is the greatest bucket any writer's clock has reached (it never goes
//!   back): a writer whose clock is behind writes into the item's current bucket.
//! * **Past the window** a key is forgotten: a redelivery later than `window_seconds` after the
//!   first application may be counted again. Size the window above the longest redelivery
//!   delay: the template caps Kinesis record age (`MaximumRecordAgeInSeconds`) and the SQS
//!   retention period at the window.
//!
//! # Capacity
//!
//! The keys of one item must fit DynamoDB's 400 KB item limit. At start-up
//! ([`CounterConfig::validate`]):
//!
//! ```text
//! W × bucket_seconds × KEY_BYTES × max_keys_per_second (per item) + other_data_bytes ≤ item_budget_bytes
//! ```
//!
//! (plus the bucket attribute names), and a configuration that cannot fit is refused with a
//! message naming the figures. If an item still overflows (the real rate exceeded the declared
//! one), DynamoDB rejects the write (`ValidationException`, nothing applied): the chunk is split
//! in halves and retried, and a record that cannot fit even alone is **dead-lettered** with code
//! `item_full`, payload and idempotency key kept. No delta is lost and none is counted twice:
//! `ops dead-letters replay --function counter-writer` applies it once the old buckets have
//! rolled out (a replay of a key that did make it is a `Duplicate`).
//!
//! # Failure modes
//!
//! * Lost response (DynamoDB applied the write, the caller saw a 5xx or a timeout): the SDK's
//!   retry, or Lambda's redelivery, fails the condition on its own keys and ALL_OLD shows them
//!   present: `Duplicate`, never counted twice.
//! * Transient errors: the chunk's records (and their in-batch duplicates) are `Failed` and
//!   delivered again; other items and chunks go on.
//! * Contention (the bucket guard keeps failing because other writers roll the item over):
//!   bounded by [`MAX_CONDITION_ROUNDS`], then the records are `Failed` (transient).
//! * The deadline is close: items and chunks not yet started are `Deferred`.
//! * Malformed records (bad JSON, a missing key or idempotency key, a non-integer delta, a
//!   counter name that is a key or a protocol attribute) are dead-lettered.
//!
//! # Versioned writes
//!
//! The pattern's first half, for items that are replaced rather than incremented:
//! [`Counter::put_versioned`] writes attributes only if the item's version is the one the caller
//! read (`ctr_version`, with `ctr_updated` in epoch ms); a lost race is
//! [`VersionOutcome::Conflict`] (HTTP 412 / 409 for an API), and [`Counter::read_modify_write`]
//! retries read → change → conditional write a bounded number of times.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use futures::StreamExt;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::batch::Deadline;
use crate::batch::{Applied, Outcome, Protocol, RecordResult};
use crate::config::ConfigError;
use crate::ddb::error::{ErrorClass, StoreError};
use crate::ddb::item::{item_to_json, Item, ItemKey, MAX_ITEM_BYTES};
use crate::rejection::{Rejection, RejectionCode};

/// Default prefix of the protocol's own attributes (payloads cannot write names with it).
pub const DEFAULT_ATTRIBUTE_PREFIX: &str = "ctr_";
/// Default guaranteed duplicate window: 1 hour.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(3600);
/// Default number of buckets kept (the window is `W - 1` buckets long).
pub const DEFAULT_WINDOW_BUCKETS: u32 = 2;
/// Default declared rate of new keys per item and second.
pub const DEFAULT_MAX_KEYS_PER_SECOND: f64 = 1.0;
/// Default bytes of an item the keys may use in total with the other data (350 KiB: 50 KiB of
/// headroom under DynamoDB's limit).
pub const DEFAULT_ITEM_BUDGET_BYTES: usize = 350 * 1024;
/// Default allowance for the item's own data (key, counters, version).
pub const DEFAULT_OTHER_DATA_BYTES: usize = 4 * 1024;
/// Default number of items written at once.
pub const DEFAULT_CONCURRENCY: usize = 32;
/// Bytes of one stored key: 128 bits of SHA-256 as unpadded base64url.
pub const KEY_BYTES: usize = 22;
/// Counters one record may name.
pub const MAX_COUNTERS_PER_RECORD: usize = 20;
/// Distinct counters one write may add (the update expression stays small).
pub const MAX_COUNTERS_PER_WRITE: usize = 100;
/// Longest idempotency key accepted (bytes); it is hashed anyway.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 2048;
/// DynamoDB's limit on an expression's length.
pub const MAX_EXPRESSION_BYTES: usize = 4096;
/// DynamoDB's limit on operators and functions in one expression.
pub const MAX_EXPRESSION_OPERATORS: usize = 300;
/// Chunks of one item written at once. Chunks hold distinct keys, so concurrent writes would
/// be correct, but DynamoDB serialises the writes of an item anyway and each one rewrites the
/// whole item (keys included): measured on DynamoDB Local, concurrency only added contention.
pub const CHUNKS_AT_ONCE: usize = 1;
/// How many times one chunk is re-planned after a failed condition before giving up.
pub const MAX_CONDITION_ROUNDS: usize = 8;
/// DynamoDB's limit on an attribute name used through a placeholder.
const MAX_ATTRIBUTE_NAME_BYTES: usize = 255;

/// Guard of the first attempt: the item is in the writer's bucket, or has no bucket yet.
const GUARD_GUESS: &str = "(attribute_not_exists(#bk) OR #bk = :b)";
/// Guard when the item's bucket is known and is the target.
const GUARD_SAME: &str = "#bk = :b";
/// Guard of a rollover: the item is still in the bucket ALL_OLD showed.
const GUARD_ROLLOVER: &str = "#bk = :bold";
/// Guard when ALL_OLD showed no protocol state (absent item).
const GUARD_NEW: &str = "attribute_not_exists(#bk)";
/// One key-in-bucket test (placeholders filled in per key and bucket).
const TERM_CONTAINS: &str = "contains(#w{b},:k{k})";
/// Guard of a versioned write of a new item.
const CONDITION_VERSION_ABSENT: &str = "attribute_not_exists(#ver)";
/// Guard of a versioned write of an existing item.
const CONDITION_VERSION_IS: &str = "#ver = :expected";

/// Epoch seconds, injectable so that tests can move time.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    })
}

/// Settings of the counter protocol.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterConfig {
    /// The table written.
    pub table: String,
    /// Prefix of the protocol attributes (`<prefix>bucket`, `<prefix>keys_<b>`,
    /// `<prefix>version`, `<prefix>updated`).
    pub attribute_prefix: String,
    /// Duplicates are always rejected within this time of the first application.
    pub window: Duration,
    /// Buckets kept in the item (W ≥ 2); buckets are `window / (W - 1)` long.
    pub window_buckets: u32,
    /// Declared upper bound of new keys per item and second (capacity rule).
    pub max_keys_per_second: f64,
    /// Bytes of an item the protocol may plan for (≤ 400 KiB).
    pub item_budget_bytes: usize,
    /// Bytes reserved for the item's own data.
    pub other_data_bytes: usize,
    /// How many items are written at once.
    pub concurrency: usize,
}

/// What the capacity rule computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// Length of one bucket.
    pub bucket_seconds: u64,
    /// Longest time a key is kept (`W × bucket_seconds`).
    pub retention_seconds: u64,
    /// Worst-case bytes of keys (and their bucket attribute names) in one item.
    pub key_bytes: f64,
    /// `key_bytes + other_data_bytes`.
    pub worst_case_item_bytes: f64,
}

impl CounterConfig {
    /// Defaults for `table`.
    pub fn new(table: impl Into<String>) -> Self {
        CounterConfig {
            table: table.into(),
            attribute_prefix: DEFAULT_ATTRIBUTE_PREFIX.into(),
            window: DEFAULT_WINDOW,
            window_buckets: DEFAULT_WINDOW_BUCKETS,
            max_keys_per_second: DEFAULT_MAX_KEYS_PER_SECOND,
            item_budget_bytes: DEFAULT_ITEM_BUDGET_BYTES,
            other_data_bytes: DEFAULT_OTHER_DATA_BYTES,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }

    /// Length of one bucket: `window / (W - 1)`, rounded up to whole seconds.
    pub fn bucket_seconds(&self) -> u64 {
        let gaps = u64::from(self.window_buckets.saturating_sub(1)).max(1);
        self.window.as_secs().div_ceil(gaps).max(1)
    }

    /// The capacity rule's figures for this configuration.
    pub fn capacity(&self) -> Capacity {
        let bucket_seconds = self.bucket_seconds();
        let retention_seconds = bucket_seconds * u64::from(self.window_buckets);
        // Bucket attribute names: prefix + "keys_" + up to 20 digits, plus `<prefix>bucket`.
        let names = (self.attribute_prefix.len() + 25) * (self.window_buckets as usize + 1);
        let key_bytes =
            retention_seconds as f64 * KEY_BYTES as f64 * self.max_keys_per_second + names as f64;
        Capacity {
            bucket_seconds,
            retention_seconds,
            key_bytes,
            worst_case_item_bytes: key_bytes + self.other_data_bytes as f64,
        }
    }

    /// Keys per `UpdateItem` that keep the condition within DynamoDB's expression limits: each
    /// key costs W `contains` terms joined by `OR` (2 operators and about 24 bytes each).
    pub fn max_keys_per_write(&self) -> usize {
        let w = self.window_buckets.max(1) as usize;
        let by_operators = (MAX_EXPRESSION_OPERATORS - 12) / (2 * w);
        let by_length = (MAX_EXPRESSION_BYTES - 128) / (24 * w);
        by_operators.min(by_length).max(1)
    }

    /// Check the settings, including the capacity rule
    /// `W × bucket_seconds × KEY_BYTES × max_keys_per_second + other ≤ budget`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.table.len() < 3 {
            return Err(ConfigError::new(
                "COUNTER_TABLE",
                "a table name has at least 3 characters",
            ));
        }
        if self.attribute_prefix.is_empty()
            || self.attribute_prefix.len() > 64
            || !self
                .attribute_prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            return Err(ConfigError::new(
                "COUNTER_ATTRIBUTE_PREFIX",
                "must be 1 to 64 characters of [A-Za-z0-9_.-]",
            ));
        }
        if self.window_buckets < 2 || self.window_buckets > 24 {
            return Err(ConfigError::new(
                "COUNTER_WINDOW_BUCKETS",
                "must be between 2 and 24 (the window is W-1 buckets long)",
            ));
        }
        if self.window.as_secs() == 0 {
            return Err(ConfigError::new(
                "COUNTER_WINDOW_SECONDS",
                "must be at least 1 second",
            ));
        }
        if !(self.max_keys_per_second.is_finite() && self.max_keys_per_second > 0.0) {
            return Err(ConfigError::new(
                "COUNTER_MAX_KEYS_PER_SECOND",
                "must be a positive number",
            ));
        }
        if self.item_budget_bytes > MAX_ITEM_BYTES {
            return Err(ConfigError::new(
                "COUNTER_ITEM_BUDGET_BYTES",
                format!("must not exceed DynamoDB's item limit of {MAX_ITEM_BYTES} bytes"),
            ));
        }
        if self.concurrency == 0 {
            return Err(ConfigError::new(
                "COUNTER_CONCURRENCY",
                "must be at least 1",
            ));
        }
        let c = self.capacity();
        if c.worst_case_item_bytes > self.item_budget_bytes as f64 {
            let max_rate = (self.item_budget_bytes as f64 - self.other_data_bytes as f64).max(0.0)
                / (c.retention_seconds as f64 * KEY_BYTES as f64);
            return Err(ConfigError::new(
                "COUNTER_WINDOW_SECONDS",
                format!(
                    "the key window cannot fit in one item: {w} buckets × {b} s × {k} bytes × \
                     {r} keys/s per item = {kb:.0} bytes of keys, + {o} bytes of other data = \
                     {total:.0} > budget {budget} bytes. Shorten the window, use more buckets, \
                     lower COUNTER_MAX_KEYS_PER_SECOND (at most {max_rate:.4} fits) or split \
                     the counter over more items",
                    w = self.window_buckets,
                    b = c.bucket_seconds,
                    k = KEY_BYTES,
                    r = self.max_keys_per_second,
                    kb = c.key_bytes,
                    o = self.other_data_bytes,
                    total = c.worst_case_item_bytes,
                    budget = self.item_budget_bytes,
                ),
            ));
        }
        Ok(())
    }

    /// `<prefix>bucket`: the item's current bucket.
    pub fn bucket_attribute(&self) -> String {
        format!("{}bucket", self.attribute_prefix)
    }

    /// `<prefix>keys_<bucket>`: the keys applied while the item was in `bucket`.
    pub fn keys_attribute(&self, bucket: u64) -> String {
        format!("{}keys_{bucket}", self.attribute_prefix)
    }

    /// `<prefix>version`: the version of [`Counter::put_versioned`].
    pub fn version_attribute(&self) -> String {
        format!("{}version", self.attribute_prefix)
    }

    /// `<prefix>updated`: epoch ms of the last versioned write.
    pub fn updated_attribute(&self) -> String {
        format!("{}updated", self.attribute_prefix)
    }

    fn bucket_of_keys_attribute(&self, name: &str) -> Option<u64> {
        name.strip_prefix(&self.attribute_prefix)?
            .strip_prefix("keys_")?
            .parse()
            .ok()
    }
}

/// A parsed, validated counter record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterRecord {
    /// The counter item.
    pub key: ItemKey,
    /// Counter name → delta.
    pub add: BTreeMap<String, i64>,
    /// The producer's idempotency key.
    pub idempotency_key: String,
    /// Its stored form (see [`hash_key`]).
    pub hashed_key: String,
}

/// The outcome of one counter record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterOutcome {
    /// Its deltas were added by this invocation.
    Applied,
    /// Its idempotency key was already applied (earlier, by another invocation, by a write
    /// whose response was lost, or by an earlier record of the same batch).
    Duplicate,
}

impl Outcome for CounterOutcome {
    fn label(&self) -> &'static str {
        match self {
            CounterOutcome::Applied => "applied",
            CounterOutcome::Duplicate => "duplicate",
        }
    }
}

/// The outcome of a versioned write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionOutcome {
    /// Written; the item now has this version.
    Written {
        /// The new version.
        version: u64,
    },
    /// The item's version was not the expected one (nothing written).
    Conflict {
        /// The version found (`None`: the item has no version).
        current: Option<u64>,
    },
}

impl VersionOutcome {
    /// The HTTP status an API would answer: 200, or 412 Precondition Failed on a conflict
    /// (an API without `If-Match` may prefer 409).
    pub fn http_status(&self) -> u16 {
        match self {
            VersionOutcome::Written { .. } => 200,
            VersionOutcome::Conflict { .. } => 412,
        }
    }
}

/// The outcome of [`Counter::read_modify_write`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmwOutcome {
    /// Written after `attempts` tries.
    Written {
        /// The new version.
        version: u64,
        /// Tries used (1 = no conflict).
        attempts: usize,
    },
    /// Every try lost a race.
    GaveUp {
        /// Tries used.
        attempts: usize,
    },
}

/// The idempotency key as stored: the first 128 bits of its SHA-256, base64url, 22 characters.
pub fn hash_key(idempotency_key: &str) -> String {
    let digest = Sha256::digest(idempotency_key.as_bytes());
    base64url(&digest[..16])
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            let index = ((n >> (18 - 6 * i)) & 63) as usize;
            out.push(ALPHABET[index] as char);
        }
    }
    out
}

/// One distinct key of a batch, for one item: its deltas and the records carrying it.
#[derive(Debug, Clone)]
struct KeyEntry {
    hash: String,
    add: BTreeMap<String, i64>,
    /// Batch indices; the first is the record that counts, the others are in-batch duplicates.
    indices: Vec<usize>,
}

/// The records of one item in a batch: its distinct keys, and where each key is.
#[derive(Debug)]
struct ItemGroup {
    key: ItemKey,
    entries: Vec<KeyEntry>,
    by_hash: HashMap<String, usize>,
}

/// A written chunk: the entries applied, and those found already applied.
type Written = (Vec<KeyEntry>, Vec<KeyEntry>);

/// What writing one chunk gives.
type ChunkResult = Result<Written, ChunkError>;

/// Report every record of a chunk as deferred (the deadline is close).
fn defer(chunk: Vec<KeyEntry>, results: &mut Vec<(usize, RecordResult<CounterOutcome>)>) {
    for entry in chunk {
        for i in entry.indices {
            results.push((i, RecordResult::Deferred));
        }
    }
}

/// How the next write of a chunk is guarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Knowledge {
    /// Nothing read: assume the item is in the writer's bucket (or new).
    Guess,
    /// ALL_OLD showed the item's bucket (`None`: no protocol state).
    Known(Option<u64>),
}

/// Why a chunk could not be written.
#[derive(Debug)]
enum ChunkError {
    /// The item would exceed DynamoDB's size limit.
    ItemFull(String),
    /// Another error.
    Store(StoreError),
}

/// The counter protocol on one table.
#[derive(Clone)]
pub struct Counter {
    client: Client,
    config: CounterConfig,
    clock: Clock,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counter")
            .field("config", &self.config)
            .finish()
    }
}

impl Counter {
    /// The protocol on `config.table` with the system clock.
    pub fn new(client: Client, config: CounterConfig) -> Self {
        Counter {
            client,
            config,
            clock: system_clock(),
        }
    }

    /// The same protocol with another clock (tests move time with it).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The settings.
    pub fn config(&self) -> &CounterConfig {
        &self.config
    }

    /// The bucket the writer's clock is in.
    pub fn current_bucket(&self) -> u64 {
        (self.clock)() / self.config.bucket_seconds()
    }

    /// Parse a record body:
    /// `{"key":{"PK":"acct#42","SK":"2024-11-22"},"add":{"logins":3},"idempotencyKey":"…"}`.
    pub fn parse_record(&self, body: &[u8]) -> Result<CounterRecord, Rejection> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            Rejection::new(RejectionCode::BadJson, format!("the body is not JSON: {e}"))
        })?;
        let Some(obj) = value.as_object() else {
            return Err(Rejection::new(
                RejectionCode::NotAnObject,
                "the body must be a JSON object",
            ));
        };
        let key_json = obj
            .get("key")
            .ok_or_else(|| Rejection::new(RejectionCode::InvalidKey, "`key` is missing"))?;
        let key = ItemKey::from_json(key_json)
            .map_err(|m| Rejection::new(RejectionCode::InvalidKey, m))?;
        for name in key.json().keys() {
            self.check_not_reserved(name)?;
        }
        let idempotency_key = match obj.get("idempotencyKey") {
            Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_IDEMPOTENCY_KEY_BYTES => {
                s.clone()
            }
            Some(Value::String(s)) if !s.is_empty() => {
                return Err(Rejection::new(
                    RejectionCode::InvalidIdempotencyKey,
                    format!(
                        "`idempotencyKey` is {} bytes; at most {MAX_IDEMPOTENCY_KEY_BYTES}",
                        s.len()
                    ),
                ))
            }
            Some(_) => {
                return Err(Rejection::new(
                    RejectionCode::InvalidIdempotencyKey,
                    "`idempotencyKey` must be a non-empty string",
                ))
            }
            None => {
                return Err(Rejection::new(
                    RejectionCode::MissingIdempotencyKey,
                    "`idempotencyKey` is missing",
                ))
            }
        };
        let Some(Value::Object(fields)) = obj.get("add") else {
            return Err(Rejection::new(
                RejectionCode::InvalidAdd,
                "`add` must be an object of counter name → integer delta",
            ));
        };
        if fields.is_empty() || fields.len() > MAX_COUNTERS_PER_RECORD {
            return Err(Rejection::new(
                RejectionCode::InvalidAdd,
                format!(
                    "`add` names {} counters; between 1 and {MAX_COUNTERS_PER_RECORD}",
                    fields.len()
                ),
            ));
        }
        let mut add = BTreeMap::new();
        for (name, delta) in fields {
            if name.is_empty() || name.len() > MAX_ATTRIBUTE_NAME_BYTES {
                return Err(Rejection::new(
                    RejectionCode::InvalidAdd,
                    format!("counter names are 1 to {MAX_ATTRIBUTE_NAME_BYTES} bytes"),
                ));
            }
            self.check_not_reserved(name)?;
            if key.json().contains_key(name) {
                return Err(Rejection::new(
                    RejectionCode::KeyAttribute,
                    format!("`{name}` is a key attribute and cannot be a counter"),
                ));
            }
            let Some(d) = delta.as_i64() else {
                return Err(Rejection::new(
                    RejectionCode::InvalidDelta,
                    format!("the delta of `{name}` must be a 64-bit integer, got {delta}"),
                ));
            };
            add.insert(name.clone(), d);
        }
        Ok(CounterRecord {
            key,
            add,
            hashed_key: hash_key(&idempotency_key),
            idempotency_key,
        })
    }

    fn check_not_reserved(&self, name: &str) -> Result<(), Rejection> {
        if name.starts_with(&self.config.attribute_prefix) {
            return Err(Rejection::new(
                RejectionCode::ReservedAttribute,
                format!(
                    "`{name}` starts with `{}`, the prefix of the counter protocol's own \
                     attributes, and cannot be written by a payload",
                    self.config.attribute_prefix
                ),
            ));
        }
        Ok(())
    }

    /// Add one record's deltas exactly once (no coalescing): the outcome, or the error.
    pub async fn add(&self, record: &CounterRecord) -> Result<CounterOutcome, StoreError> {
        let entry = KeyEntry {
            hash: record.hashed_key.clone(),
            add: record.add.clone(),
            indices: vec![0],
        };
        let key_item = record.key.to_item()?;
        let calls = AtomicUsize::new(0);
        match self.write_chunk(&key_item, vec![entry], &calls).await {
            Ok((applied, _)) if !applied.is_empty() => Ok(CounterOutcome::Applied),
            Ok(_) => Ok(CounterOutcome::Duplicate),
            Err(ChunkError::Store(e)) => Err(e),
            Err(ChunkError::ItemFull(message)) => Err(StoreError::Sdk {
                operation: "UpdateItem",
                class: ErrorClass::InvalidRequest,
                code: "ItemFull".into(),
                message,
            }),
        }
    }

    /// Write one chunk of distinct keys of one item; returns (applied, duplicate) entries.
    async fn write_chunk(
        &self,
        key_item: &Item,
        chunk: Vec<KeyEntry>,
        calls: &AtomicUsize,
    ) -> Result<Written, ChunkError> {
        let mut pending = chunk;
        let mut duplicates = Vec::new();
        let mut knowledge = Knowledge::Guess;
        let mut old_buckets: Vec<u64> = Vec::new();
        for _ in 0..MAX_CONDITION_ROUNDS {
            if pending.is_empty() {
                return Ok((Vec::new(), duplicates));
            }
            let now = self.current_bucket();
            let (guard, target, bold) = match knowledge {
                Knowledge::Guess => (GUARD_GUESS, now, None),
                Knowledge::Known(None) => (GUARD_NEW, now, None),
                Knowledge::Known(Some(b)) if b >= now => (GUARD_SAME, b, None),
                Knowledge::Known(Some(b)) => (GUARD_ROLLOVER, now, Some(b)),
            };
            let w = u64::from(self.config.window_buckets);
            let oldest_kept = target.saturating_sub(w - 1);
            let removals: Vec<u64> = if bold.is_some() {
                old_buckets
                    .iter()
                    .copied()
                    .filter(|b| *b < oldest_kept)
                    .collect()
            } else {
                Vec::new()
            };
            let request = self.build_update(key_item, &pending, guard, target, bold, &removals);
            calls.fetch_add(1, Ordering::Relaxed);
            match request.send().await {
                Ok(_) => return Ok((pending, duplicates)),
                Err(err) => {
                    let old = match err.as_service_error() {
                        Some(UpdateItemError::ConditionalCheckFailedException(e)) => {
                            Some(e.item().cloned().unwrap_or_default())
                        }
                        _ => None,
                    };
                    let Some(old) = old else {
                        let is_size = err.as_service_error().is_some_and(|e| {
                            e.code() == Some("ValidationException")
                                && e.message().is_some_and(|m| m.contains("size"))
                        });
                        let store = StoreError::from_sdk("UpdateItem", err);
                        return Err(if is_size {
                            ChunkError::ItemFull(store.to_string())
                        } else {
                            ChunkError::Store(store)
                        });
                    };
                    let (bucket, present, buckets) = self.read_state(&old);
                    let (dup, rest): (Vec<KeyEntry>, Vec<KeyEntry>) =
                        pending.into_iter().partition(|e| present.contains(&e.hash));
                    duplicates.extend(dup);
                    pending = rest;
                    knowledge = Knowledge::Known(bucket);
                    old_buckets = buckets;
                }
            }
        }
        if pending.is_empty() {
            return Ok((Vec::new(), duplicates));
        }
        Err(ChunkError::Store(StoreError::Sdk {
            operation: "UpdateItem",
            class: ErrorClass::Transient,
            code: "ConditionContention".into(),
            message: format!(
                "the item's bucket kept changing under {MAX_CONDITION_ROUNDS} attempts; retry later"
            ),
        }))
    }

    /// From an ALL_OLD item: its bucket, every key hash it holds, and its bucket attributes.
    fn read_state(&self, old: &Item) -> (Option<u64>, BTreeSet<String>, Vec<u64>) {
        let bucket = old
            .get(&self.config.bucket_attribute())
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok());
        let mut present = BTreeSet::new();
        let mut buckets = Vec::new();
        for (name, value) in old {
            if let Some(b) = self.config.bucket_of_keys_attribute(name) {
                buckets.push(b);
                if let AttributeValue::Ss(keys) = value {
                    present.extend(keys.iter().cloned());
                }
            }
        }
        (bucket, present, buckets)
    }

    fn build_update(
        &self,
        key_item: &Item,
        pending: &[KeyEntry],
        guard: &str,
        target: u64,
        bold: Option<u64>,
        removals: &[u64],
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        let w = u64::from(self.config.window_buckets);
        let mut req = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(key_item.clone()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .expression_attribute_names("#bk", self.config.bucket_attribute())
            .expression_attribute_values(":b", AttributeValue::N(target.to_string()));
        if let Some(b) = bold {
            req = req.expression_attribute_values(":bold", AttributeValue::N(b.to_string()));
        }
        // #w0 is the target bucket (where new keys go), #w<i> the bucket i before it.
        let window: Vec<u64> = (0..w).filter_map(|i| target.checked_sub(i)).collect();
        for (i, b) in window.iter().enumerate() {
            req = req.expression_attribute_names(format!("#w{i}"), self.config.keys_attribute(*b));
        }
        let mut terms = Vec::with_capacity(pending.len() * window.len());
        let mut totals: BTreeMap<&str, i128> = BTreeMap::new();
        for (k, entry) in pending.iter().enumerate() {
            req = req.expression_attribute_values(
                format!(":k{k}"),
                AttributeValue::S(entry.hash.clone()),
            );
            for i in 0..window.len() {
                terms.push(
                    TERM_CONTAINS
                        .replace("{b}", &i.to_string())
                        .replace("{k}", &k.to_string()),
                );
            }
            for (name, delta) in &entry.add {
                *totals.entry(name.as_str()).or_default() += i128::from(*delta);
            }
        }
        let condition = format!("{guard} AND NOT ({})", terms.join(" OR "));
        let mut adds = vec!["#w0 :keys".to_string()];
        req = req.expression_attribute_values(
            ":keys",
            AttributeValue::Ss(pending.iter().map(|e| e.hash.clone()).collect()),
        );
        for (i, (name, total)) in totals.iter().enumerate() {
            adds.push(format!("#c{i} :d{i}"));
            req = req
                .expression_attribute_names(format!("#c{i}"), *name)
                .expression_attribute_values(
                    format!(":d{i}"),
                    AttributeValue::N(total.to_string()),
                );
        }
        let mut update = format!("SET #bk = :b ADD {}", adds.join(", "));
        if !removals.is_empty() {
            let names: Vec<String> = (0..removals.len()).map(|i| format!("#r{i}")).collect();
            for (i, b) in removals.iter().enumerate() {
                req = req
                    .expression_attribute_names(format!("#r{i}"), self.config.keys_attribute(*b));
            }
            update.push_str(" REMOVE ");
            update.push_str(&names.join(", "));
        }
        req.update_expression(update)
            .condition_expression(condition)
    }

    /// Write one item's distinct keys: chunks in order, halves on overflow.
    async fn write_item(
        &self,
        key: ItemKey,
        entries: Vec<KeyEntry>,
        deadline: Deadline,
        calls: &AtomicUsize,
    ) -> Vec<(usize, RecordResult<CounterOutcome>)> {
        let mut results = Vec::new();
        let key_item = match key.to_item() {
            Ok(item) => item,
            Err(e) => {
                let reason = Rejection::new(RejectionCode::InvalidKey, e.to_string());
                for entry in entries {
                    for i in entry.indices {
                        results.push((i, RecordResult::Rejected(reason.clone())));
                    }
                }
                return results;
            }
        };
        // The chunks of one item hold distinct keys: independent conditional writes, written
        // CHUNKS_AT_ONCE at a time (items themselves are written concurrently).
        let key_item = &key_item;
        let first_pass: Vec<(Vec<KeyEntry>, Option<ChunkResult>)> =
            futures::stream::iter(self.chunks(entries))
                .map(|chunk| async move {
                    if deadline.expired() {
                        return (chunk, None);
                    }
                    let copy = chunk.clone();
                    (copy, Some(self.write_chunk(key_item, chunk, calls).await))
                })
                .buffered(CHUNKS_AT_ONCE)
                .collect()
                .await;
        let mut halves = VecDeque::new();
        for (chunk, result) in first_pass {
            match result {
                Some(result) => self.settle(&key, chunk, result, &mut results, &mut halves),
                None => defer(chunk, &mut results),
            }
        }
        // Chunks that overflowed the item, retried in halves one at a time.
        while let Some(chunk) = halves.pop_front() {
            if deadline.expired() {
                defer(chunk, &mut results);
                continue;
            }
            let copy = chunk.clone();
            let result = self.write_chunk(key_item, chunk, calls).await;
            self.settle(&key, copy, result, &mut results, &mut halves);
        }
        results
    }

    /// Turn a chunk's result into record results (or into two halves to retry).
    fn settle(
        &self,
        key: &ItemKey,
        chunk: Vec<KeyEntry>,
        result: Result<Written, ChunkError>,
        results: &mut Vec<(usize, RecordResult<CounterOutcome>)>,
        halves: &mut VecDeque<Vec<KeyEntry>>,
    ) {
        match result {
            Ok((applied, duplicates)) => {
                let decided = applied
                    .into_iter()
                    .map(|e| (e, CounterOutcome::Applied))
                    .chain(
                        duplicates
                            .into_iter()
                            .map(|e| (e, CounterOutcome::Duplicate)),
                    );
                for (entry, outcome) in decided {
                    for (n, i) in entry.indices.into_iter().enumerate() {
                        // Later records with the same key in this batch are duplicates.
                        let o = if n == 0 {
                            outcome
                        } else {
                            CounterOutcome::Duplicate
                        };
                        results.push((i, RecordResult::Done(o)));
                    }
                }
            }
            Err(ChunkError::ItemFull(message)) if chunk.len() > 1 => {
                tracing::warn!(item = %key.canonical(), keys = chunk.len(), error = %message,
                    "counter item is full; retrying the chunk in halves");
                let mut first = chunk;
                let second = first.split_off(first.len() / 2);
                halves.push_front(second);
                halves.push_front(first);
            }
            Err(ChunkError::ItemFull(message)) => {
                tracing::error!(item = %key.canonical(), error = %message,
                    "counter item is full: the record is kept as a dead letter, replay it \
                     after the window rolls over");
                let reason = Rejection::new(
                    RejectionCode::ItemFull,
                    format!(
                        "the counter item {} has no room for another key ({message}); \
                         replay after the oldest bucket rolls out, or raise the capacity",
                        key.canonical()
                    ),
                );
                for entry in chunk {
                    for i in entry.indices {
                        results.push((i, RecordResult::Rejected(reason.clone())));
                    }
                }
            }
            Err(ChunkError::Store(err)) => {
                let message = err.to_string();
                let class = err.class();
                let mut first = Some(err);
                for entry in chunk {
                    for i in entry.indices {
                        let e = first.take().unwrap_or_else(|| StoreError::Sdk {
                            operation: "UpdateItem",
                            class,
                            code: "ChunkFailed".into(),
                            message: message.clone(),
                        });
                        results.push((
                            i,
                            if class == ErrorClass::InvalidRequest {
                                RecordResult::Rejected(Rejection::new(
                                    RejectionCode::RejectedByDynamodb,
                                    message.clone(),
                                ))
                            } else {
                                RecordResult::Failed(e)
                            },
                        ));
                    }
                }
            }
        }
    }

    /// Split an item's distinct keys into writes within the expression limits.
    fn chunks(&self, entries: Vec<KeyEntry>) -> Vec<Vec<KeyEntry>> {
        let max_keys = self.config.max_keys_per_write();
        let mut out: Vec<Vec<KeyEntry>> = Vec::new();
        let mut current: Vec<KeyEntry> = Vec::new();
        let mut names: BTreeSet<String> = BTreeSet::new();
        for entry in entries {
            let new_names = entry.add.keys().filter(|n| !names.contains(*n)).count();
            if !current.is_empty()
                && (current.len() >= max_keys || names.len() + new_names > MAX_COUNTERS_PER_WRITE)
            {
                out.push(std::mem::take(&mut current));
                names.clear();
            }
            names.extend(entry.add.keys().cloned());
            current.push(entry);
        }
        if !current.is_empty() {
            out.push(current);
        }
        out
    }

    /// Read one counter item (strongly consistent) as JSON, protocol attributes included.
    pub async fn get(&self, key: &ItemKey) -> Result<Option<Map<String, Value>>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(key.to_item()?))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        match out.item {
            Some(item) => Ok(Some(item_to_json(item)?)),
            None => Ok(None),
        }
    }

    /// Set `attributes` on the item only if its version is `expected` (`None`: the item has no
    /// version yet); the version is then `expected + 1` and `<prefix>updated` the time in ms.
    /// Attribute names go through placeholders; key and protocol attributes are refused.
    pub async fn put_versioned(
        &self,
        key: &ItemKey,
        expected: Option<u64>,
        attributes: &Map<String, Value>,
    ) -> Result<VersionOutcome, StoreError> {
        let version = expected.map_or(1, |v| v + 1);
        let mut req = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(key.to_item()?))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .expression_attribute_names("#ver", self.config.version_attribute())
            .expression_attribute_names("#upd", self.config.updated_attribute())
            .expression_attribute_values(":ver", AttributeValue::N(version.to_string()))
            .expression_attribute_values(
                ":upd",
                AttributeValue::N(((self.clock)().saturating_mul(1000)).to_string()),
            );
        let mut sets = vec!["#ver = :ver".to_string(), "#upd = :upd".to_string()];
        for (i, (name, value)) in attributes.iter().enumerate() {
            if name.starts_with(&self.config.attribute_prefix) || key.json().contains_key(name) {
                return Err(StoreError::Sdk {
                    operation: "UpdateItem",
                    class: ErrorClass::InvalidRequest,
                    code: "ReservedAttribute".into(),
                    message: format!("`{name}` is a key or protocol attribute"),
                });
            }
            sets.push(format!("#a{i} = :a{i}"));
            req = req
                .expression_attribute_names(format!("#a{i}"), name)
                .expression_attribute_values(
                    format!(":a{i}"),
                    serde_dynamo::to_attribute_value(value)?,
                );
        }
        req = match expected {
            None => req.condition_expression(CONDITION_VERSION_ABSENT),
            Some(v) => req
                .condition_expression(CONDITION_VERSION_IS)
                .expression_attribute_values(":expected", AttributeValue::N(v.to_string())),
        };
        match req
            .update_expression(format!("SET {}", sets.join(", ")))
            .send()
            .await
        {
            Ok(_) => Ok(VersionOutcome::Written { version }),
            Err(err) => match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(e)) => {
                    Ok(VersionOutcome::Conflict {
                        current: e
                            .item()
                            .and_then(|i| i.get(&self.config.version_attribute()))
                            .and_then(|v| v.as_n().ok())
                            .and_then(|n| n.parse().ok()),
                    })
                }
                _ => Err(StoreError::from_sdk("UpdateItem", err)),
            },
        }
    }

    /// Read the item, let `change` compute the attributes to set from it, and write them with
    /// [`Counter::put_versioned`]; on a conflict start again, at most `max_attempts` times.
    pub async fn read_modify_write<F>(
        &self,
        key: &ItemKey,
        max_attempts: usize,
        mut change: F,
    ) -> Result<RmwOutcome, StoreError>
    where
        F: FnMut(Option<&Map<String, Value>>) -> Map<String, Value>,
    {
        let version_attribute = self.config.version_attribute();
        for attempt in 1..=max_attempts {
            let current = self.get(key).await?;
            let expected = current
                .as_ref()
                .and_then(|c| c.get(&version_attribute))
                .and_then(Value::as_u64);
            let attributes = change(current.as_ref());
            match self.put_versioned(key, expected, &attributes).await? {
                VersionOutcome::Written { version } => {
                    return Ok(RmwOutcome::Written {
                        version,
                        attempts: attempt,
                    })
                }
                VersionOutcome::Conflict { .. } => {
                    let backoff = 5u64 << attempt.min(6);
                    tokio::time::sleep(Duration::from_millis(backoff)).await;
                }
            }
        }
        Ok(RmwOutcome::GaveUp {
            attempts: max_attempts,
        })
    }
}

impl Protocol for Counter {
    type Record = CounterRecord;
    type Outcome = CounterOutcome;

    fn parse(&self, body: &[u8]) -> Result<CounterRecord, Rejection> {
        self.parse_record(body)
    }

    async fn apply(
        &self,
        records: Vec<(usize, CounterRecord)>,
        deadline: Deadline,
    ) -> Applied<CounterOutcome> {
        // Group by item (first-appearance order), then by idempotency key within the item.
        let mut order: Vec<String> = Vec::new();
        let mut groups: HashMap<String, ItemGroup> = HashMap::new();
        for (i, record) in records {
            let id = record.key.canonical().to_string();
            let ItemGroup {
                entries, by_hash, ..
            } = groups.entry(id.clone()).or_insert_with(|| {
                order.push(id);
                ItemGroup {
                    key: record.key.clone(),
                    entries: Vec::new(),
                    by_hash: HashMap::new(),
                }
            });
            match by_hash.get(&record.hashed_key) {
                Some(&at) => entries[at].indices.push(i),
                None => {
                    by_hash.insert(record.hashed_key.clone(), entries.len());
                    entries.push(KeyEntry {
                        hash: record.hashed_key,
                        add: record.add,
                        indices: vec![i],
                    });
                }
            }
        }
        let calls = AtomicUsize::new(0);
        let calls_ref = &calls;
        let results: Vec<Vec<(usize, RecordResult<CounterOutcome>)>> =
            futures::stream::iter(order.into_iter().filter_map(|id| groups.remove(&id)))
                .map(|ItemGroup { key, entries, .. }| async move {
                    if deadline.expired() {
                        return entries
                            .into_iter()
                            .flat_map(|e| e.indices)
                            .map(|i| (i, RecordResult::Deferred))
                            .collect();
                    }
                    self.write_item(key, entries, deadline, calls_ref).await
                })
                .buffer_unordered(self.config.concurrency)
                .collect()
                .await;
        Applied {
            results: results.into_iter().flatten().collect(),
            write_calls: calls.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter() -> Counter {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        Counter::new(Client::from_conf(conf), CounterConfig::new("counters"))
    }

    fn code(body: &str) -> String {
        match counter().parse_record(body.as_bytes()) {
            Ok(_) => "ok".into(),
            Err(r) => r.code.to_string(),
        }
    }

    #[test]
    fn each_malformed_kind_has_its_code() {
        let ok =
            r#"{"key":{"PK":"a","SK":"d"},"add":{"logins":3,"authz":-1},"idempotencyKey":"x"}"#;
        assert_eq!(code(ok), "ok");
        assert_eq!(code("{nope"), "bad_json");
        assert_eq!(code("3"), "not_an_object");
        assert_eq!(
            code(r#"{"add":{"n":1},"idempotencyKey":"x"}"#),
            "invalid_key"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{"n":1}}"#),
            "missing_idempotency_key"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{"n":1},"idempotencyKey":7}"#),
            "invalid_idempotency_key"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{},"idempotencyKey":"x"}"#),
            "invalid_add"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{"n":1.5},"idempotencyKey":"x"}"#),
            "invalid_delta"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{"ctr_bucket":1},"idempotencyKey":"x"}"#),
            "reserved_attribute"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{"PK":1},"idempotencyKey":"x"}"#),
            "key_attribute"
        );
    }

    #[test]
    fn keys_hash_to_a_fixed_size() {
        assert_eq!(hash_key("a").len(), KEY_BYTES);
        assert_eq!(hash_key(&"long".repeat(500)).len(), KEY_BYTES);
        assert_ne!(hash_key("a"), hash_key("b"));
        assert_eq!(base64url(b"\xff\xff\xff"), "____");
        assert_eq!(base64url(b"Ma"), "TWE");
    }

    #[test]
    fn default_configuration_fits_and_chunks_within_expression_limits() {
        let c = CounterConfig::new("counters");
        assert!(c.validate().is_ok());
        assert_eq!(c.bucket_seconds(), 3600);
        assert_eq!(c.capacity().retention_seconds, 7200);
        assert!(c.max_keys_per_write() >= 50);
        let w = c.window_buckets as usize;
        let terms = c.max_keys_per_write() * w;
        assert!(terms * 24 + 128 <= MAX_EXPRESSION_BYTES);
        assert!(terms * 2 + 12 <= MAX_EXPRESSION_OPERATORS);
    }
}
