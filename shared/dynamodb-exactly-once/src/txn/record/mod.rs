//! The TX record: one header item plus, for large request lists, part items, all under the
//! transaction's partition key (hash `TxId` + range `Part`), so there is no size ceiling.
//!
//! ```text
//! TxId=t-1  Part=#               State, Version, Attempt, Nonce, RequestsHash, Requests | Parts,
//!                                Tokens, Reason, FailedRequest, Decision,
//!                                SweepKey (GSI hash, until completed), LastTouched (GSI range,
//!                                epoch ms), ExpiresAt (TTL, once completed)
//! TxId=t-1  Part=p#<nonce>#00001 Chunk (requests JSON, bytes 0..PART_BYTES)
//! TxId=t-1  Part=p#<nonce>#00002 Chunk (…)
//! ```
//!
//! Parts are written before the header or in the same `TransactWriteItems`
//! ([`CREATE_AT_ONCE_BYTES`](create::CREATE_AT_ONCE_BYTES)), so a header that exists always has all its parts; the
//! header is created with `attribute_not_exists(TxId)` (the `txId` idempotency point). Every
//! creation draws a fresh `Nonce` and writes its parts under it: a second creation of the
//! same `txId` (a duplicate delivery, or a different body reusing the id) writes parts that
//! no header names (they expire by TTL) and can never overwrite the recorded ones. The
//! header keeps `RequestsHash` (SHA-256 of the canonical requests JSON): a delivery is the
//! recorded transaction exactly when its hash matches, whatever the size of the requests,
//! without reading the parts. A creation whose response was lost and that the SDK retried
//! finds its own `Nonce` in the header: it is still the creator.
//!
//! * [`TxHeader`] is the decoded header (`TryFrom<&Item>`; an item of another shape is
//!   [`StoreError::Inconsistent`]), with its [`TxState`] and typed [`RollbackReason`].
//! * [`TxTable`] reads and writes records; its conditional writes return what happened as a
//!   value: [`Creation`] for the header's creation, [`Transition`] for every later header
//!   write.

mod create;
mod decided;
mod state;
mod table;

use std::collections::BTreeMap;
use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::ddb::error::StoreError;
use crate::ddb::item::Item;

use crate::txn::format::{
    ATTR_ATTEMPT, ATTR_DECIDER, ATTR_DECISION, ATTR_FAILED_REQUEST, ATTR_ISSUED_AT,
    ATTR_LAST_TOUCHED, ATTR_NONCE, ATTR_PART, ATTR_PARTS, ATTR_REASON, ATTR_REASON_DETAIL,
    ATTR_REQUESTS, ATTR_REQUESTS_HASH, ATTR_STATE, ATTR_TOKENS, ATTR_TX_ID, ATTR_VERSION,
    HEADER_PART, KEEP_LOCK_SUFFIX, REQUEST_PART_PREFIX, SWEEP_OPEN_PREFIX,
};
pub(crate) use decided::{expires_at, Decided};
pub(crate) use table::{Creation, Transition, TxTable};

/// Number of `SweepKey` shards: index writes spread over this many partitions (each takes
/// about 1,000 writes/s; a committed transaction makes 2, so about 8,000 TX/s in all).
/// Fixed: the sweeper reads exactly these keys, so changing it strands open entries.
pub(crate) const SWEEP_SHARDS: u32 = 16;
/// Largest requests JSON kept inline in the header; larger lists go to parts. Small on
/// purpose: every lock write checks the header in a `TransactWriteItems`, which DynamoDB
/// bills by the header's size (twice), so the header stays under 1 KB until the commit
/// adds its tokens (a two-item transfer stays inline; 100 requests inline would cost about
/// 12 more write units per item).
pub(crate) const INLINE_REQUEST_BYTES: usize = 640;
/// Room one commit token takes in the header (`Tokens` entry: index + 32-hex token + overhead).
pub(crate) const TOKEN_ENTRY_BYTES: usize = 48;
/// Most requests per transaction: the commit tokens of all items must fit in the header.
pub(crate) const MAX_REQUESTS: usize = (350 * 1024) / TOKEN_ENTRY_BYTES;
/// Bytes of requests JSON per part item.
pub(crate) const PART_BYTES: usize = 350 * 1024;
/// Part items expire (TTL backstop) this long after they are written.
pub(crate) const PART_TTL_SECONDS: u64 = 90 * 24 * 3600;

