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
//! # Steps and write cost (N items; P part items, one per 350 KB, when the requests JSON
//! exceeds 640 bytes, else 0)
//!
//! | step | write requests | what |
//! |---|---|---|
//! | 1. create | 1 + P | parts under a fresh `Nonce`, then header `PutItem` with `attribute_not_exists(TxId)` and `RequestsHash` |
//! | 2. lock + save image + apply | N | per item, in key order, one `TransactWriteItems` of [`ConditionCheck` header `State = pending AND Attempt = a`, the item's conditional write] |
//! | 3. commit | 1 | header `pending → committed` (+ tokens), conditioned on `Version` |
//! | 4. finalize | N | per item: remove lock/image (or delete), conditioned on lock + token |
//! | 5. complete | 1 | header `→ completed`: `REMOVE SweepKey`, TTL `ExpiresAt` = now + retention |
//!
//! **2N + 3 (+ P)** write requests for a committed transaction, as before the header check
//! (the published lock/image protocol needs 7N + 4); nothing is deleted by a write (completed
//! headers and parts expire through TTL). A rollback costs the same at most (undo instead of
//! finalize). A lock phase longer than [`TxConfig::heartbeat_every`] adds one heartbeat per
//! interval. **Index writes**: 2 per transaction (creation, completion; decisions leave
//! `LastTouched` alone), on 16 `SweepKey` shards (see [`crate::txn::sweep`]), plus 2 per
//! heartbeat or restart.
//!
//! **Write units.** Step 2 is transactional: DynamoDB bills each entry of a
//! `TransactWriteItems` twice (prepare and commit), so a lock write costs 2 × the item's
//! write units (image and new value, rounded up per KB) **plus 2 units for the header
//! `ConditionCheck`**, where the plain conditional `UpdateItem`/`PutItem` it replaces cost
//! 1 × the item's units. A `ConditionCheck` is billed by the size of the item it checks, so
//! the header is kept under 1 KB during the lock phase: requests longer than 640 bytes go to
//! part items (P ≥ 1 from about three requests on: one more write request, and the header
//! transitions get cheaper too); the commit tokens are added only at the commit. For 1 KB
//! items: 4 units per item instead of 1, so a committed N-item transaction costs about
//! 5N + 3 units instead of 2N + 3 (figures measured by `bench txn`; with 100 requests kept
//! inline the check alone would cost about 12 units per item). This is the price of finding 1 and 2 of issue 8: no lock write
//! can apply after its attempt is decided, *by construction*, whoever sends it and however
//! late (a stalled duplicate delivery, a write held in the network, an SDK retry of a write
//! whose response was lost). The alternative (lock-only writes, then apply after verifying
//! the header, as in the published protocol) needs N more write requests and still an
//! ordering argument; one transaction per item needs none.
//!
//! **Reads.** One consistent `GetItem` per item before locking and before finalizing (reads
//! are not writes). Nothing else on the happy path: a run that finds its transaction
//! completed by someone else no longer re-reads its items for orphan locks (none can exist,
//! see invariant 5), and a redelivery compares the request hash kept in the header instead
//! of reading the request parts.
//!
//! The item write of step 2 is conditioned on the item still being the image read:
//! `_txVer = :read_token AND attribute_not_exists(_txLock)` (or `attribute_not_exists(<key>)`
//! for an absent item, or `attribute_not_exists(_txVer)` for an item no transaction touched
//! yet), `AND`ed with the request's own `ConditionExpression`, which was parsed as one
//! complete condition when the message was validated (`malformed_expression` otherwise, see
//! `request::expr`): a request's text cannot change how its condition and the guard combine.
//! The `SET` of the protocol attributes is merged into the request's update expression (its
//! names and values maps are kept; the protocol's placeholders start with `#txp`/`:txp`,
//! which requests may not use). `ReturnValuesOnConditionCheckFailure=ALL_OLD` (per entry) and
//! the cancellation reasons tell the failure causes apart without a read: the attempt was
//! decided (stop), locked by another transaction (contention), changed since the read (read
//! again), a transaction conflict (read again), or unchanged and unlocked (the request's
//! condition failed: roll back, and the outcome names the request).
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
//! 5. **No late change, by construction**: every lock write is a transaction that also
//!    checks `State = pending AND Attempt = a` on T's header. DynamoDB serializes it with
//!    the header's decision write, so it lands *before* the decision (then the item carries
//!    `T#a` when any completer reads it after the decision, and is finalized or undone) or
//!    not at all. After the decision no lock of attempt `a` can appear: not from a
//!    coordinator that stalled before reading its items, not from a write held back in the
//!    network, not from an SDK retry of a write whose response was lost (the retry carries
//!    the same `ClientRequestToken`: within 10 minutes DynamoDB returns the first answer
//!    without applying anything again, after that the header check refuses it). Within
//!    attempt `a` at most one lock write per item succeeds (it requires the item unlocked),
//!    so every lock of `a` is the one whose token the commit records (a coordinator that
//!    finds `T#a` already on an item adopts its token). Finalize/undo writes are conditioned
//!    on lock + token, so a straggling one is a no-op. Locks of an older attempt (restarted
//!    after a rollback) are undone by whoever meets them; a stale coordinator that meets its
//!    own transaction's *newer* attempt stops (its attempt is over) instead of waiting on it
//!    or rolling it back.
//! 6. **Idempotency**: the header is created once per `txId`; a redelivered message resumes
//!    the recorded transaction when its requests hash to the header's `RequestsHash`
//!    (`tx_id_reused` otherwise, whatever the size of the requests; parts are written under
//!    a per-creation nonce, so another body can never overwrite them) or returns its final
//!    outcome. Committed and condition-failed transactions are final; an attempt aborted by
//!    contention or by the sweeper applied nothing and is restarted (next `Attempt`). The
//!    guarantee lasts as long as the record: see the sweeper's retention
//!    ([`crate::txn::sweep`]); a message older than it is not idempotent any more.
//! 7. **Completion**: `→ completed` is written only after every item of T is finalized or
//!    undone (with invariant 5, nothing of T is left on any item afterwards); only then is
//!    the record eligible for deletion (after the retention period).
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
//!   Precisely what a plain (non-transactional) write W to a managed item does: if W lands
//!   while T holds the item and T rolls back, the undo restores T's image over W (W is
//!   lost); if T commits, W survives unless T's change was a delete; if W lands between T's
//!   read and T's lock write without changing `_txVer`, T's lock saves the image it read
//!   (without W) and applies its change on top of W, so a rollback loses W as well. A plain
//!   writer joins the protocol safely by conditioning on `attribute_not_exists(_txLock)` and
//!   setting `_txVer` to a fresh random value: T's lock write then sees the change and reads
//!   again.
//! * Long transactions: a pending attempt writes a heartbeat (`LastTouched`) when a delivery
//!   resumes it and every [`TxConfig::heartbeat_every`] while it locks; contenders roll a
//!   holder back only after [`TxConfig::lock_patience`] without a heartbeat, and the sweeper
//!   only after its stale threshold without one (which must exceed the gap between two
//!   deliveries, checked at start-up). So a transaction that spans invocations is resumed,
//!   not rolled back, unless a contender needs one of its items *between* two deliveries
//!   (nothing heartbeats then): it is then rolled back (safe: it applied nothing) and its
//!   next delivery restarts it as a new attempt that locks everything again. A transaction
//!   that cannot lock all its items in one invocation commits only without such contention.
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
pub mod sweep;

pub use crate::ddb::Cost;
pub use config::{
    check_horizons, TxConfig, DEFAULT_CONCURRENCY, DEFAULT_HEARTBEAT_EVERY, DEFAULT_LOCK_PATIENCE,
    DEFAULT_MAX_ATTEMPTS, DEFAULT_REDELIVERY_HORIZON, DEFAULT_RETAIN,
};
pub use coordinator::Coordinator;
pub use item::{
    plain_json, strip_protocol, ATTR_DELETE, ATTR_IMAGE, ATTR_LOCK, ATTR_TRANSIENT,
    ATTR_VERSION_TOKEN, ITEM_PROTOCOL_ATTRIBUTES,
};
pub use outcome::{Driven, TxError, TxOutcome, TxReport};
