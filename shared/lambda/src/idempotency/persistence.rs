//! Where runs are recorded: the [`Persistence`] trait, and [`InMemory`] for tests (the
//! DynamoDB table is [`super::DynamoDbPersistence`]).
//!
//! A key's record goes through two states: **in progress** (claimed by one run, until a
//! time after which another run may claim it) and **completed** (the result, kept until the
//! record expires). Every write names the claim's token, so a run whose claim was taken over
//! can never overwrite the new owner's record.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use dynamodb_exactly_once::StoreError;

/// A key's stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// In progress or completed.
    pub status: Status,
    /// The hash of the payload it was claimed with.
    pub payload_hash: String,
    /// The token of the claim that wrote it.
    pub token: String,
    /// When it expires (epoch seconds; the table's TTL).
    pub expires_at_s: u64,
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
    /// A run finished with this result (JSON).
    Completed {
        /// The result, serialized.
        result: Vec<u8>,
    },
}

/// What claiming a key found.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key is ours until the claim's expiry.
    Claimed,
    /// Another run's live record.
    Existing(StoredRecord),
}

/// One claim: the key, the payload's hash, a token unique to this run, and the times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// The stored key.
    pub key: String,
    /// The payload's hash.
    pub payload_hash: String,
    /// Unique to this run.
    pub token: String,
    /// Now, epoch ms (a record in progress until before this, or expired, is taken over).
    pub now_ms: u64,
    /// The claim holds the key until then (epoch ms).
    pub in_progress_until_ms: u64,
    /// The record's TTL (epoch seconds).
    pub expires_at_s: u64,
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

    /// Record the result of the run holding `token` (nothing when the key was taken over).
    fn complete(
        &self,
        key: &str,
        token: &str,
        result: &[u8],
        expires_at_s: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Free the key held by `token` (the run failed: a retry may run).
    fn release(
        &self,
        key: &str,
        token: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
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
    let expired = record.expires_at_s.saturating_mul(1000) <= now_ms;
    let stale = matches!(record.status, Status::InProgress { until_ms } if until_ms <= now_ms);
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
        result: &[u8],
        expires_at_s: u64,
    ) -> Result<(), StoreError> {
        if let Some(record) = self.lock().get_mut(key).filter(|r| r.token == token) {
            record.status = Status::Completed {
                result: result.to_vec(),
            };
            record.expires_at_s = expires_at_s;
        }
        Ok(())
    }

    async fn release(&self, key: &str, token: &str) -> Result<(), StoreError> {
        let mut records = self.lock();
        if records.get(key).is_some_and(|r| r.token == token) {
            records.remove(key);
        }
        Ok(())
    }
}
