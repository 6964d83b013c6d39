//! Idempotent counters: numeric deltas added to an item exactly once per idempotency key.
//!
//! # Invariant
//!
//! For every counter item and every counter name, the stored value is the sum of the deltas of
//! the **distinct** idempotency keys delivered for that item, provided every redelivery of a key
//! arrives within the *window* (below) of its first application. Retried SDK calls, lost
//! responses, redelivered batches, producer duplicates, concurrent invocations, a change of the
//! window settings and writers running with different settings never count a key twice.
//!
//! A key delivered again with *different* deltas still counts once (the first delivery's
//! deltas). Within one batch this is always detected and reported as
//! [`CounterOutcome::ConflictingDuplicate`] (label `conflicting_duplicate`, with a WARN log
//! naming the key's hash, never the payload). Across deliveries it is **not** detectable: the
//! item keeps only the key's hash, not its deltas, so a later delivery with other deltas is a
//! plain [`CounterOutcome::Duplicate`] (storing a fingerprint of the deltas per key would double
//! the item's key bytes).
//!
//! # Writes
//!
//! No read before the write. Records are grouped by item; within a group, records of the same
//! key count once and the rest is **coalesced**: one conditional `UpdateItem` adds the summed
//! deltas and the new keys' hashes, chunked at [`CounterConfig::max_keys_per_write`] keys so that
//! the condition stays within DynamoDB's expression limits (4 KB, 300 operators):
//!
//! ```text
//! SET   ctr_bucket = :layout                                   (the item's list of buckets)
//! ADD   logins :d0, authz :d1, ctr_keys_<start>_<until> :hashes        (the writer's bucket)
//! [REMOVE ctr_keys_<s>_<u>, …]                           (buckets whose keys have expired)
//! IF    ctr_bucket = :layout_read AND NOT (contains(<bucket 1>, :k0) OR contains(<bucket 2>, :k0) OR …)
//! ```
//!
//! The first write of a batch does not know the item's layout: it is guarded by "no layout, or
//! one of the W layouts these settings give in steady state" (the writer's current bucket and
//! the ones just before it), which holds for a new item and for an item written in every
//! bucket. Otherwise the guard fails once and `ReturnValuesOnConditionCheckFailure = ALL_OLD`
//! shows the item: its layout, and which keys are already applied (they become `Duplicate`);
//! the write is planned again on what it showed. A write that succeeded tells the item's next
//! chunk the exact layout. Write cost: one `UpdateItem` per item per batch (per chunk of keys),
//! plus one failed call when the layout was not guessed (typically the first write of an item
//! in a new bucket). A redelivered batch costs one failed call per item and chunk, never a read
//! per record. When an item holds more buckets than W (settings changing, or a writer with
//! other settings), fewer keys fit one condition and a chunk is written in several updates.
//! Each write is billed by the size of the item, keys included (a 100 KB item costs about 100
//! write units per update): coalescing keeps the number of writes per item low.
//!
//! # The window
//!
//! The list-with-trim of the published pattern (`SET h = list_append(h,:k) REMOVE h[0]`) is
//! rejected by DynamoDB ("Two document paths overlap"). Here the keys live in **time buckets**
//! named by absolute epoch seconds. A writer's bucket spans [`CounterConfig::bucket_seconds`]
//! (`window / (W - 1)`) of its clock; the keys applied while its clock is in
//! `[start, start + bucket_seconds)` go into the string set `ctr_keys_<start>_<until>`, with
//! `until = start + W × bucket_seconds`: the time until which they must be kept. Keys are
//! SHA-256 hashes of the idempotency key, truncated to 128 bits and written as 22 base64url
//! characters ([`KEY_BYTES`]).
//!
//! ```text
//!  time ──►   ctr_keys_<b-2·len>_…  │  ctr_keys_<b-len>_…   │  ctr_keys_<b>_<b+W·len> (now)
//!                (until passed:     │  checked              │  checked, new keys added here
//!                 removed)          │                       │
//!             ◄────────────── window_seconds = (W-1) × bucket_seconds ──►
//! ```
//!
//! * A key applied at time `t` is rejected at least until `t + window_seconds`: its bucket's
//!   `until` is at least that. Every write tests its keys against *every* bucket of the item
//!   (the guard pins the layout it read), whoever wrote them and with whatever settings.
//! * A bucket is removed by the first write that finds its `until` passed; a key still present
//!   in a bucket about to be removed counts as a duplicate too. In steady state an item holds
//!   W buckets (W + 1 right after an idle gap; see below), so its size is bounded by the keys
//!   applied during W buckets (the capacity rule below).
//! * **Settings changes** (another window or W, a redeployment, or two deployments at once):
//!   every writer writes into its own bucket and no bucket name depends on the settings of its
//!   reader, so the keys of the old settings stay until the old `until` (the *old* window is
//!   kept) and the new settings roll over on their own grid at once: nothing is ever stuck in
//!   one bucket.
//! * **Clock skew.** A writer whose clock is behind by `δ` keeps its keys `window - δ` as seen
//!   by the others' clocks; it never removes anything a correct clock would keep. A writer
//!   whose clock is ahead by `δ ≤ 2 × bucket_seconds` may remove buckets up to `δ` early. A
//!   writer more than [`TRUSTED_BUCKETS`] of its buckets ahead of the newest bucket *another*
//!   write started does not trust its clock: it removes only what had expired by that newest
//!   start, so a clock that jumps far ahead cannot evict keys still inside the window of the
//!   others (an item idle for longer than two buckets looks the same and is cleaned one write
//!   later). A writer that *keeps* writing on a clock far ahead makes its own buckets the
//!   evidence after a bucket of its time: keep clocks synchronised (Lambda's are).
//! * **Past the window** a key is forgotten: a redelivery later than `window_seconds` after the
//!   first application may be counted again. Size the window above the longest redelivery
//!   delay: the template caps Kinesis record age (`MaximumRecordAgeInSeconds`) and the SQS
//!   retention period at the window.
//! * **The earlier layout** (`ctr_bucket` a number, buckets `ctr_keys_<n>` numbered
//!   `now / bucket_seconds`) is read as it is: its keys are duplicates, and the first write
//!   records in the layout how long its buckets stay (`L<n>_<until>`: a full window of the
//!   writer's settings, or longer when the old bucket number says the old buckets may have
//!   been longer), then removes them once that has passed. Writers of the earlier version
//!   find a string in `ctr_bucket`: their guard keeps failing, their records fail (retryable)
//!   and are delivered again until the new version handles them; they never count a key twice.
//!
//! # Capacity
//!
//! The keys of one item must fit DynamoDB's 400 KB item limit. At start-up
//! ([`CounterConfig::validate`]):
//!
//! ```text
//! W × bucket_seconds × KEY_BYTES × max_keys_per_second (per item) + names + other_data_bytes ≤ item_budget_bytes
//! ```
//!
//! where `names` counts W + 1 bucket attribute names and their layout entries. A configuration
//! that cannot fit is refused with a message naming the figures and the greatest rate that
//! fits ([`CounterConfig::max_fitting_keys_per_second`], rounded down, so that it passes);
//! windows above [`MAX_WINDOW_SECONDS`] are refused outright (no arithmetic on absurd settings).
//! The rule covers the steady state; right after an idle gap, while settings change, or with a
//! writer far ahead, an item briefly holds one bucket more (the budget's headroom under 400 KB
//! absorbs it at the declared rate). If an item still overflows (the real rate exceeded the
//! declared one), DynamoDB rejects the write (`ValidationException`, nothing applied): the
//! chunk is split in halves and retried, and a record that cannot fit even alone is
//! **dead-lettered** with code `item_full`, payload and idempotency key kept. No delta is lost
//! and none is counted twice: `ops dead-letters replay --function counter-writer` applies it
//! once the old buckets have rolled out (a replay of a key that did make it is a `Duplicate`).
//!
//! # Failure modes
//!
//! * Lost response (DynamoDB applied the write, the caller saw a 5xx or a timeout): the SDK's
//!   retry, or Lambda's redelivery, fails the condition on its own keys and ALL_OLD shows them
//!   present: `Duplicate`, never counted twice.
//! * Transient errors: the chunk's unwritten records (and their in-batch duplicates) are
//!   `Failed` and delivered again (a chunk of several records gives each of them a
//!   [`RecordFailure::Shared`](crate::batch::RecordFailure::Shared) of the one error); what the chunk wrote before stays decided; other
//!   items and chunks go on.
//! * DynamoDB refuses a chunk as invalid (a counter that is a string on the item, a key that
//!   does not match the table, …): the chunk is split in halves down to the single record, so
//!   only the record at fault is dead-lettered (`rejected_by_dynamodb`) and the others apply.
//!   A replay of dead letters goes through the same protocol and isolates it the same way.
//! * Contention (the layout keeps changing under concurrent writers): bounded by
//!   [`MAX_CONDITION_ROUNDS`] failed conditions, then the remaining records are `Failed` with
//!   [`StoreError::Contention`] (transient).
//! * The deadline is close: items and chunks not yet started are `Deferred`.
//! * Malformed records (bad JSON, a missing key or idempotency key, a non-integer delta, a
//!   counter name that is a key or a protocol attribute) are dead-lettered. Rejection messages
//!   never echo a value beyond a few dozen characters (names by a bounded prefix, values by
//!   type and size) and stay under [`MAX_REJECTION_BYTES`].
//!
//! # Versioned writes
//!
//! The pattern's first half, for items that are replaced rather than incremented:
//! [`Counter::put_versioned`] writes attributes only if the item's version is the one the caller
//! read (`ctr_version`, with `ctr_updated` in epoch ms and a random `ctr_write_token` per call);
//! a lost race is [`VersionOutcome::Conflict`] (HTTP 412 / 409 for an API). A write whose
//! response was lost and that the SDK retried finds its own token at the new version and is
//! [`VersionOutcome::Written`], so [`Counter::read_modify_write`] (read → change → conditional
//! write, a bounded number of times) applies each change once.
//!
//! # Layout
//!
//! * `config`: [`CounterConfig`], the capacity rule, the protocol's attribute names.
//! * `layout`: the item's buckets ([`Bucket`]), where a writer's keys go, what a write removes,
//!   the guard value, the earlier layout.
//! * `record`: [`CounterRecord`], record parsing and validation, [`hash_key`], bounded
//!   rejection messages.
//! * `update`: the conditional `UpdateItem` of a planned write (guard, `contains` terms,
//!   removals) and chunking.
//! * `write`: grouping a batch by item and key, writing items and chunks, the
//!   [`Protocol`](crate::Protocol) impl.
//! * `settle`: [`CounterOutcome`], and each chunk's result turned into one result per record
//!   (halves of a refused chunk).
//! * `versioned`: [`Counter::put_versioned`] and [`Counter::read_modify_write`].
//! * `change`: [`Aggregation`]: item changes (DynamoDB stream records) as counter records,
//!   once per event id.
//!
//! Time comes from a [`Clock`] (epoch milliseconds; buckets use whole seconds), injectable
//! with [`Counter::with_clock`].