/// The states of a transaction.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxState {
    /// Locking; nothing decided.
    Pending,
    /// Decided: every change stays (the commit point).
    Committed,
    /// Decided: every change is undone.
    RolledBack,
    /// Every item finalized; the record is kept for idempotency until the retention expires.
    Completed,
}

impl TxState {
    /// The stored value.
    pub fn as_str(self) -> &'static str {
        match self {
            TxState::Pending => "pending",
            TxState::Committed => "committed",
            TxState::RolledBack => "rolled_back",
            TxState::Completed => "completed",
        }
    }

    /// Parse a stored value.
    pub fn parse(s: &str) -> Option<TxState> {
        match s {
            "pending" => Some(TxState::Pending),
            "committed" => Some(TxState::Committed),
            "rolled_back" => Some(TxState::RolledBack),
            "completed" => Some(TxState::Completed),
            _ => None,
        }
    }
}

/// Why a transaction rolled back (the header's `Reason`).
///
/// A *final* reason ends the transaction; any other reason means the attempt was aborted
/// without applying anything, and a redelivered message runs the next attempt.
///
/// ```
/// use dynamodb_exactly_once::txn::RollbackReason;
/// assert_eq!(RollbackReason::parse("conflict"), RollbackReason::Conflict);
/// assert_eq!(RollbackReason::ConditionFailed.as_str(), "condition_failed");
/// assert!(RollbackReason::Read.is_final());
/// // A reason this version does not know is kept, and is not final (the attempt may restart).
/// let newer = RollbackReason::parse("from_the_future");
/// assert_eq!(newer.as_str(), "from_the_future");
/// assert!(!newer.is_final());
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollbackReason {
    /// A request's `ConditionExpression` failed: final.
    ConditionFailed,
    /// DynamoDB rejected a request as invalid: final.
    InvalidRequest,
    /// Another coordinator needed an item it held: the attempt is retried.
    Conflict,
    /// The sweeper found it stale: the attempt is retried if the message comes again.
    Abandoned,
    /// A locked read released its locks: final.
    Read,
    /// An item and the image the lock path saves beside its new value would exceed
    /// DynamoDB's 400 KB item limit: final.
    ItemTooLarge,
    /// A stored reason this version does not know (written by another version): kept as
    /// read, treated as not final.
    Other(String),
}

impl RollbackReason {
    /// The stored value.
    pub fn as_str(&self) -> &str {
        match self {
            RollbackReason::ConditionFailed => "condition_failed",
            RollbackReason::InvalidRequest => "invalid_request",
            RollbackReason::Conflict => "conflict",
            RollbackReason::Abandoned => "abandoned",
            RollbackReason::Read => "read",
            RollbackReason::ItemTooLarge => "item_too_large",
            RollbackReason::Other(other) => other,
        }
    }

    /// The stored `Reason` and `ReasonDetail`: a final reason the previous release does not
    /// know (`item_too_large`) is stored as `invalid_request`, which every release reads as
    /// final, with the reason as its detail ([`RollbackReason::parse_stored`] reads it back).
    pub(crate) fn stored(&self) -> (&str, Option<&str>) {
        match self {
            RollbackReason::ItemTooLarge => ("invalid_request", Some(self.as_str())),
            other => (other.as_str(), None),
        }
    }

    /// Parse a stored `Reason` and its `ReasonDetail` ([`RollbackReason::stored`]).
    pub(crate) fn parse_stored(reason: &str, detail: Option<&str>) -> RollbackReason {
        match (
            RollbackReason::parse(reason),
            detail.map(RollbackReason::parse),
        ) {
            (RollbackReason::InvalidRequest, Some(RollbackReason::ItemTooLarge)) => {
                RollbackReason::ItemTooLarge
            }
            (parsed, _) => parsed,
        }
    }

    /// Parse a stored value (never fails: an unknown value is [`RollbackReason::Other`]).
    pub fn parse(s: &str) -> RollbackReason {
        match s {
            "condition_failed" => RollbackReason::ConditionFailed,
            "invalid_request" => RollbackReason::InvalidRequest,
            "conflict" => RollbackReason::Conflict,
            "abandoned" => RollbackReason::Abandoned,
            "read" => RollbackReason::Read,
            "item_too_large" => RollbackReason::ItemTooLarge,
            other => RollbackReason::Other(other.to_string()),
        }
    }

