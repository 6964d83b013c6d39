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

pub mod read;
pub mod record;
pub mod request;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConsumedCapacity, KeyType, ReturnConsumedCapacity,
    ReturnValuesOnConditionCheckFailure,
};
use aws_sdk_dynamodb::Client;
use futures::StreamExt;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::batch::Deadline;
use crate::batch::{Applied, Outcome, Protocol, RecordResult};
use crate::config::ConfigError;
use crate::ddb::error::{ErrorClass, StoreError};
use crate::ddb::item::{Item, ItemKey};
use crate::rejection::{Rejection, RejectionCode};

use record::{parse_owner, reason, TxHeader, TxState, TxTable};
use request::{merge_set_clause, RequestKind, TxMessage, TxRequest};

/// The lock: `txId#attempt` of the transaction holding the item.
pub const ATTR_LOCK: &str = "_txLock";
/// The item's version token (fresh random value per protocol write).
pub const ATTR_VERSION_TOKEN: &str = "_txVer";
/// The saved previous image (absent: the item did not exist).
pub const ATTR_IMAGE: &str = "_txImage";
/// Completion deletes the item.
pub const ATTR_DELETE: &str = "_txDelete";
/// The item was inserted only to be locked.
pub const ATTR_TRANSIENT: &str = "_txTransient";
/// Every protocol attribute of an item.
pub const ITEM_PROTOCOL_ATTRIBUTES: [&str; 5] = [
    ATTR_LOCK,
    ATTR_VERSION_TOKEN,
    ATTR_IMAGE,
    ATTR_DELETE,
    ATTR_TRANSIENT,
];

/// Guard of a finalize or undo write (placeholders `#txpl`, `#txpv`, `:txpo`, `:txpt`).
const CONDITION_HELD_BY: &str = "#txpl = :txpo AND #txpv = :txpt";
/// Lock write on an item last written by a transaction (its token unchanged, not locked).
const CONDITION_UNCHANGED_VERSIONED: &str = "#txpv = :txpread AND attribute_not_exists(#txpl)";
/// Lock write on an item never written by a transaction.
const CONDITION_UNCHANGED_UNVERSIONED: &str =
    "attribute_exists(#txpk) AND attribute_not_exists(#txpv) AND attribute_not_exists(#txpl)";
/// Lock write on an absent item.
const CONDITION_STILL_ABSENT: &str = "attribute_not_exists(#txpk)";
/// Finalize of a kept item.
const UPDATE_UNLOCK: &str = "REMOVE #txpl, #txpi, #txpd, #txptr";

/// Default wait on a pending transaction's lock before rolling it back.
pub const DEFAULT_LOCK_PATIENCE: Duration = Duration::from_millis(1000);
/// Default restarts of an aborted attempt within one invocation.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Default transactions (and item writes) in flight at once.
pub const DEFAULT_CONCURRENCY: usize = 8;
/// First backoff on a locked item.
const BACKOFF_START: Duration = Duration::from_millis(5);
/// Longest single backoff on a locked item.
const BACKOFF_MAX: Duration = Duration::from_millis(100);

/// Settings of the transaction protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxConfig {
    /// The TX table.
    pub table: String,
    /// Tables requests may touch.
    pub allowed_tables: BTreeSet<String>,
    /// How long to wait on a pending transaction's lock before rolling it back.
    pub lock_patience: Duration,
    /// Restarts of an aborted attempt within one invocation.
    pub max_attempts: u32,
    /// Transactions of a batch run at once; also item writes of one finalize.
    pub concurrency: usize,
}

impl TxConfig {
    /// Defaults for the TX table `table` and the given allow-list.
    pub fn new<I, S>(table: impl Into<String>, allowed: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        TxConfig {
            table: table.into(),
            allowed_tables: allowed.into_iter().map(Into::into).collect(),
            lock_patience: DEFAULT_LOCK_PATIENCE,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }

    /// Check that the allow-list names a table and not the TX table itself.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.allowed_tables.is_empty() {
            return Err(ConfigError::new("TX_ALLOWED_TABLES", "names no table"));
        }
        if self.allowed_tables.contains(&self.table) {
            return Err(ConfigError::new(
                "TX_ALLOWED_TABLES",
                "must not include the TX table",
            ));
        }
        Ok(())
    }
}

/// Write requests and consumed write capacity of one transaction (or sweep).
#[derive(Debug, Default)]
pub struct Cost {
    calls: AtomicU64,
    milli_units: AtomicU64,
}

impl Cost {
    /// Count one write request and its consumed capacity.
    pub fn add(&self, consumed: Option<&ConsumedCapacity>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let units = consumed.and_then(|c| c.capacity_units).unwrap_or(0.0);
        // Capacity units are multiples of 0.5: thousandths are exact.
        let milli = (units * 1000.0).round();
        if milli > 0.0 && milli < 1e15 {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            self.milli_units.fetch_add(milli as u64, Ordering::Relaxed);
        }
    }

