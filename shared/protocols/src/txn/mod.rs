//! Multi-item transactions: a TX record, per-item locks holding the previous image, one commit
//! point, and completion that any coordinator (or the sweeper) can drive.
//!
//! # Items and records
//!
//! * The **TX record** ([`record`]) holds the state `pending → committed | rolled_back →
//!   completed`, the requests, a `Version` (every header write is conditioned on it), the
//!   `Attempt`, the commit-time `Tokens`, and `LastTouched`. It is split over a header item and
//!   part items (hash `TxId` + range `Part`), so there is no size ceiling.
//! * An item taking part carries, while locked: `_txLock` = `txId#attempt` (the lock),
//!   `_txVer` (a fresh random **version token** written by every protocol write),
//!   `_txImage` (the whole previous item, absent when the item did not exist), `_txDelete`
//!   (completion deletes the item: a `Delete` request, or a transient item) and
//!   `_txTransient` (the item was inserted only to be locked). `_txVer` stays on the item after
//!   completion: it is the item's version for the next transaction.
//!
//! # Steps and write cost (N items; P part items when the requests exceed 300 KB, else 0)
//!
//! | step | writes | what |
//! |---|---|---|
//! | 1. create | 1 + P | parts, then header `PutItem` with `attribute_not_exists(TxId)` |
//! | 2. lock + save image + apply | N | one conditional write per item, in key order |
//! | 3. commit | 1 | header `pending → committed` (+ tokens), conditioned on `Version` |
//! | 4. finalize | N | per item: remove lock/image (or delete), conditioned on lock + token |
//! | 5. complete | 1 | header `→ completed`, `SweepKey open → done` |
//!
//! **2N + 3 (+ P)** write requests for a committed transaction, plus 1 + P deletes by the
//! sweeper after the retention period (the published lock/image protocol needs 7N + 4). A
//! rollback costs the same at most (undo instead of finalize). Reads: one consistent
//! `GetItem` per item before locking and before finalizing (reads are not writes).
//!
//! Step 2 is a single write because the image is read *before* the write and the write is
//! conditioned on the item still being that image: `_txVer = :read_token AND
//! attribute_not_exists(_txLock)` (or `attribute_not_exists(<key>)` for an absent item, or
//! `attribute_not_exists(_txVer)` for an item no transaction touched yet), `AND`ed with the
//! request's own `ConditionExpression`. The `SET` of the protocol attributes is merged into
//! the request's update expression (its names and values maps are kept; the protocol's
//! placeholders start with `#txp`/`:txp`, which requests may not use).
//! `ReturnValuesOnConditionCheckFailure=ALL_OLD` tells the three failure causes apart
//! without a read: locked by another transaction (contention), changed since the read (read
//! again), or unchanged and unlocked (the request's condition failed: roll back, and the
//! outcome names the request).
//!
//! # Invariants
//!
//! 1. **Isolation**: an item locked by T is written only by T's coordinators (lock write),
//!    or by a finalize/undo conditioned on `_txLock = T#a AND _txVer = token`.
//! 2. **Recoverability**: a locked item holds the exact state it had before T (`_txImage`),
//!    because the lock write was conditioned on the item being that image.
//! 3. **Atomic decision**: the only decision points are the header's conditional transitions
//!    `pending → committed` and `pending → rolled_back`; both are conditioned on `Version`,
//!    so exactly one wins, and the decision never changes afterwards.
//! 4. **Commit only after every change**: `pending → committed` is written only after every
//!    item's lock write was confirmed, and it records each item's token.
//! 5. **No late change**: a straggling lock write (a slow coordinator, a lost response retried
//!    by the SDK) is conditioned on the version token it read; tokens are never reused, so it
//!    can only land on an item still in that exact state. If it lands after the decision, the
//!    item carries T's lock with a token that is not in T's committed `Tokens` (or T rolled
//!    back, or the lock's attempt is not T's current one, or T is completed): it is an
//!    **orphan**, and whoever meets it (coordinator, contender, sweeper) **undoes** it from its
//!    image. A change is therefore applied at most once and never after the decision.
//!    Finalize/undo writes are conditioned on lock + token, so a straggling one is a no-op.
//!    A live coordinator never *retries* a lock write after the decision: before writing
//!    again (item changed since its read, or another transaction's lock met) it re-reads its
//!    header and stops if the attempt is no longer pending; and when it finds its transaction
//!    completed by someone else after it wrote locks, it undoes any lock of its own still on
//!    the items (`release_orphans`). Residual window, stated honestly: a write already in
//!    flight when its coordinator dies and that lands after a *completed* rollback stays as
//!    an orphan lock until the next transaction or read meets it (committed reads already
//!    ignore it); choose the sweeper's stale threshold well above the request timeout so
//!    in-flight writes land before the sweeper acts.
//! 6. **Idempotency**: the header is created once per `txId`; a redelivered message resumes
//!    the recorded transaction (the stored requests must be identical) or returns its final
//!    outcome. Committed and condition-failed transactions are final; an attempt aborted by
//!    contention or by the sweeper applied nothing and is restarted (next `Attempt`).
//! 7. **Completion**: `→ completed` is written only after every item of T is finalized or
//!    undone; only then is the record eligible for deletion (after the retention period).
//!
//! # Contention
//!
//! Items are locked one at a time in a global order (table, canonical key), so live
//! coordinators never wait in a cycle. Meeting another transaction U's lock, a coordinator
//! decides U: if U is committed it finalizes the item, if U rolled back (or the lock is an
//! orphan) it undoes it, and if U is pending it waits with jittered exponential backoff and
//! rolls U back (`conflict`) only after waiting [`TxConfig::lock_patience`]: a live U usually
//! finishes first, a dead one is rolled back. U's coordinator sees its commit refused and
//! restarts U with the next attempt (at most [`TxConfig::max_attempts`] per invocation, then
//! the message is retried by SQS).
//!
//! # Failure modes
//!
//! * Coordinator dies at any point: the next delivery of the message resumes it; or the
//!   sweeper rolls a stale pending transaction back and completes decided ones.
//! * DynamoDB rejects a request (`ValidationException`: a bad expression, a wrong key): the
//!   transaction rolls back (`invalid_request`) and the message is dead-lettered.
//! * Transient errors: the message is reported for retry; the TX record keeps the progress.
//! * Assumption: items of allow-listed tables are written only through transactions (as with
//!   every lock-based protocol); an item's image plus its new value must fit in 400 KB.
//!
//! # Layout
//!
//! * [`request`]: messages and requests (parsing, validation), [`record`]: the TX record and
//!   its conditional header writes, [`read`]: reads at three isolation levels.
//! * `config` ([`TxConfig`]), `outcome` ([`TxOutcome`], [`TxReport`], [`TxError`],
//!   [`Driven`]), `item` (the protocol attributes on items, version tokens).
//! * The [`Coordinator`], by step: `coordinator` (a run's loop over the header's state and
//!   the batch [`Protocol`](crate::batch::Protocol)), `resolve` (key schemas, item keys),
//!   `lock` (step 2, meeting other transactions' locks), `decide` (steps 3 and 5: the header
//!   transitions), `finish` (step 4, orphans, [`Coordinator::drive`]).
//! * Conditional writes go through [`crate::ddb::cond`], costs are [`crate::ddb::Cost`], waits
//!   are [`crate::ddb::retry::Backoff`] delays.

mod config;
mod coordinator;
mod decide;
mod finish;
mod item;
mod lock;
mod outcome;
pub mod read;
pub mod record;
pub mod request;
mod resolve;

pub use crate::ddb::Cost;
pub use config::{TxConfig, DEFAULT_CONCURRENCY, DEFAULT_LOCK_PATIENCE, DEFAULT_MAX_ATTEMPTS};
pub use coordinator::Coordinator;
pub use item::{
    plain_json, strip_protocol, ATTR_DELETE, ATTR_IMAGE, ATTR_LOCK, ATTR_TRANSIENT,
    ATTR_VERSION_TOKEN, ITEM_PROTOCOL_ATTRIBUTES,
};
pub use outcome::{Driven, TxError, TxOutcome, TxReport};