mod change;
mod config;
mod layout;
mod record;
mod settings;
mod settle;
mod update;
mod versioned;
mod write;

use aws_sdk_dynamodb::Client;
use serde_json::{Map, Value};

use crate::ddb::item::item_to_json;
use crate::ddb::{Clock, ItemKey, Read, StoreError};

pub use change::{Aggregation, DEFAULT_AGGREGATE_KEY_ATTRIBUTE};
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
#[doc(alias = "idempotency")]
#[doc(alias = "exactly-once")]
#[doc(alias = "deduplication")]
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
    /// The protocol on `config.table` with the system clock, once `config` is valid
    /// ([`CounterConfig::validate`]: the capacity rule included).
    pub fn try_new(client: Client, config: CounterConfig) -> Result<Self, crate::ConfigError> {
        config.validate()?;
        Ok(Counter {
            client,
            config,
            clock: Clock::system(),
        })
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

    /// Read one counter item (strongly consistent) as `T`; `None` when absent. The protocol's
    /// own attributes (`<prefix>*`) are in the item too: `T` ignores them unless it names them.
    pub async fn get<T: serde::de::DeserializeOwned>(
        &self,
        key: &ItemKey,
    ) -> Result<Option<T>, StoreError> {
        let item =
            crate::ddb::read::get_item(&self.client, &self.config.table, key, Read::Consistent)
                .await?;
        item.map(crate::ddb::read::decode).transpose()
    }

    /// Read one counter item (strongly consistent) as JSON, protocol attributes included.
    pub async fn get_json(&self, key: &ItemKey) -> Result<Option<Map<String, Value>>, StoreError> {
        let item =
            crate::ddb::read::get_item(&self.client, &self.config.table, key, Read::Consistent)
                .await?;
        Ok(item.map(item_to_json).transpose()?)
    }
}