    /// Count a write request that failed (conditional check, error).
    pub fn add_failed(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Write requests so far.
    pub fn write_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Consumed write capacity units so far (as reported by DynamoDB; failed conditional
    /// writes report none on DynamoDB Local).
    pub fn write_units(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let milli = self.milli_units.load(Ordering::Relaxed) as f64;
        milli / 1000.0
    }
}

/// How a transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxOutcome {
    /// Committed by this run: every request applied.
    Committed,
    /// Request `request`'s condition failed: nothing applied.
    RolledBack {
        /// Index of the request whose `ConditionExpression` failed.
        request: usize,
    },
    /// The `txId` was already committed: nothing done again.
    AlreadyCommitted,
    /// The `txId` was already rolled back on request `request`'s condition.
    AlreadyRolledBack {
        /// Index of the request whose condition failed.
        request: usize,
    },
}

impl TxOutcome {
    /// Whether the requests are applied.
    pub fn is_committed(&self) -> bool {
        matches!(self, TxOutcome::Committed | TxOutcome::AlreadyCommitted)
    }
}

impl Outcome for TxOutcome {
    fn label(&self) -> &'static str {
        match self {
            TxOutcome::Committed => "committed",
            TxOutcome::RolledBack { .. } => "rolled_back",
            TxOutcome::AlreadyCommitted | TxOutcome::AlreadyRolledBack { .. } => "duplicate",
        }
    }
}

/// A transaction's outcome and cost.
#[derive(Debug, Clone, PartialEq)]
pub struct TxReport {
    /// The outcome.
    pub outcome: TxOutcome,
    /// Write requests made (failed conditional writes included).
    pub write_calls: u64,
    /// Consumed write capacity units reported by DynamoDB.
    pub write_units: f64,
}

/// A transaction could not be decided now.
#[derive(Debug, thiserror::Error)]
pub enum TxError {
    /// DynamoDB failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The message can never succeed (dead-lettered).
    #[error("rejected: {0}")]
    Rejected(Rejection),
    /// The deadline is close; the transaction stays as it is and resumes on redelivery.
    #[error("deadline reached; the transaction resumes on the next delivery")]
    Deferred,
    /// Still aborted by contention after the allowed attempts.
    #[error("transaction {tx_id} aborted by contention {attempts} times; retry later")]
    Contention {
        /// The transaction.
        tx_id: String,
        /// Attempts made.
        attempts: u32,
    },
}

/// A request with its resolved item key.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) index: usize,
    pub(crate) request: TxRequest,
    pub(crate) key: Item,
    /// The table's first key attribute (for `attribute_not_exists`).
    pub(crate) key_attribute: String,
    pub(crate) order: (String, String),
}

/// What the lock phase ended with.
#[derive(Debug)]
enum LockPhase {
    Locked(BTreeMap<usize, String>),
    /// The transaction was decided by someone else meanwhile: stop locking.
    Decided,
    ConditionFailed(usize),
    Invalid(usize, String),
}

/// What one lock write ended with.
#[derive(Debug)]
enum LockWrite {
    Done,
    ConditionFailed(Option<Item>),
    Invalid(String),
}

/// The coordinator: runs transactions and drives others' to completion.
#[derive(Debug, Clone)]
pub struct Coordinator {
    client: Client,
    config: TxConfig,
    tx: TxTable,
    key_schemas: Arc<Mutex<HashMap<String, Vec<String>>>>,
}

