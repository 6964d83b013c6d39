//! The counter's journal mode: one small journal item per idempotency key, summed into the
//! counter items by a roll-up that reads the journal table's DynamoDB stream.
//!
//! # Invariant
//!
//! For every counter item and counter name, once the roll-up has read the journal's stream up
//! to a point, the stored value is the sum of the deltas of the distinct idempotency keys of
//! that item journaled before that point, provided every redelivery of a key arrives within
//! the window (the journal item's TTL) of its first journaling. Two steps make it hold:
//!
//! 1. **Journal** ([`super::Counter`] in [`CounterMode::Journal`](super::CounterMode)): each
//!    record is an *unconditional* `PutItem` (in `BatchWriteItem`s of 25) of the item
//!    `pk = H(counter item key, key hash)`, holding the counter item's key, the deltas, the
//!    key's hash and a TTL of `now + max(window, 14 days) + 1 h` (the hour covers a writer's
//!    clock behind; the floor, a writer with a shorter window putting the key again). The first put of a key creates the item: the
//!    stream gets one `INSERT`. Every later put of the same key (a redelivery, an SDK retry, a
//!    hedged or concurrent writer) finds the item and is a `MODIFY` (or no stream record at
//!    all when nothing changed). Only `INSERT`s count, so a key counts once whatever the
//!    number of puts, with no condition and no read. A key delivered again with other deltas
//!    still counts its first deltas.
//! 2. **Roll-up** ([`Rollup`]): reads each stream shard in order (parents before children,
//!    checkpoints in the journal table), sums the `INSERT`s per counter item, and applies each
//!    item's sum with one `UpdateItem` that also records the shard's **watermark**
//!    (`<prefix>w_<shard tag>` = the highest sequence number applied from that shard), on the
//!    condition that the watermark is below the first sequence number applied. A roll-up that
//!    dies after some updates and runs again, two roll-ups at once, or a lost response whose
//!    retry arrives later all fail the condition; `ALL_OLD` shows the watermark and only the
//!    records after it are applied. Sequence numbers are compared within their shard only.
//!
//! # Cost (as AWS bills it)
//!
//! * Journal: 1 write unit per record (the item is ~150 bytes), in `BatchWriteItem` calls of
//!   up to 25; a redelivered record costs the same 1 unit (0 calls on a warm process: the
//!   warm-redelivery cache). No condition, no read.
//! * Roll-up: per run, one `UpdateItem` per counter item and shard that had new keys, billed
//!   by the counter item's size (its counters and one ~70-byte watermark per stream shard
//!   writing it: a closed parent's is removed 20 minutes after its last move, any other
//!   after two days without one).
//!   With a roll-up every `R` seconds and `r` new keys per second on an item, that is about
//!   `shards / (r × R)` write units per event on top of the journal's 1. Stream reads are free
//!   for Lambda triggers and cost a `GetRecords` request unit when polled (one call per shard
//!   and run, 1,000 records each).
//! * Storage: one ~150-byte journal item per key for the window (14 days at 1,000 keys/s is
//!   1.2 billion items, ~180 GB).
//!
//! # Failure modes
//!
//! * Writers of one journal with windows **above** 14 days must use the same window: a key's
//!   TTL is its last put's, so a writer with a shorter window (but at least 14 days) putting
//!   it again shortens its life to that window.
//! * A journal put whose response is lost: the SDK or Lambda retries it, the same item is put
//!   again: no `INSERT`, counted once.
//! * A roll-up that stops at any call: the next run re-reads from the last checkpoint; the
//!   watermarks make the updates already applied fail their condition (`Duplicate`s in the
//!   report), the rest are applied.
//! * A counter item written by [`CounterMode::Inline`](super::CounterMode) (today's layout):
//!   while it still holds key buckets, the roll-up treats a key found in them as a duplicate,
//!   pins the buckets it saw (layout and sizes, so an inline writer still running cannot add
//!   a key unseen), and removes the buckets whose `until` has passed; the item ends with
//!   counters and watermarks only.
//! * The roll-up stopped for longer than the stream's 24-hour retention: records are lost
//!   to it (the report's `trimmed` and an ERROR log say so; the journal items are still in
//!   the table for the window).
//! * Reads: [`super::Counter::get`] returns the counter item, which lags the journal by the
//!   roll-up's delay (at most its schedule period plus one run when it keeps up).

mod apply;
mod entry;
mod rollup;
mod stream;
mod write;

pub use entry::{JOURNAL_KEY_ATTRIBUTE, MAX_JOURNAL_BATCH, TTL_ATTRIBUTE, WATERMARK_KEEP_SECONDS};
pub use rollup::{Rollup, RollupConfig, RollupReport};
