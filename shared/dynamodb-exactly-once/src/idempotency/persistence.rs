//! Where runs are recorded: the [`Persistence`] trait, and [`InMemory`] for tests (the
//! DynamoDB table is [`super::DynamoDbPersistence`]).
//!
//! A key's record goes through two states: **in progress** (claimed by one run, until a
//! time after which another run may claim it) and **completed** (the result, kept until the
//! record expires). Every write names the claim's token, so a run whose claim was taken over
//! can never overwrite the new owner's record.
//!
//! Two expiries, two units: an in-progress record holds its key until `until_ms` (epoch ms,
//! the run's deadline); every record lives until `expires_at_s` (epoch seconds, the table's
//! TTL). A claim writes `expires_at_s` past `until_ms`, so a record in progress is never
//! freed by its TTL; a completion writes `expires_after` from the completion's own time.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use crate::StoreError;

/// A key's stored record.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// In progress or completed.
    pub status: Status,
    /// The hash of the payload it was claimed with (empty: none stored).
    pub payload_hash: String,
    /// The token of the claim that wrote it (empty: written by another library).
    pub token: String,
    /// When it expires (epoch seconds; the table's TTL).
    pub expires_at_s: u64,
    /// The operation that claimed it (`None`: written by another library, whose key names
    /// the operation).
    pub operation: Option<String>,
}

/// The state of a key.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// A run holds the key until `until_ms` (epoch ms).
    InProgress {
        /// The claim's expiry.
        until_ms: u64,
    },
    /// A run finished with this result (JSON; `None`: too large to keep, only its
    /// completion is recorded).
    Completed {
        /// The result, serialized.
        result: Option<Vec<u8>>,
    },
}

/// What claiming a key found.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Claim {
    /// The key is ours until the claim's expiry.
    Claimed,
    /// Another run's live record.
    Existing(StoredRecord),
}

/// What a completion did.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Completion {
    /// The result is stored under our token (a retried completion whose earlier attempt
    /// applied meets our token and applies again).
    Stored,
    /// Stored as completed without the result: too large for one item, or none given.
    StoredWithoutResult {
        /// The result's size (0: none given).
        bytes: usize,
    },
    /// Refused: our claim expired and another run holds the key (its record, when known).
    TakenOver(Option<StoredRecord>),
}

/// One claim: the key, the payload's hash, a token unique to this run, and the times.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// The stored key.
    pub key: String,
    /// The operation (part of the key, kept in the record).
    pub operation: String,
    /// The payload's hash.
    pub payload_hash: String,
    /// Unique to this run.
    pub token: String,
    /// Now, epoch ms (a record in progress until before this, or expired, is taken over).
    pub now_ms: u64,
    /// The claim holds the key until then (epoch ms).
    pub in_progress_until_ms: u64,
    /// The in-progress record's TTL (epoch seconds), after `in_progress_until_ms`.
    pub expires_at_s: u64,
}

impl ClaimRequest {
    /// A claim of `key` for `operation` by `token`, held from `now_ms` until `until_ms`; its
    /// TTL is `keep_s` seconds from now, and never before the claim ends.
    pub fn new(
        key: impl Into<String>,
        operation: impl Into<String>,
        token: impl Into<String>,
        now_ms: u64,
        until_ms: u64,
        keep_s: u64,
    ) -> Self {
        ClaimRequest {
            key: key.into(),
            operation: operation.into(),
            payload_hash: String::new(),
            token: token.into(),
            now_ms,
            in_progress_until_ms: until_ms,
            expires_at_s: (now_ms / 1000)
                .saturating_add(keep_s)
                .max((until_ms / 1000).saturating_add(1)),
        }
    }

    /// The same claim with the payload's hash.
    pub fn with_payload_hash(mut self, hash: impl Into<String>) -> Self {
        self.payload_hash = hash.into();
        self
    }
}

/// A store of idempotency records. Implementations must make `claim` atomic (one run gets
/// `Claimed` for a free key) and condition `complete` and `release` on the token.
pub trait Persistence: Send + Sync {
    /// Claim the key: `Claimed` if it is free (absent, expired, or in progress past its
    /// time), else the live record. A claim retried after a lost response that finds its own
    /// token *in progress* is `Claimed`; a completed record is never claimed again before it
    /// expires, even by the token that completed it (a late copy of the claim).
    fn claim(
        &self,
        request: &ClaimRequest,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Record the result of the run holding `token`, kept until `expires_at_s` (`None`: the
    /// run completed, its result is not kept: it could not be serialized).
    fn complete(
        &self,
        key: &str,
        token: &str,
        result: Option<&[u8]>,
        expires_at_s: u64,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send;

    /// Free the key held by `token` (the run failed: a retry may run).
    fn release(
        &self,
        key: &str,
        token: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// How the layer spells keys and payload hashes for this store.
    fn format(&self) -> super::RecordFormat {
        super::RecordFormat::Native
    }
}

/// Records in memory: the same semantics as the table, for unit tests.
#[derive(Debug, Default)]
pub struct InMemory {
    records: Mutex<HashMap<String, StoredRecord>>,
}

impl InMemory {
    /// An empty store.
    pub fn new() -> Self {
        InMemory::default()
    }

    /// The record of a stored key (tests).
    pub fn get(&self, key: &str) -> Option<StoredRecord> {
        self.lock().get(key).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, StoredRecord>> {
        match self.records.lock() {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// Whether `record` no longer holds its key at `now_ms`.
pub(super) fn is_free(record: &StoredRecord, now_ms: u64) -> bool {
    let expired = record.expires_at_s < now_ms / 1000;
    let stale = matches!(record.status, Status::InProgress { until_ms } if until_ms < now_ms);
    expired || stale
}

impl Persistence for InMemory {
    async fn claim(&self, r: &ClaimRequest) -> Result<Claim, StoreError> {
        let mut records = self.lock();
        match records.get(&r.key) {
            Some(existing)
                if existing.token == r.token
                    && matches!(existing.status, Status::InProgress { .. }) =>
            {
                Ok(Claim::Claimed)
            }
            Some(existing) if !is_free(existing, r.now_ms) => Ok(Claim::Existing(existing.clone())),
            _ => {
                records.insert(
                    r.key.clone(),
                    StoredRecord {
                        status: Status::InProgress {
                            until_ms: r.in_progress_until_ms,
                        },
                        payload_hash: r.payload_hash.clone(),
                        token: r.token.clone(),
                        expires_at_s: r.expires_at_s,
                        operation: Some(r.operation.clone()),
                    },
                );
                Ok(Claim::Claimed)
            }
        }
    }

    async fn complete(
        &self,
        key: &str,
        token: &str,
        result: Option<&[u8]>,
        expires_at_s: u64,
    ) -> Result<Completion, StoreError> {
        let mut records = self.lock();
        match records.get_mut(key) {
            Some(record) if record.token == token => {
                record.status = Status::Completed {
                    result: result.map(<[u8]>::to_vec),
                };
                record.expires_at_s = expires_at_s;
                Ok(match result {
                    Some(_) => Completion::Stored,
                    None => Completion::StoredWithoutResult { bytes: 0 },
                })
            }
            other => Ok(Completion::TakenOver(other.cloned())),
        }
    }

    async fn release(&self, key: &str, token: &str) -> Result<(), StoreError> {
        let mut records = self.lock();
        if records.get(key).is_some_and(|r| r.token == token) {
            records.remove(key);
        }
        Ok(())
    }
}
