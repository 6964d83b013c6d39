//! The counter's journal mode: one small journal item per idempotency key, summed into the
//! counter items by a roll-up that is the handler of the journal table's DynamoDB Streams
//! event source mapping.
//!
//! The writer side is always built. The roll-up ([`Rollup`]) and the repair ([`Repair`]) need
//! the crate's **`journal` feature** (off by default):
//! `dynamodb-exactly-once = { …, features = ["journal"] }`.
//!
//! # Invariant
//!
//! For every counter item and counter name, once the mapping has delivered (and the roll-up
//! answered success for) every record of the journal's stream up to a point, the stored value
//! is the sum of the deltas of the distinct idempotency keys of that item journaled before that
//! point, minus the keys kept as dead letters (each listed with its reason) and the records the
//! mapping discarded to its on-failure destination (each batch named there: repaired by whole
//! days), provided every redelivery of a key arrives within the window (the journal item's TTL)
//! of its first journaling; and, on an item migrated from the inline mode, a key whose record
//! arrived at its source before the item's `<prefix>forgot` is never counted (a `too_old`
//! dead letter), as the inline writer refuses it. Two steps make it hold, and a third repairs
//! what the stream lost:
//!
//! 1. **Journal** ([`super::Counter`] in [`CounterMode::Journal`](super::CounterMode)): each
//!    record is a PartiQL `INSERT` (in `BatchExecuteStatement`s of 25) of the item
//!    `(pk, sk) = (tag of the counter item [# sub-partition], hash of the idempotency key)`,
//!    holding the counter item's key, the deltas, the put's time `at` and a TTL of
//!    `at + max(window, 14 days) + 1 h` (the hour covers a writer's clock behind; the floor, a
//!    writer with a shorter window putting the key first). The first put of a key creates the
//!    item: the stream gets one `INSERT`. Every later put of the same key (a redelivery, an
//!    SDK retry, a hedged or concurrent writer) finds the item and fails alone
//!    (`DuplicateItem`): the item keeps its **first** put's `at`, deltas and TTL, and the
//!    stream gets no record. Only `INSERT`s count, so a key counts once whatever the number
//!    of puts, with no read. A key delivered again with other deltas still counts its first
//!    deltas. All keys of one counter item share a partition key, so they reach the stream
//!    through one shard lineage (or `journal_spread` of them).
//! 2. **Roll-up** ([`Rollup::apply_batch`], module `shard_batch`): Lambda's event source
//!    mapping reads every shard in lineage order, keeps the positions and invokes the handler
//!    with one shard's batch at a time (per partition key with `ParallelizationFactor`). The
//!    batch's `INSERT`s are summed per counter item and each item's sum is applied with
//!    **one** `UpdateItem` that also records the batch lane's **watermark**
//!    (`<prefix>w_<lane tag>` = the last sequence number applied from that lane: the shard,
//!    and the journal key's sub-partition with `journal_spread`), on the condition that the
//!    watermark is below the first sequence number applied. A batch delivered again (a lost
//!    response, a killed or timed-out invocation, a retry from the reported record, a second
//!    mapping) fails the condition; `ALL_OLD` shows the watermark and only the records after
//!    it are applied. Sequence numbers are compared within their lane only, so the order in
//!    which parents and children are applied does not matter: sums commute. The roll-up keeps
//!    nothing between batches: with the mapping's tumbling window ([`Rollup::apply_window`],
//!    module `window`), a window's keys travel in the state Lambda keeps with the shard's
//!    checkpoint and are applied together at the window's end.
//! 3. **Repair** ([`Repair`], `ops counter repair`): records the mapping could not deliver
//!    (discarded past `MaximumRecordAgeInSeconds` or its retries, or trimmed after 24 hours)
//!    are recounted exactly from the journal, by whole UTC days of the keys' first put. For
//!    that the roll-up's update also adds each key to its day's sum on the item
//!    (`<prefix>d<yyyymmdd>_<name>`, kept [`KEEP_DAYS`] days) on the condition that the day is
//!    not marked repaired (`<prefix>r<yyyymmdd>`); a refused update drops the keys of repaired
//!    days (moving the watermarks past them). The proof is in the `repair` module.
//!
//! A record that cannot be counted never blocks its shard: an item update DynamoDB refuses as
//! invalid (or a sum past 38 digits) is split in halves, in order, down to the single refused
//! record, which becomes a dead letter (its watermark moves past it); an image the journal's
//! writer did not write is a dead letter too. A transient failure is answered as the batch's
//! only failure, from the lowest sequence number it concerns (the partial batch response).
//!
//! # Cost (as AWS bills it)
//!
//! * Journal: 1 write unit per record (the item is ~120 bytes), in `BatchExecuteStatement`
//!   calls of up to 25; a redelivered record costs the same 1 unit (its refused `INSERT` is
//!   billed like a failed conditional put; 0 calls on a warm process: the warm-redelivery
//!   cache) and makes no stream record. No read.
//! * Roll-up: per batch, one `UpdateItem` per counter item with keys in it, billed by the
//!   item's size: its counters, one 35-byte watermark per lane that delivered its keys in the
//!   last day, and its day sums (~25 bytes per counter and day, for 5–6 days). With batches
//!   every `B` seconds per shard (`MaximumBatchingWindowInSeconds`) and `r` new keys per second
//!   on an item under 1 KB, that is `1 / max(1, r × B)` write units per event on top of the
//!   journal's 1: 1.02 at one key a second with `B = 60`, 2 at one key a minute or fewer; with
//!   a tumbling window `W`, `B` is the window (one update per item and window, while the
//!   shard's state stays under 768 KB: 22,000 to 32,000 keys).
//!   Reading the stream is the mapping's (no charge for Lambda's `GetRecords`).
//! * Storage: one ~120-byte journal item (plus DynamoDB's 100 bytes of overhead) per key for
//!   the window: 14 days at 1,000 keys/s is 1.2 billion items, ~270 GB before TTL's lag.
//!
//! # Failure modes
//!
//! * Writers of one journal must use one `journal_spread` and, above 14 days, one window: a
//!   key journaled under another spread is a new item (counted again); a key's TTL is its
//!   first put's.
//! * A journal put whose response is lost: the SDK or Lambda retries it, the same item is put
//!   again: no `INSERT`, counted once.
//! * An invocation that stops at any call, times out or loses its answer: the mapping delivers
//!   the batch again (whole, or from the reported record); the watermarks make the updates
//!   already applied fail their condition (`duplicates` in the report), the rest are applied.
//! * A counter item written by [`CounterMode::Inline`](super::CounterMode): while it still
//!   holds key buckets, the roll-up treats a key found in them as a duplicate, pins the
//!   buckets it saw (layout and sizes, so an inline writer still running cannot add a key
//!   unseen), removes the buckets whose `until` has passed and raises `<prefix>forgot` to
//!   their span end in the same update. Every update is conditioned on `<prefix>forgot` being
//!   at most the earliest arrival (`arr`) of its keys; a key that arrived before it is a
//!   `too_old` dead letter: the inline age guard, kept with no setting. A record without an
//!   arrival time is not guarded.
//! * A window's final invoke the mapping gives up on (`MaximumRetryAttempts`): the keys its
//!   state held are not counted; repair the window's days.
//! * Records the mapping could not deliver (the on-failure destination's message names the
//!   shard, the sequence range and the records' times) or a stream switched off and on (keys
//!   journaled meanwhile reach no stream): the journal items are still in the table for the
//!   window, and [`Repair`] recounts those days exactly (days ended an hour ago and begun at
//!   most [`REPAIR_DAYS`] days ago).
//! * Reads: [`super::Counter::get`] returns the counter item, which lags the journal by the
//!   mapping's batching window plus one invocation while it keeps up.
//!
//! # Layout
//!
//! * `entry`: the journal items the writer puts (names, encoding).
//! * `write`: journaling a batch.
//! * `insert`: the batch's `INSERT`s (the first put of a key wins).
//! * `event`: the roll-up's side: stream images decoded, sequence numbers, watermarks, its
//!   own items' partitions.
//! * `shard_batch`: one shard's batch as the mapping delivers it.
//! * `apply`: one item's update; `bound`: removing what no record can still need.
//! * `migrate`: the inline age guard for items migrated from the inline mode.
//! * `dead`: isolating refused records; dead letters.
//! * `window`: a tumbling window's keys kept in its state, applied at its end;
//!   `window_state`: the state's text (format 2); `window_v1`: format 1, read only.
//! * `days`: the day sums and repaired marks on the counter items.
//! * `repair`: recounting whole days from the journal; `scan`: its reads of the journal;
//!   `recount`: one item's day; `failures`: the days of the mapping's on-failure messages;
//!   `audit`: the journal's day sums against the counter items'.
//! * `rollup`: settings and the handle.

