//! The counter's journal mode: one small journal item per idempotency key, summed into the
//! counter items by a roll-up that reads the journal table's DynamoDB stream.
//!
//! The writer side is always built. The roll-up ([`Rollup`]) and the repair ([`Repair`]) need
//! the crate's **`journal` feature** (off by default), which brings in the DynamoDB Streams
//! client: `dynamodb-exactly-once = { …, features = ["journal"] }`.
//!
//! # Invariant
//!
//! For every counter item and counter name, once the roll-up has read every shard of the
//! journal's stream up to a point, the stored value is the sum of the deltas of the distinct
//! idempotency keys of that item journaled before that point, minus the keys kept as dead
//! letters (each listed with its reason), provided every redelivery of a key arrives within
//! the window (the journal item's TTL) of its first journaling; and, on an item migrated from
//! the inline mode, a key whose record arrived at its source before the item's
//! `<prefix>forgot` is never counted (a `too_old` dead letter), as the inline writer refuses
//! it. Two steps make it hold, and a third repairs what the stream lost:
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
//! 2. **Roll-up** ([`Rollup`]). Deployed, it is the handler of the journal's stream event
//!    source mapping ([`Rollup::apply_batch`], module `shard_batch`: Lambda reads the shards
//!    and keeps the positions; one shard's batch per call, the same watermarks and proof as
//!    below). The scheduled reader ([`Rollup::run`]), described here, is kept until its
//!    removal: each run lists the shards, reads every unfinished shard in
//!    parallel from its checkpoint up to the run's start (a record created after it ends the
//!    shard's read for this run), sums the `INSERT`s per counter item over every shard, and
//!    applies each item's sum with **one** `UpdateItem` that also records each shard's
//!    **watermark** (`<prefix>w_<shard tag>` = the highest sequence number applied from that
//!    shard), on the condition that each watermark is below the first sequence number
//!    applied from its shard. A roll-up that dies after some updates and runs again, two
//!    roll-ups at once, or a lost response whose retry arrives later all fail the condition;
//!    `ALL_OLD` shows the watermarks and only the records after them are applied. Sequence
//!    numbers are compared within their shard only, so the order in which shards (parents,
//!    children) are read does not matter: sums commute.
//!
//!    **Hold** (opt-in, `RollupConfig::hold`): a cold item's keys may wait in the process's
//!    memory for its next keys, to be applied with them by one update. A held key is never
//!    behind a saved checkpoint: every held key of a shard is applied in the pass that saves
//!    that shard's checkpoint; a failed update blocks its shards and keeps its keys held; a
//!    held key at or behind a saved checkpoint (applied by whoever saved it) or of a shard no
//!    longer listed is dropped.
//!
//! 3. **Repair** ([`Repair`], `ops counter repair`): records the stream lost before the
//!    roll-up read them (an outage past the stream's 24 hours) are recounted exactly from the
//!    journal, by whole UTC days of the keys' first put. For that the roll-up's update also
//!    adds each key to its day's sum on the item (`<prefix>d<yyyymmdd>_<name>`, kept
//!    [`KEEP_DAYS`] days) on the condition that the day is not marked repaired
//!    (`<prefix>r<yyyymmdd>`); a refused update drops the keys of repaired days (moving the
//!    watermarks past them). The proof is in the `repair` module.
//!
//! A record that cannot be counted never stops anything: an item update DynamoDB refuses as
//! invalid is split in halves, in order, down to the single refused record, which becomes a
//! dead letter (its watermark moves past it); an image the journal's writer did not write is
//! a dead letter too. A failing item or shard holds only its own shards' checkpoints.
//!
//! # Cost (as AWS bills it)
//!
//! * Journal: 1 write unit per record (the item is ~120 bytes), in `BatchExecuteStatement`
//!   calls of up to 25; a redelivered record costs the same 1 unit (its refused `INSERT` is
//!   billed like a failed conditional put; 0 calls on a warm process: the warm-redelivery
//!   cache) and makes no stream record, so the roll-up reads nothing for it. No read.
//! * Roll-up: per run, one `UpdateItem` per counter item that had new keys, billed by the
//!   item's size: its counters and one 35-byte watermark per shard that may still deliver
//!   its keys (one per sub-partition: the open shard, and for 20 minutes after a rollover its
//!   done parent). With a roll-up every `R` seconds and `r` new keys per second on an item
//!   that stays under 1 KB (the day sums add ~25 bytes per counter and day, for 5–6 days:
//!   ~250 bytes for two counters with keys every day), that is `1 / max(1, r × R)` write units per event on top of the
//!   journal's 1: 1.02 at one key a second, 2 at one key a minute or fewer. Checkpoints: a put
//!   per shard when first seen, when done and hourly while it moves (or per 50,000 records),
//!   none while idle, plus one pass record an hour: about 1.5 × S + 1 puts an hour for S
//!   shards rolling over every 4 hours, shared by every key of the table; one `Query` of the
//!   checkpoints per run. With a hold `H` and `K = hold_keys`, keys per update
//!   `n ≈ max(r × R, min(K, 1 + r × H))`: 1.5 units per event at one key a minute with
//!   `H = 120 s`, or six keys an hour with `H = 600 s`; the counters then lag up to `H` more.
//!   Stream reads cost a `GetRecords` request unit when polled (up to 10 empty calls per idle
//!   open shard and run).
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
//! * A roll-up that stops at any call: the next run re-reads from the last checkpoint; the
//!   watermarks make the updates already applied fail their condition (`Duplicate`s in the
//!   report), the rest are applied.
//! * A counter item written by [`CounterMode::Inline`](super::CounterMode): while it still
//!   holds key buckets, the roll-up treats a key found in them as a duplicate, pins the
//!   buckets it saw (layout and sizes, so an inline writer still running cannot add a key
//!   unseen), removes the buckets whose `until` has passed and raises `<prefix>forgot` to
//!   their span end in the same update. Every update is conditioned on `<prefix>forgot` being
//!   at most the earliest arrival (`arr`) of its keys; a key that arrived before it is a
//!   `too_old` dead letter: the inline age guard, kept with no setting. `<prefix>forgot` goes
//!   with the item's next update once window + 1 h + 24 h have passed. A record without an
//!   arrival time is not guarded.
//! * The journal's stream disabled and enabled again (a new ARN): checkpoints name their
//!   stream; each run also lists every earlier stream a checkpoint not lost names and reads
//!   its shards to their end; once DynamoDB no longer knows it, its unfinished shards are
//!   gaps. Keys journaled while the stream was off reach no stream ([`Repair`]).
//! * Records the roll-up could not read (stopped for longer than the stream's 24 hours, a
//!   shard that left the stream unfinished): the report's `trimmed` and `gaps` and an ERROR
//!   log name the shard and the times; the journal items are still in the table for the
//!   window, and [`Repair`] recounts the gap's days exactly (days ended an hour ago and begun
//!   at most [`REPAIR_DAYS`] days ago). A key put more than an hour after its first put's
//!   day ended by the true clock (a writer's clock that far behind) may be missed by it.
//! * A roll-up process that stops with keys held loses them with its in-memory positions: the
//!   next one reads from the saved checkpoint, before them; a frozen process that wakes after
//!   another one moved the checkpoint drops its held keys behind it, and the watermarks turn
//!   away the rest. With a hold, `caught_up` means every key read was applied or held
//!   (`held` counts those not yet in the counters).
//! * Checkpoints must never be deleted or rolled back: a shard read again from its start
//!   after its watermarks were removed (20 minutes after it was done) counts its keys again.
//! * Reads: [`super::Counter::get`] returns the counter item, which lags the journal by the
//!   roll-up's delay (its schedule period plus one run while it keeps up).
//!
//! # Layout
//!
//! * `entry`: the journal items the writer puts (names, encoding).
//! * `write`: journaling a batch.
//! * `insert`: the batch's `INSERT`s (the first put of a key wins).
//! * `event`: the roll-up's side: stream images decoded, sequence numbers, watermarks, its
//!   own items' partitions.
//! * `stream`: the stream, its shards, iterators and pages.
//! * `checkpoint`: the checkpoints and the complete-pass record.
//! * `read`: reading one shard for one pass.
//! * `apply`: one item's update across shards.
//! * `migrate`: the inline age guard for items migrated from the inline mode.
//! * `hold`: cold items' keys held in memory (opt-in).
//! * `prune`: which watermarks an item no longer needs.
//! * `dead`: isolating refused records; dead letters.
//! * `pass`: one run (passes, the report).
//! * `gaps`: records the stream lost, found from the listing and the checkpoints.
//! * `days`: the day sums and repaired marks on the counter items.
//! * `repair`: recounting whole days from the journal; `scan`: its reads of the journal;
//!   `recount`: one item's day; `failures`: the days of the mapping's on-failure messages;
//!   `audit`: the journal's day sums against the counter items'.
//! * `rollup`: settings, report and the handle.

