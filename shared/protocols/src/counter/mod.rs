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
//!   delivered again (a chunk of several records gives each of them a [`StoreError::Shared`]
//!   of the one error); other items and chunks go on.
//! * DynamoDB refuses a chunk as invalid for another reason than the item size: its records
//!   are dead-lettered with code `rejected_by_dynamodb`.
//! * Contention (the bucket guard keeps failing because other writers roll the item over):
//!   bounded by [`MAX_CONDITION_ROUNDS`], then the records are `Failed` with
//!   [`StoreError::Contention`] (transient).
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
//!
//! # Layout
//!
//! * `config`: [`CounterConfig`], the capacity rule, the protocol's attribute names.
//! * `record`: [`CounterRecord`], record parsing and validation, [`hash_key`].
//! * `update`: the conditional `UpdateItem` (bucket guards, `contains` terms, chunking).
//! * `write`: grouping a batch by item and key, writing items and chunks, the
//!   [`Protocol`](crate::Protocol) impl.
//! * `settle`: [`CounterOutcome`], and each chunk's result turned into one result per record.
//! * `versioned`: [`Counter::put_versioned`] and [`Counter::read_modify_write`].
//!
//! Time comes from a [`Clock`] (epoch milliseconds; buckets use whole seconds), injectable
//! with [`Counter::with_clock`].

mod config;
mod layout;
mod record;
mod settle;
mod update;
mod versioned;
mod write;

use aws_sdk_dynamodb::Client;
use serde_json::{Map, Value};

use crate::ddb::item::item_to_json;
use crate::ddb::{Clock, ItemKey, StoreError};

pub use config::{
    Capacity, CounterConfig, DEFAULT_ATTRIBUTE_PREFIX, DEFAULT_CONCURRENCY,
    DEFAULT_ITEM_BUDGET_BYTES, DEFAULT_MAX_KEYS_PER_SECOND, DEFAULT_OTHER_DATA_BYTES,
    DEFAULT_WINDOW, DEFAULT_WINDOW_BUCKETS, KEY_BYTES, MAX_EXPRESSION_BYTES,
    MAX_EXPRESSION_OPERATORS, MAX_WINDOW_BUCKETS, MAX_WINDOW_SECONDS,
};
pub use layout::{Bucket, BucketName, TRUSTED_BUCKETS};
pub use record::{
    hash_key, CounterRecord, MAX_COUNTERS_PER_RECORD, MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_REJECTION_BYTES,
};
pub use settle::CounterOutcome;
pub use update::MAX_COUNTERS_PER_WRITE;
pub use versioned::{RmwOutcome, VersionOutcome};
pub use write::{CHUNKS_AT_ONCE, MAX_CONDITION_ROUNDS};

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
            clock: Clock::system(),
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

    /// The bucket the writer's clock is in: new keys go there (its start and `until` are
    /// epoch seconds).
    pub fn current_bucket(&self) -> Bucket {
        layout::Grid::of(&self.config).bucket_at(self.clock.now_secs())
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
}