// The journal's writer (always built: `CounterMode::Journal` needs only DynamoDB).
mod entry;
mod insert;
mod write;

/// Items built only with the feature `journal`: the roll-up and the repair.
macro_rules! with_journal_feature {
    ($($item:item)*) => { $( #[cfg(feature = "journal")] $item )* };
}

with_journal_feature! {
    mod apply;
    mod audit;
    mod bound;
    mod days;
    mod dead;
    mod event;
    mod failures;
    mod migrate;
    mod recount;
    mod repair;
    mod rollup;
    mod scan;
    mod shard_batch;
    mod window;
    mod window_state;
    mod window_v1;

    pub use audit::{AuditDifference, AuditLimits, AuditOutcome, AuditReport};
    pub use dead::RollupDeadLetter;
    pub use days::{KEEP_DAYS, REPAIR_DAYS};
    pub use failures::{FailureMessageError, StreamFailure};
    pub use repair::{Repair, RepairDays, RepairOutcome, RepairProgress, RepairReport};
    pub use rollup::{Rollup, RollupConfig, RollupConfigBuilder};
    pub use shard_batch::RollupBatchReport;
    #[doc(hidden)]
    pub use window::WINDOW_STATE_ENTRY;
    pub use window::{WindowOutcome, APPLY_AT_BYTES};
}

pub use crate::counter::format::{JOURNAL_KEY_ATTRIBUTE, JOURNAL_SORT_ATTRIBUTE, TTL_ATTRIBUTE};
#[doc(hidden)]
pub use insert::statement_items;