// The journal's writer (always built: `CounterMode::Journal` needs only DynamoDB).
mod entry;
mod insert;
mod write;

/// Items built only with the feature `journal`: the roll-up and the repair, which read the
/// journal's stream with the DynamoDB Streams client (no other part of the crate needs it).
macro_rules! with_journal_feature {
    ($($item:item)*) => { $( #[cfg(feature = "journal")] $item )* };
}

with_journal_feature! {
    mod apply;
    mod audit;
    mod checkpoint;
    mod days;
    mod dead;
    mod event;
    mod failures;
    mod gaps;
    mod hold;
    mod migrate;
    mod pass;
    mod prune;
    mod read;
    mod recount;
    mod repair;
    mod rollup;
    mod scan;
    mod shard_batch;
    mod stream;

    pub use audit::{AuditDifference, AuditLimits, AuditOutcome, AuditReport};
    pub use days::{KEEP_DAYS, REPAIR_DAYS};
    pub use dead::RollupDeadLetter;
    pub use failures::{FailureMessageError, StreamFailure, ARRIVAL_MARGIN_MS};
    pub use repair::{Repair, RepairDays, RepairOutcome, RepairProgress, RepairReport};
    pub use rollup::{Rollup, RollupConfig, RollupConfigBuilder, RollupGap, RollupReport};
    pub use shard_batch::RollupBatchReport;
}

pub use entry::{JOURNAL_KEY_ATTRIBUTE, JOURNAL_SORT_ATTRIBUTE, TTL_ATTRIBUTE};
pub use insert::statement_items;