    /// Whether a rollback for this reason ends the transaction (otherwise it may restart).
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            RollbackReason::ConditionFailed
                | RollbackReason::InvalidRequest
                | RollbackReason::Read
                | RollbackReason::ItemTooLarge
        )
    }
}

impl fmt::Display for RollbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A TX record header as read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TxHeader {
    /// The transaction id.
    pub(crate) tx_id: String,
    /// The state.
    pub(crate) state: TxState,
    /// Optimistic-concurrency version.
    pub(crate) version: u64,
    /// The attempt.
    pub(crate) attempt: u64,
    /// Inline requests JSON, when not in parts.
    pub(crate) inline_requests: Option<String>,
    /// Part count.
    pub(crate) parts: u64,
    /// Request index → token (set at commit).
    pub(crate) tokens: BTreeMap<usize, String>,
    /// Rollback reason.
    pub(crate) reason: Option<RollbackReason>,
    /// Failed request index.
    pub(crate) failed_request: Option<usize>,
    /// Decision once completed.
    pub(crate) decision: Option<TxState>,
    /// The creation's nonce (absent on records written before nonces).
    pub(crate) nonce: Option<String>,
    /// SHA-256 of the requests JSON (absent on records written before hashes).
    pub(crate) requests_hash: Option<String>,
    /// The message's `issuedAt`, hashed with the requests (absent: hashed without it, by a
    /// message without one or by a version before `issuedAt`).
    pub(crate) issued_at_ms: Option<u64>,
    /// The run that wrote the decision, when a coordinator run did.
    pub(crate) decider: Option<String>,
    /// Last state change, epoch ms.
    pub(crate) last_touched_ms: u64,
}

impl TxHeader {
    /// The lock owner string of this attempt: `txId#attempt`.
    pub(crate) fn owner(&self) -> String {
        owner(&self.tx_id, self.attempt)
    }

    /// The decision: the state, or the recorded decision once completed.
    pub(crate) fn decision(&self) -> Option<TxState> {
        match self.state {
            TxState::Committed | TxState::RolledBack => Some(self.state),
            TxState::Completed => self.decision,
            TxState::Pending => None,
        }
    }
}

/// Decode a header item; an item without `TxId`, a known `State` or `Version`, or with
/// malformed `Tokens`, is [`StoreError::Inconsistent`].
impl TryFrom<&Item> for TxHeader {
    type Error = StoreError;

    fn try_from(item: &Item) -> Result<TxHeader, StoreError> {
        let tx_id = get_s(item, ATTR_TX_ID).ok_or_else(|| inconsistent("no TxId"))?;
        let state = get_s(item, ATTR_STATE)
            .and_then(|s| TxState::parse(&s))
            .ok_or_else(|| inconsistent("bad State"))?;
        Ok(TxHeader {
            tx_id,
            state,
            version: get_n(item, ATTR_VERSION).ok_or_else(|| inconsistent("no Version"))?,
            attempt: get_n(item, ATTR_ATTEMPT).unwrap_or(1),
            inline_requests: get_s(item, ATTR_REQUESTS),
            parts: get_n(item, ATTR_PARTS).unwrap_or(0),
            tokens: decode_tokens(item)?,
            reason: get_s(item, ATTR_REASON).map(|s| {
                RollbackReason::parse_stored(&s, get_s(item, ATTR_REASON_DETAIL).as_deref())
            }),
            failed_request: get_n(item, ATTR_FAILED_REQUEST).and_then(|v| usize::try_from(v).ok()),
            decision: get_s(item, ATTR_DECISION).and_then(|s| TxState::parse(&s)),
            nonce: get_s(item, ATTR_NONCE),
            requests_hash: get_s(item, ATTR_REQUESTS_HASH),
            issued_at_ms: get_n(item, ATTR_ISSUED_AT),
            decider: get_s(item, ATTR_DECIDER),
            last_touched_ms: get_n(item, ATTR_LAST_TOUCHED).unwrap_or(0),
        })
    }
}