static TOKEN_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh, never reused version token.
fn new_token(owner: &str, index: usize) -> String {
    let mut h = Sha256::new();
    h.update(owner.as_bytes());
    h.update(index.to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(TOKEN_COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.update(nanos.to_le_bytes());
    let digest = h.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A pseudo-random duration in `[0, max)` (jitter; not security relevant).
fn jitter(max: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mixed = u64::from(nanos)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(TOKEN_COUNTER.fetch_add(1, Ordering::Relaxed));
    let max_us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX).max(1);
    Duration::from_micros(mixed % max_us)
}

/// `_txLock` of an item.
pub(crate) fn lock_of(item: &Item) -> Option<&str> {
    item.get(ATTR_LOCK)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// `_txVer` of an item.
pub(crate) fn token_of(item: &Item) -> Option<&str> {
    item.get(ATTR_VERSION_TOKEN)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

fn flag(item: &Item, name: &str) -> bool {
    matches!(item.get(name), Some(AttributeValue::Bool(true)))
}

fn is_conditional<E: aws_sdk_dynamodb::error::ProvideErrorMetadata>(err: &E) -> bool {
    err.code() == Some("ConditionalCheckFailedException")
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

impl Coordinator {
    /// A coordinator with the given settings.
    pub fn new(client: Client, config: TxConfig) -> Self {
        let tx = TxTable::new(client.clone(), config.table.clone());
        Coordinator {
            client,
            config,
            tx,
            key_schemas: Arc::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &TxConfig {
        &self.config
    }

    /// The TX table.
    pub fn tx_table(&self) -> &TxTable {
        &self.tx
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Parse and validate a message body against the allow-list.
    pub fn parse_message(&self, body: &[u8]) -> Result<TxMessage, Rejection> {
        request::parse_message(body, &self.config.allowed_tables)
    }

    /// The key attribute names of a table (hash first), from `DescribeTable`, cached.
    async fn key_names(&self, table: &str) -> Result<Vec<String>, StoreError> {
        if let Ok(cache) = self.key_schemas.lock() {
            if let Some(names) = cache.get(table) {
                return Ok(names.clone());
            }
        }
        let out = self
            .client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("DescribeTable", e))?;
        let schema = out
            .table
            .and_then(|t| t.key_schema)
            .ok_or_else(|| StoreError::Inconsistent(format!("table {table}: no key schema")))?;
        let mut names: Vec<(bool, String)> = schema
            .into_iter()
            .map(|k| (k.key_type != KeyType::Hash, k.attribute_name))
            .collect();
        names.sort();
        let names: Vec<String> = names.into_iter().map(|(_, n)| n).collect();
        if let Ok(mut cache) = self.key_schemas.lock() {
            cache.insert(table.to_string(), names.clone());
        }
        Ok(names)
    }

    /// Resolve every request's item key; two requests on one item are refused.
    pub(crate) async fn resolve(&self, requests: &[TxRequest]) -> Result<Vec<Resolved>, TxError> {
        let mut out = Vec::with_capacity(requests.len());
        let mut seen = BTreeSet::new();
        for (index, request) in requests.iter().enumerate() {
            let names = self.key_names(&request.table).await?;
            let key_json = request.key_json(&names).map_err(|m| {
                TxError::Rejected(Rejection::new(
                    RejectionCode::InvalidKey,
                    format!("request {index}: {m}"),
                ))
            })?;
            let key = ItemKey::from_json(&Value::Object(key_json)).map_err(|m| {
                TxError::Rejected(Rejection::new(
                    RejectionCode::InvalidKey,
                    format!("request {index}: {m}"),
                ))
            })?;
            let order = (request.table.clone(), key.canonical().to_string());
            if !seen.insert(order.clone()) {
                return Err(TxError::Rejected(Rejection::new(
                    RejectionCode::DuplicateItem,
                    format!("request {index}: another request already names this item"),
                )));
            }
            out.push(Resolved {
                index,
                request: request.clone(),
                key: key.to_item().map_err(StoreError::from)?,
                key_attribute: names.first().cloned().unwrap_or_default(),
                order,
            });
        }
        Ok(out)
    }

    /// Run one transaction message to its outcome (or resume it, or report its outcome).
    pub async fn run(&self, message: &TxMessage, deadline: Deadline) -> Result<TxReport, TxError> {
        let cost = Cost::default();
        let outcome = self.run_with(message, deadline, &cost).await?;
        Ok(TxReport {
            outcome,
            write_calls: cost.write_calls(),
            write_units: cost.write_units(),
        })
    }

    async fn run_with(
        &self,
        message: &TxMessage,
        deadline: Deadline,
        cost: &Cost,
    ) -> Result<TxOutcome, TxError> {
        if deadline.expired() {
            return Err(TxError::Deferred);
        }
        let resolved = self.resolve(&message.requests).await?;
        let requests_json = message.requests_json();
        let (mut header, mut decided_here) = match self
            .tx
            .create(&message.tx_id, &requests_json, message.requests.len(), cost)
            .await?
        {
            Ok(h) => (h, false),
            Err(existing) => {
                if self.tx.requests_json(&existing).await? != requests_json {
                    return Err(TxError::Rejected(Rejection::new(
                        RejectionCode::TxIdReused,
                        format!(
                            "txId {} is already recorded with other requests",
                            message.tx_id
                        ),
                    )));
                }
                (existing, false)
            }
        };
        let mut attempts = 1u32;
        let mut invalid: Option<(usize, String)> = None;
        // Whether this run wrote locks: if another coordinator completed the transaction
        // meanwhile, a lock write of ours may have landed after its decision (an orphan).
        let mut locked_here = false;
        loop {
            match header.state {
                TxState::Pending => {
                    if deadline.expired() {
                        return Err(TxError::Deferred);
                    }
                    locked_here = true;
                    let phase = self.lock_all(&header, &resolved, cost, deadline).await?;
                    let next = match phase {
                        None => return Err(TxError::Deferred),
                        Some(LockPhase::Locked(tokens)) => {
                            let tokens = AttributeValue::M(
                                tokens
                                    .into_iter()
                                    .map(|(i, t)| (i.to_string(), s(t)))
                                    .collect(),
                            );
                            self.tx
                                .transition(
                                    &header,
                                    &[
                                        (record::ATTR_STATE, s(TxState::Committed.as_str())),
                                        (record::ATTR_TOKENS, tokens),
                                    ],
                                    &[],
                                    cost,
                                )
                                .await?
                        }
                        Some(LockPhase::ConditionFailed(i)) => {
                            self.roll_back(&header, reason::CONDITION_FAILED, Some(i), cost)
                                .await?
                        }
                        Some(LockPhase::Decided) => Err(None),
                        Some(LockPhase::Invalid(i, m)) => {
                            invalid = Some((i, m));
                            self.roll_back(&header, reason::INVALID_REQUEST, Some(i), cost)
                                .await?
                        }
                    };
                    header = match next {
                        Ok(h) => {
                            decided_here = true;
                            h
                        }
                        Err(Some(h)) => h,
                        Err(None) => self.reload(&header.tx_id).await?,
                    };
                }
                TxState::Committed | TxState::RolledBack => {
                    header = self.complete(&header, &resolved, cost).await?;
                }
                TxState::Completed if locked_here => {
                    self.release_orphans(&header, &resolved, cost).await?;
                    locked_here = false;
                }
                TxState::Completed => match header.decision {
                    Some(TxState::Committed) => {
                        return Ok(if decided_here {
                            TxOutcome::Committed
                        } else {
                            TxOutcome::AlreadyCommitted
                        })
                    }
                    _ => {
                        let why = header.reason.clone().unwrap_or_default();
                        let request = header.failed_request.unwrap_or(0);
                        if why == reason::INVALID_REQUEST {
                            let message = invalid
                                .map(|(_, m)| m)
                                .unwrap_or_else(|| "DynamoDB rejected the request".into());
                            return Err(TxError::Rejected(Rejection::new(
                                RejectionCode::RejectedByDynamodb,
                                format!("request {request}: {message}"),
                            )));
                        }
                        if reason::is_final(&why) {
                            return Ok(if decided_here {
                                TxOutcome::RolledBack { request }
                            } else {
                                TxOutcome::AlreadyRolledBack { request }
                            });
                        }
                        // Aborted (conflict / abandoned): nothing applied; run a new attempt.
                        if attempts >= self.config.max_attempts {
                            return Err(TxError::Contention {
                                tx_id: header.tx_id.clone(),
                                attempts,
                            });
                        }
                        if deadline.expired() {
                            return Err(TxError::Deferred);
                        }
                        attempts += 1;
                        tokio::time::sleep(jitter(BACKOFF_MAX * attempts)).await;
                        header = match self.restart(&header, cost).await? {
                            Ok(h) => h,
                            Err(Some(h)) => h,
                            Err(None) => self.reload(&header.tx_id).await?,
                        };
                    }
                },
            }
        }
    }

    async fn reload(&self, tx_id: &str) -> Result<TxHeader, StoreError> {
        self.tx
            .get(tx_id)
            .await?
            .ok_or_else(|| StoreError::Inconsistent(format!("TX {tx_id}: header vanished")))
    }

    /// `pending → rolled_back` (conditioned on the version read).
    async fn roll_back(
        &self,
        header: &TxHeader,
        why: &str,
        request: Option<usize>,
        cost: &Cost,
    ) -> Result<Result<TxHeader, Option<TxHeader>>, StoreError> {
        let mut set = vec![
            (record::ATTR_STATE, s(TxState::RolledBack.as_str())),
            (record::ATTR_REASON, s(why)),
        ];
        if let Some(i) = request {
            set.push((
                record::ATTR_FAILED_REQUEST,
                AttributeValue::N(i.to_string()),
            ));
        }
        if header.state != TxState::Pending {
            return Ok(Err(Some(header.clone())));
        }
        self.tx.transition(header, &set, &[], cost).await
    }

    /// Completed-and-aborted → pending with the next attempt.
    async fn restart(
        &self,
        header: &TxHeader,
        cost: &Cost,
    ) -> Result<Result<TxHeader, Option<TxHeader>>, StoreError> {
        self.tx
            .transition(
                header,
                &[
                    (record::ATTR_STATE, s(TxState::Pending.as_str())),
                    (
                        record::ATTR_ATTEMPT,
                        AttributeValue::N((header.attempt + 1).to_string()),
                    ),
                    (record::ATTR_SWEEP_KEY, s(record::SWEEP_OPEN)),
                ],
                &[
                    record::ATTR_REASON,
                    record::ATTR_FAILED_REQUEST,
                    record::ATTR_DECISION,
                    record::ATTR_TOKENS,
                ],
                cost,
            )
            .await
    }

    async fn get_item(&self, r: &Resolved) -> Result<Option<Item>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&r.request.table)
            .set_key(Some(r.key.clone()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        Ok(out.item)
    }

    /// Step 2 for every item, in key order. `None`: the deadline came first.
    async fn lock_all(
        &self,
        header: &TxHeader,
        resolved: &[Resolved],
        cost: &Cost,
        deadline: Deadline,
    ) -> Result<Option<LockPhase>, StoreError> {
        let owner = header.owner();
        let mut order: Vec<&Resolved> = resolved.iter().collect();
        order.sort_by(|a, b| a.order.cmp(&b.order));
        let reads: Vec<_> = order.iter().map(|r| self.get_item(r)).collect();
        let reads: Vec<Result<Option<Item>, StoreError>> = futures::stream::iter(reads)
            .buffered(self.config.concurrency)
            .collect()
            .await;
        let mut tokens = BTreeMap::new();
        for (r, read) in order.into_iter().zip(reads) {
            let mut current = read?;
            let mut waited = Duration::ZERO;
            let mut backoff = BACKOFF_START;
            loop {
                if deadline.expired() {
                    return Ok(None);
                }
                if let Some(lock) = current.as_ref().and_then(lock_of) {
                    if lock == owner {
                        let token = current.as_ref().and_then(token_of).unwrap_or_default();
                        tokens.insert(r.index, token.to_string());
                        break;
                    }
                    let item = current.clone().unwrap_or_default();
                    self.meet_lock(r, &item, &mut waited, &mut backoff, cost)
                        .await?;
                    if !self.still_pending(header).await? {
                        return Ok(Some(LockPhase::Decided));
                    }
                    current = self.get_item(r).await?;
                    continue;
                }
                let token = new_token(&owner, r.index);
                match self
                    .lock_write(&owner, r, current.as_ref(), &token, cost)
                    .await?
                {
                    LockWrite::Done => {
                        tokens.insert(r.index, token);
                        break;
                    }
                    LockWrite::ConditionFailed(now) => {
                        let locked = now.as_ref().and_then(lock_of).is_some();
                        if locked || now != current {
                            // Before writing again, make sure nobody decided us meanwhile: a
                            // write after the decision would be an orphan.
                            if !self.still_pending(header).await? {
                                return Ok(Some(LockPhase::Decided));
                            }
                            current = now;
                            continue;
                        }
                        return Ok(Some(LockPhase::ConditionFailed(r.index)));
                    }
                    LockWrite::Invalid(message) => {
                        return Ok(Some(LockPhase::Invalid(r.index, message)))
                    }
                }
            }
        }
        Ok(Some(LockPhase::Locked(tokens)))
    }

    /// Whether this attempt is still pending (a consistent read of the header).
    async fn still_pending(&self, header: &TxHeader) -> Result<bool, StoreError> {
        Ok(self.tx.get(&header.tx_id).await?.is_some_and(|h| {
            h.state == TxState::Pending
                && h.attempt == header.attempt
                && h.version == header.version
        }))
    }

    /// Another transaction's lock is on `item`: decide it (see the module docs).
    async fn meet_lock(
        &self,
        r: &Resolved,
        item: &Item,
        waited: &mut Duration,
        backoff: &mut Duration,
        cost: &Cost,
    ) -> Result<(), StoreError> {
        let lock = lock_of(item).unwrap_or_default();
        let Some((other_id, other_attempt)) = parse_owner(lock) else {
            return Err(StoreError::Inconsistent(format!(
                "unreadable lock {lock:?}"
            )));
        };
        let Some(other) = self.tx.get(other_id).await? else {
            // The holder's record is gone: a straggling write after deletion. Undo it.
            return self.undo_item(r, item, cost).await;
        };
        if other_attempt < other.attempt || other.state == TxState::Completed {
            return self.undo_item(r, item, cost).await;
        }
        match other.state {
            TxState::Committed => {
                let token = token_of(item).unwrap_or_default();
                if other.tokens.values().any(|t| t == token) {
                    self.finalize_item(r, item, cost).await
                } else {
                    self.undo_item(r, item, cost).await
                }
            }
            TxState::RolledBack | TxState::Completed => self.undo_item(r, item, cost).await,
            TxState::Pending => {
                if *waited >= self.config.lock_patience {
                    tracing::debug!(
                        tx_id = other_id,
                        "rolling back a transaction holding a lock"
                    );
                    // Either we decide it or someone else did: both end the wait.
                    let _ = self.roll_back(&other, reason::CONFLICT, None, cost).await?;
                    *waited = Duration::ZERO;
                } else {
                    let pause = *backoff + jitter(*backoff);
                    tokio::time::sleep(pause).await;
                    *waited += pause;
                    *backoff = (*backoff * 2).min(BACKOFF_MAX);
                }
                Ok(())
            }
        }
    }

    /// Step 2 for one item: lock, save the image and apply the request in one write.
    async fn lock_write(
        &self,
        owner: &str,
        r: &Resolved,
        current: Option<&Item>,
        token: &str,
        cost: &Cost,
    ) -> Result<LockWrite, StoreError> {
        let req = &r.request;
        let mut names: HashMap<String, String> = req
            .names
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut values: HashMap<String, AttributeValue> = req
            .attribute_values()
            .map_err(StoreError::from)?
            .into_iter()
            .collect();
        names.insert("#txpl".into(), ATTR_LOCK.into());
        names.insert("#txpv".into(), ATTR_VERSION_TOKEN.into());
        let guard = match current {
            None => {
                names.insert("#txpk".into(), r.key_attribute.clone());
                CONDITION_STILL_ABSENT
            }
            Some(item) => match token_of(item) {
                Some(t) => {
                    values.insert(":txpread".into(), s(t));
                    CONDITION_UNCHANGED_VERSIONED
                }
                None => {
                    names.insert("#txpk".into(), r.key_attribute.clone());
                    CONDITION_UNCHANGED_UNVERSIONED
                }
            },
        };
        let condition = match &req.condition_expression {
            Some(c) => format!("({c}) AND ({guard})"),
            None => guard.to_string(),
        };
        let absent = current.is_none();
        let deletes = match req.kind {
            RequestKind::Delete => true,
            RequestKind::ConditionCheck => absent,
            RequestKind::Put | RequestKind::Update => false,
        };
        let transient =
            absent && matches!(req.kind, RequestKind::Delete | RequestKind::ConditionCheck);
        let image = current.map(|i| AttributeValue::M(i.clone()));

        let result = match req.kind {
            RequestKind::Put => {
                let mut item = req.put_item().map_err(StoreError::from)?;
                item.insert(ATTR_LOCK.into(), s(owner));
                item.insert(ATTR_VERSION_TOKEN.into(), s(token));
                if let Some(image) = image {
                    item.insert(ATTR_IMAGE.into(), image);
                }
                // `#txpl` is used by every guard except the absent one.
                if absent {
                    names.remove("#txpl");
                    names.remove("#txpv");
                }
                self.client
                    .put_item()
                    .table_name(&req.table)
                    .set_item(Some(item))
                    .condition_expression(condition)
                    .set_expression_attribute_names(Some(names))
                    .set_expression_attribute_values(if values.is_empty() {
                        None
                    } else {
                        Some(values)
                    })
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await
                    .map(|o| o.consumed_capacity)
                    .map_err(|e| classify(e, "PutItem"))
            }
            RequestKind::Update | RequestKind::Delete | RequestKind::ConditionCheck => {
                let mut assignments = vec!["#txpl = :txpo", "#txpv = :txpt"];
                values.insert(":txpo".into(), s(owner));
                values.insert(":txpt".into(), s(token));
                if let Some(image) = image {
                    names.insert("#txpi".into(), ATTR_IMAGE.into());
                    values.insert(":txpi".into(), image);
                    assignments.push("#txpi = :txpi");
                }
                if deletes {
                    names.insert("#txpd".into(), ATTR_DELETE.into());
                    values.insert(":txptrue".into(), AttributeValue::Bool(true));
                    assignments.push("#txpd = :txptrue");
                }
                if transient {
                    names.insert("#txptr".into(), ATTR_TRANSIENT.into());
                    assignments.push("#txptr = :txptrue");
                }
                let set = assignments.join(", ");
                let expression = match &req.update_expression {
                    Some(e) if req.kind == RequestKind::Update => merge_set_clause(e, &set),
                    _ => format!("SET {set}"),
                };
                self.client
                    .update_item()
                    .table_name(&req.table)
                    .set_key(Some(r.key.clone()))
                    .update_expression(expression)
                    .condition_expression(condition)
                    .set_expression_attribute_names(Some(names))
                    .set_expression_attribute_values(Some(values))
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await
                    .map(|o| o.consumed_capacity)
                    .map_err(|e| classify(e, "UpdateItem"))
            }
        };
        match result {
            Ok(consumed) => {
                cost.add(consumed.as_ref());
                Ok(LockWrite::Done)
            }
            Err(Failure::Condition(old)) => {
                cost.add_failed();
                Ok(LockWrite::ConditionFailed(old))
            }
            Err(Failure::Other(err)) => {
                cost.add_failed();
                if err.class() == ErrorClass::InvalidRequest {
                    Ok(LockWrite::Invalid(err.to_string()))
                } else {
                    Err(err)
                }
            }
        }
    }

    /// Undo T's change on one item (restore the image, or delete what did not exist).
    async fn undo_item(&self, r: &Resolved, item: &Item, cost: &Cost) -> Result<(), StoreError> {
        let owner = lock_of(item).unwrap_or_default().to_string();
        let token = token_of(item).unwrap_or_default().to_string();
        let result = match item.get(ATTR_IMAGE) {
            Some(AttributeValue::M(image)) => self
                .client
                .put_item()
                .table_name(&r.request.table)
                .set_item(Some(image.clone()))
                .condition_expression(CONDITION_HELD_BY)
                .expression_attribute_names("#txpl", ATTR_LOCK)
                .expression_attribute_names("#txpv", ATTR_VERSION_TOKEN)
                .expression_attribute_values(":txpo", s(owner))
                .expression_attribute_values(":txpt", s(token))
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map(|o| o.consumed_capacity)
                .map_err(|e| classify(e, "PutItem")),
            _ => self.delete_held(r, owner, token).await,
        };
        self.guarded_result(result, cost)
    }

    /// Finalize T's committed change on one item (unlock, or delete).
    async fn finalize_item(
        &self,
        r: &Resolved,
        item: &Item,
        cost: &Cost,
    ) -> Result<(), StoreError> {
        let owner = lock_of(item).unwrap_or_default().to_string();
        let token = token_of(item).unwrap_or_default().to_string();
        let result = if flag(item, ATTR_DELETE) {
            self.delete_held(r, owner, token).await
        } else {
            self.client
                .update_item()
                .table_name(&r.request.table)
                .set_key(Some(r.key.clone()))
                .update_expression(UPDATE_UNLOCK)
                .condition_expression(CONDITION_HELD_BY)
                .expression_attribute_names("#txpl", ATTR_LOCK)
                .expression_attribute_names("#txpv", ATTR_VERSION_TOKEN)
                .expression_attribute_names("#txpi", ATTR_IMAGE)
                .expression_attribute_names("#txpd", ATTR_DELETE)
                .expression_attribute_names("#txptr", ATTR_TRANSIENT)
                .expression_attribute_values(":txpo", s(owner))
                .expression_attribute_values(":txpt", s(token))
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map(|o| o.consumed_capacity)
                .map_err(|e| classify(e, "UpdateItem"))
        };
        self.guarded_result(result, cost)
    }

    async fn delete_held(
        &self,
        r: &Resolved,
        owner: String,
        token: String,
    ) -> Result<Option<ConsumedCapacity>, Failure> {
        self.client
            .delete_item()
            .table_name(&r.request.table)
            .set_key(Some(r.key.clone()))
            .condition_expression(CONDITION_HELD_BY)
            .expression_attribute_names("#txpl", ATTR_LOCK)
            .expression_attribute_names("#txpv", ATTR_VERSION_TOKEN)
            .expression_attribute_values(":txpo", s(owner))
            .expression_attribute_values(":txpt", s(token))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map(|o| o.consumed_capacity)
            .map_err(|e| classify(e, "DeleteItem"))
    }

    /// A finalize/undo whose guard failed was done by someone else: fine.
    fn guarded_result(
        &self,
        result: Result<Option<ConsumedCapacity>, Failure>,
        cost: &Cost,
    ) -> Result<(), StoreError> {
        match result {
            Ok(consumed) => {
                cost.add(consumed.as_ref());
                Ok(())
            }
            Err(Failure::Condition(_)) => {
                cost.add_failed();
                Ok(())
            }
            Err(Failure::Other(e)) => {
                cost.add_failed();
                Err(e)
            }
        }
    }

    /// Steps 4–5 of a decided transaction: finalize (committed, this attempt, recorded token) or
    /// undo (everything else of this transaction) every item, then mark it completed.
    pub(crate) async fn complete(
        &self,
        header: &TxHeader,
        resolved: &[Resolved],
        cost: &Cost,
    ) -> Result<TxHeader, StoreError> {
        let work: Vec<_> = resolved
            .iter()
            .map(|r| self.complete_item(header, r, cost))
            .collect();
        let results: Vec<Result<(), StoreError>> = futures::stream::iter(work)
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        for r in results {
            r?;
        }
        match self
            .tx
            .transition(
                header,
                &[
                    (record::ATTR_STATE, s(TxState::Completed.as_str())),
                    (record::ATTR_DECISION, s(header.state.as_str())),
                    (record::ATTR_SWEEP_KEY, s(record::SWEEP_DONE)),
                ],
                &[],
                cost,
            )
            .await?
        {
            Ok(h) => Ok(h),
            Err(Some(h)) => Ok(h),
            Err(None) => self.reload(&header.tx_id).await,
        }
    }

    async fn complete_item(
        &self,
        header: &TxHeader,
        r: &Resolved,
        cost: &Cost,
    ) -> Result<(), StoreError> {
        let Some(item) = self.get_item(r).await? else {
            return Ok(());
        };
        let Some((tx, attempt)) = lock_of(&item).and_then(parse_owner) else {
            return Ok(());
        };
        if tx != header.tx_id || attempt > header.attempt {
            return Ok(());
        }
        let token = token_of(&item).unwrap_or_default();
        if header.state == TxState::Committed
            && attempt == header.attempt
            && header.tokens.get(&r.index).map(String::as_str) == Some(token)
        {
            self.finalize_item(r, &item, cost).await
        } else {
            self.undo_item(r, &item, cost).await
        }
    }

    /// Undo every lock of a completed transaction still on its items: all are orphans (a
    /// lock write that landed after the decision), since completion finalized or undid every
    /// legitimate one.
    async fn release_orphans(
        &self,
        header: &TxHeader,
        resolved: &[Resolved],
        cost: &Cost,
    ) -> Result<(), StoreError> {
        for r in resolved {
            let Some(item) = self.get_item(r).await? else {
                continue;
            };
            let ours = lock_of(&item)
                .and_then(parse_owner)
                .is_some_and(|(tx, attempt)| tx == header.tx_id && attempt <= header.attempt);
            if ours {
                tracing::info!(tx_id = %header.tx_id, "undoing a lock written after the decision");
                self.undo_item(r, &item, cost).await?;
            }
        }
        Ok(())
    }

    /// Drive a recorded transaction towards completion (the sweeper's step): roll back if
    /// pending, finish if decided. Returns the header after, and what was done.
    pub async fn drive(
        &self,
        tx_id: &str,
        cost: &Cost,
    ) -> Result<Option<(TxHeader, Driven)>, TxError> {
        let Some(mut header) = self.tx.get(tx_id).await? else {
            return Ok(None);
        };
        let mut driven = Driven::Nothing;
        if header.state == TxState::Pending {
            header = match self
                .roll_back(&header, reason::ABANDONED, None, cost)
                .await?
            {
                Ok(h) => {
                    driven = Driven::RolledBack;
                    h
                }
                Err(Some(h)) => h,
                Err(None) => self.reload(tx_id).await?,
            };
        }
        if matches!(header.state, TxState::Committed | TxState::RolledBack) {
            let raw: Vec<Value> = serde_json::from_str(&self.tx.requests_json(&header).await?)
                .map_err(|e| StoreError::Inconsistent(format!("TX {tx_id} requests: {e}")))?;
            let tables: BTreeSet<String> = raw
                .iter()
                .filter_map(|r| r.as_object()?.values().next()?.get("TableName")?.as_str())
                .map(String::from)
                .collect();
            let requests = request::parse_requests(&raw, &tables).map_err(TxError::Rejected)?;
            let resolved = self.resolve(&requests).await?;
            if driven == Driven::Nothing {
                driven = if header.state == TxState::Committed {
                    Driven::Finished
                } else {
                    Driven::RolledBack
                };
            }
            header = self.complete(&header, &resolved, cost).await?;
        }
        Ok(Some((header, driven)))
    }
}

/// What [`Coordinator::drive`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driven {
    /// Already completed.
    Nothing,
    /// Rolled back (it was pending) or completed its rollback.
    RolledBack,
    /// Completed its commit.
    Finished,
}

/// A failed write: its condition, or anything else.
#[derive(Debug)]
enum Failure {
    Condition(Option<Item>),
    Other(StoreError),
}

fn classify<E, R>(err: SdkError<E, R>, operation: &'static str) -> Failure
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    E: OldItem,
    R: std::fmt::Debug,
{
    if let Some(service) = err.as_service_error() {
        if is_conditional(service) {
            return Failure::Condition(service.old_item());
        }
    }
    Failure::Other(StoreError::from_sdk(operation, err))
}

/// The `ALL_OLD` item of a conditional check failure.
trait OldItem {
    fn old_item(&self) -> Option<Item>;
}

impl OldItem for aws_sdk_dynamodb::operation::put_item::PutItemError {
    fn old_item(&self) -> Option<Item> {
        match self {
            Self::ConditionalCheckFailedException(e) => e.item().cloned(),
            _ => None,
        }
    }
}

impl OldItem for aws_sdk_dynamodb::operation::update_item::UpdateItemError {
    fn old_item(&self) -> Option<Item> {
        match self {
            Self::ConditionalCheckFailedException(e) => e.item().cloned(),
            _ => None,
        }
    }
}

impl OldItem for aws_sdk_dynamodb::operation::delete_item::DeleteItemError {
    fn old_item(&self) -> Option<Item> {
        match self {
            Self::ConditionalCheckFailedException(e) => e.item().cloned(),
            _ => None,
        }
    }
}

/// Remove the protocol attributes from an item read from a table.
pub fn strip_protocol(mut item: Item) -> Item {
    for name in ITEM_PROTOCOL_ATTRIBUTES {
        item.remove(name);
    }
    item
}

/// An item as plain JSON without protocol attributes.
pub fn plain_json(item: Item) -> Result<Map<String, Value>, StoreError> {
    Ok(crate::ddb::item::item_to_json(strip_protocol(item))?)
}

impl Coordinator {
    async fn apply_one(
        &self,
        i: usize,
        message: TxMessage,
        deadline: Deadline,
        calls: &AtomicU64,
    ) -> (usize, RecordResult<TxOutcome>) {
        let cost = Cost::default();
        let result = self.run_with(&message, deadline, &cost).await;
        calls.fetch_add(cost.write_calls(), Ordering::Relaxed);
        let result = match result {
            Ok(outcome) => {
                tracing::info!(tx_id = %message.tx_id, outcome = outcome.label(),
                    write_calls = cost.write_calls(), write_units = cost.write_units(),
                    "transaction");
                RecordResult::Done(outcome)
            }
            Err(TxError::Rejected(r)) => RecordResult::Rejected(r),
            Err(TxError::Deferred) => RecordResult::Deferred,
            Err(TxError::Store(e)) => RecordResult::Failed(e),
            Err(e @ TxError::Contention { .. }) => RecordResult::Failed(StoreError::Sdk {
                operation: "Transaction",
                class: ErrorClass::Transient,
                code: "Contention".into(),
                message: e.to_string(),
            }),
        };
        (i, result)
    }
}

impl Protocol for Coordinator {
    type Record = TxMessage;
    type Outcome = TxOutcome;

    fn parse(&self, body: &[u8]) -> Result<TxMessage, Rejection> {
        self.parse_message(body)
    }

    async fn apply(
        &self,
        records: Vec<(usize, TxMessage)>,
        deadline: Deadline,
    ) -> Applied<TxOutcome> {
        let calls = AtomicU64::new(0);
        let calls_ref = &calls;
        let work: Vec<_> = records
            .into_iter()
            .map(|(i, message)| self.apply_one(i, message, deadline, calls_ref))
            .collect();
        let results: Vec<(usize, RecordResult<TxOutcome>)> = futures::stream::iter(work)
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        Applied {
            results,
            write_calls: usize::try_from(calls.into_inner()).unwrap_or(usize::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fresh() {
        assert_ne!(new_token("t#1", 0), new_token("t#1", 0));
        assert_eq!(new_token("t#1", 0).len(), 32);
    }

    #[test]
    fn jitter_stays_below_its_bound() {
        for _ in 0..100 {
            assert!(jitter(Duration::from_millis(3)) < Duration::from_millis(3));
        }
    }
}