fn inconsistent(what: &str) -> StoreError {
    StoreError::Inconsistent(format!("TX header: {what}"))
}

/// `Tokens` (request index → token); absent or not a map: none.
fn decode_tokens(item: &Item) -> Result<BTreeMap<usize, String>, StoreError> {
    let mut tokens = BTreeMap::new();
    if let Some(AttributeValue::M(m)) = item.get(ATTR_TOKENS) {
        for (k, v) in m {
            let i: usize = k.parse().map_err(|_| inconsistent("bad Tokens key"))?;
            let token = v.as_s().map_err(|_| inconsistent("bad token"))?;
            tokens.insert(i, token.clone());
        }
    }
    Ok(tokens)
}

/// Lock owner string.
pub(crate) fn owner(tx_id: &str, attempt: u64) -> String {
    format!("{tx_id}#{attempt}")
}

/// The lock `owner` writes on an item: the owner, with [`KEEP_LOCK_SUFFIX`] when the
/// request leaves the item's values as they are (`keeps`).
pub(crate) fn lock_value(owner: &str, keeps: bool) -> String {
    match keeps {
        true => format!("{owner}{KEEP_LOCK_SUFFIX}"),
        false => owner.to_string(),
    }
}

/// Whether a lock is one that leaves the item's values as they are (no image saved).
pub(crate) fn keeps_values(lock: &str) -> bool {
    lock.ends_with(KEEP_LOCK_SUFFIX)
}

/// Split an owner string (or a lock, [`KEEP_LOCK_SUFFIX`] or not) into tx id and attempt.
pub(crate) fn parse_owner(owner: &str) -> Option<(&str, u64)> {
    let owner = owner.strip_suffix(KEEP_LOCK_SUFFIX).unwrap_or(owner);
    let (tx, attempt) = owner.rsplit_once('#')?;
    Some((tx, attempt.parse().ok()?))
}

/// The `SweepKey` of an open transaction: `open#<shard>`, the shard a hash of the `txId`
/// (stable across versions: SHA-256, first four bytes, modulo [`SWEEP_SHARDS`]).
pub(crate) fn sweep_key(tx_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(tx_id.as_bytes());
    let shard = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) % SWEEP_SHARDS;
    format!("{SWEEP_OPEN_PREFIX}{shard:02}")
}

/// Every `SweepKey` an open transaction can have: the shards.
pub(crate) fn sweep_keys() -> Vec<String> {
    (0..SWEEP_SHARDS)
        .map(|shard| format!("{SWEEP_OPEN_PREFIX}{shard:02}"))
        .collect()
}

/// The header's key.
pub(crate) fn header_key(tx_id: &str) -> Item {
    Item::from([
        (ATTR_TX_ID.to_string(), s(tx_id)),
        (ATTR_PART.to_string(), s(HEADER_PART)),
    ])
}

/// The sort-key prefix of a record's parts: `p#<nonce>#` (`p#` for records without nonce).
fn parts_prefix(nonce: Option<&str>) -> String {
    match nonce {
        Some(nonce) => format!("{REQUEST_PART_PREFIX}{nonce}#"),
        None => REQUEST_PART_PREFIX.to_string(),
    }
}

fn part_sort_key(nonce: Option<&str>, i: u64) -> String {
    format!("{}{i:05}", parts_prefix(nonce))
}

/// SHA-256 (hex) of a requests JSON, as kept in `RequestsHash`.
pub(crate) fn requests_hash(requests_json: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(requests_json.as_bytes()))
}

/// What `RequestsHash` keeps of a transaction: the hash of its requests JSON, with its
/// message's `issuedAt` when it has one (a transaction is its requests and its issue time;
/// without one the hash is the requests' alone, as records written before `issuedAt`). The
/// canonical JSON holds no raw newline, so no requests JSON hashes like a timed one.
pub(crate) fn transaction_hash(requests_json: &str, issued_at_ms: Option<u64>) -> String {
    match issued_at_ms {
        None => requests_hash(requests_json),
        Some(at) => requests_hash(&format!("{requests_json}\nissuedAt={at}")),
    }
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn get_s(item: &Item, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

fn get_n(item: &Item, name: &str) -> Option<u64> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests;
