//! The protocol: claim, run, store (or release), and the answers to duplicates.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use crate::ddb::clock::epoch_millis;
use crate::ddb::retry::Backoff;
use crate::StoreError;
use futures::FutureExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::cache::Cached;
use super::config::PayloadCheck;
use super::key::{KeySourceError, RecordKey};
use super::stats::Event;
use super::{
    Claim, ClaimRequest, Completion, Idempotency, IdempotencyError, NoValue, Persistence, Run,
    Status, StoredRecord,
};

/// Waits before sending a failed completion again (while the claim holds the key).
const COMPLETION_RETRY: Backoff = Backoff::new(
    std::time::Duration::from_millis(10),
    std::time::Duration::from_millis(500),
    8,
);

/// Waits before claiming again a key whose holder's claim ends before this run's deadline
/// (the delays grow to 1 s; the loop is bounded by the deadline, not by this count).
const HOLDER_WAIT: Backoff = Backoff::new(
    std::time::Duration::from_millis(20),
    std::time::Duration::from_secs(1),
    usize::MAX,
);

/// Longest operation name.
const MAX_OPERATION_BYTES: usize = 128;

impl<P: Persistence> Idempotency<P> {
    /// [`Call::run`](super::Call::run) with a key read as a JSON value (Powertools' format hashes the
    /// value, not its text).
    #[doc(hidden)]
    pub async fn run_keyed<T, E, F, Fut>(
        &self,
        operation: &str,
        key: &RecordKey,
        payload: &impl Serialize,
        deadline_ms: Option<u64>,
        wait_for_holder: bool,
        function: F,
    ) -> Result<Run<T>, IdempotencyError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        if !self.config.enabled {
            return self.run_disabled(function).await;
        }
        let format = self.persistence.format();
        let prefixed = self.config.operation_as_key_prefix
            || format == super::RecordFormat::PowertoolsTypeScript;
        check_operation(operation, prefixed && format.is_powertools())?;
        if key.text.is_empty() {
            return Err(IdempotencyError::Key(KeySourceError::Empty {
                expression: "the key given".into(),
            }));
        }
        let stored_key = if prefixed {
            format.prefixed_key(operation, &key.text, &key.json)
        } else {
            format.stored_key(&self.config.namespace, operation, &key.text, &key.json)
        };
        let hash = self.payload_hash(payload)?;
        let now_ms = epoch_millis();
        if let Some(cached) = self.cache.get(&stored_key, now_ms) {
            let stored = StoredRecord {
                status: Status::Completed {
                    result: cached.result,
                },
                payload_hash: cached.payload_hash,
                token: String::new(),
                expires_at_s: cached.expires_at_s,
                operation: cached.operation,
            };
            return self.answer_existing(&stored_key, operation, &hash, stored);
        }
        let deadline_ms = deadline_ms.and_then(|d| epoch_deadline(d, now_ms));
        let until_ms = deadline_ms
            .unwrap_or_else(|| now_ms.saturating_add(millis(self.config.in_progress_expiry)));
        let token = format!("{:032x}", rand::random::<u128>());
        let mut request = ClaimRequest::new(
            stored_key,
            operation,
            token,
            now_ms,
            until_ms,
            self.config.expires_after.as_secs(),
        )
        .with_payload_hash(hash);
        let wait_until_ms = deadline_ms.filter(|_| wait_for_holder);
        match self.claim_or_wait(&mut request, wait_until_ms).await {
            Err(e) => Err(IdempotencyError::Store(e)),
            Ok(Claim::Claimed) => self.run_claimed(&request, function).await,
            Ok(Claim::Existing(record)) => self.found(&request, record),
        }
    }

    /// Claim the key. With `wait_until_ms` (this run's own deadline), a live claim of
    /// another run (same operation and payload) that ends before it is waited for, and the
    /// key claimed again, until that run completed (replayed) or its claim lapsed (run
    /// here): a stream retried at once would otherwise spend the mapping's
    /// `MaximumRetryAttempts` on `InProgress` in milliseconds. A claim that outlasts the
    /// deadline is answered at once.
    async fn claim_or_wait(
        &self,
        request: &mut ClaimRequest,
        wait_until_ms: Option<u64>,
    ) -> Result<Claim, StoreError> {
        let mut waits = HOLDER_WAIT.delays();
        loop {
            let claim = self.persistence.claim(request).await?;
            let (Some(limit), Claim::Existing(record)) = (wait_until_ms, &claim) else {
                return Ok(claim);
            };
            let Status::InProgress { until_ms } = record.status else {
                return Ok(claim);
            };
            let same_operation = record
                .operation
                .as_deref()
                .is_none_or(|op| op == request.operation);
            let now = epoch_millis();
            if !same_operation
                || !self.matches(&request.payload_hash, &record.payload_hash)
                || until_ms >= limit
            {
                return Ok(claim);
            }
            // Never sleep far past the holder's end: the claim is free 1 ms after it.
            let to_free = until_ms.saturating_add(1).saturating_sub(now).max(1);
            let wait = waits.next().map_or(to_free, |w| millis(w).min(to_free));
            if now.saturating_add(wait) >= limit {
                return Ok(claim);
            }
            self.counters.count(Event::Waited);
            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
            request.now_ms = epoch_millis();
        }
    }

    /// The answer to a claim that found another run's live record, a completed one cached.
    fn found<T: DeserializeOwned, E>(
        &self,
        request: &ClaimRequest,
        record: StoredRecord,
    ) -> Result<Run<T>, IdempotencyError<E>> {
        let answer = self.answer_existing(
            &request.key,
            &request.operation,
            &request.payload_hash,
            record.clone(),
        );
        if let (Ok(_), Status::Completed { result }) = (&answer, record.status) {
            self.remember(
                &request.key,
                &record.payload_hash,
                record.operation,
                result,
                record.expires_at_s,
            );
        }
        answer
    }

    /// A live record of another run: in progress, or its result replayed.
    fn answer_existing<T: DeserializeOwned, E>(
        &self,
        key: &str,
        operation: &str,
        hash: &str,
        record: StoredRecord,
    ) -> Result<Run<T>, IdempotencyError<E>> {
        let same_operation = record.operation.as_deref().is_none_or(|op| op == operation);
        if !same_operation || !self.matches(hash, &record.payload_hash) {
            return Err(IdempotencyError::PayloadMismatch { key: key.into() });
        }
        match record.status {
            Status::InProgress { until_ms } => {
                self.counters.count(Event::InProgress);
                Err(IdempotencyError::InProgress { until_ms })
            }
            Status::Completed { result: None } => {
                self.counters.count(Event::ReplayedWithoutValue);
                Ok(Run::ReplayedWithoutValue(NoValue::NotKept))
            }
            Status::Completed {
                result: Some(bytes),
            } => match serde_json::from_slice(&bytes) {
                Ok(value) => {
                    self.counters.count(Event::Replayed);
                    Ok(Run::Replayed(value))
                }
                Err(e) => {
                    tracing::warn!(key, error = %e,
                        "a completed run's stored result does not deserialize into this type; acknowledged without a value");
                    self.counters.count(Event::ReplayedWithoutValue);
                    Ok(Run::ReplayedWithoutValue(NoValue::Unreadable {
                        error: e.to_string(),
                    }))
                }
            },
        }
    }

    /// The function, under our claim: its result stored, or the key released (an error, a
    /// panic, a result that cannot be serialized).
    async fn run_claimed<T, E, F, Fut>(
        &self,
        claim: &ClaimRequest,
        function: F,
    ) -> Result<Run<T>, IdempotencyError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let outcome = AssertUnwindSafe(async move { function().await })
            .catch_unwind()
            .await;
        let value = match outcome {
            Ok(Ok(value)) => value,
            Ok(Err(e)) => {
                self.release(claim).await;
                return Err(IdempotencyError::Handler(e));
            }
            Err(panic) => {
                self.release(claim).await;
                std::panic::resume_unwind(panic);
            }
        };
        // The effect ran: the key is never released now. A result that cannot be serialized
        // is recorded as completed without it (duplicates: `ReplayedWithoutValue`).
        let result = match serde_json::to_vec(&value) {
            Ok(result) => Some(result),
            Err(e) => {
                tracing::warn!(key = %claim.key, error = %e,
                    "the result cannot be serialized: recorded as completed without it; duplicates are acknowledged without a value");
                self.counters.count(Event::ResultNotSerialized);
                None
            }
        };
        Ok(self.completed(claim, value, result).await)
    }

    /// The answer of a run that finished: stored (cached), or not the stored value.
    async fn completed<T>(
        &self,
        claim: &ClaimRequest,
        value: T,
        result: Option<Vec<u8>>,
    ) -> Run<T> {
        let expires_at_s =
            (epoch_millis() / 1000).saturating_add(self.config.expires_after.as_secs());
        match self
            .store_result(claim, result.as_deref(), expires_at_s)
            .await
        {
            Ok(Completion::Stored) => {
                self.remember(
                    &claim.key,
                    &claim.payload_hash,
                    Some(claim.operation.clone()),
                    result,
                    expires_at_s,
                );
                self.counters.count(super::stats::Event::Ran);
                Run::Ran(value)
            }
            Ok(Completion::StoredWithoutResult { bytes }) => {
                if bytes > 0 {
                    tracing::warn!(key = %claim.key, bytes,
                    "the result is too large for one item: recorded as completed without it; duplicates are acknowledged without a value");
                }
                self.remember(
                    &claim.key,
                    &claim.payload_hash,
                    Some(claim.operation.clone()),
                    None,
                    expires_at_s,
                );
                self.counters.count(Event::Ran);
                Run::Ran(value)
            }
            Ok(Completion::TakenOver(_)) => {
                tracing::warn!(key = %claim.key,
                    "this run outlived its claim and another run took the key over: its result is not stored");
                self.cache.remove(&claim.key);
                self.counters.count(Event::ResultNotStored);
                Run::NotStored(value)
            }
            Err(err) => {
                tracing::error!(key = %claim.key, error = %err,
                    "the function ran but its result could not be stored; the key stays in progress until its claim expires");
                self.counters.count(Event::ResultNotStored);
                Run::NotStored(value)
            }
        }
    }

    /// The layer turned off: the function runs, nothing is claimed or stored
    /// (`NotStored`, counted).
    #[doc(hidden)]
    pub async fn run_disabled<T, E, F, Fut>(
        &self,
        function: F,
    ) -> Result<Run<T>, IdempotencyError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.counters.count(Event::Disabled);
        function()
            .await
            .map(Run::NotStored)
            .map_err(IdempotencyError::Handler)
    }

    async fn release(&self, claim: &ClaimRequest) {
        self.counters.count(Event::Failed);
        if let Err(err) = self.persistence.release(&claim.key, &claim.token).await {
            tracing::warn!(key = %claim.key, error = %err,
                "could not release the idempotency key; it frees itself when its claim expires");
        }
    }

    /// Store the run's result: the completion, sent again after a retryable failure while
    /// the claim holds the key (it is conditioned on the claim's token, so sending it again
    /// is safe; once the claim expired another run may own the key).
    async fn store_result(
        &self,
        claim: &ClaimRequest,
        result: Option<&[u8]>,
        expires_at_s: u64,
    ) -> Result<Completion, StoreError> {
        let mut waits = COMPLETION_RETRY.delays();
        loop {
            let done = self
                .persistence
                .complete(&claim.key, &claim.token, result, expires_at_s)
                .await;
            let err = match done {
                Err(err) if err.is_retryable() => err,
                done => return done,
            };
            let left = claim.in_progress_until_ms.saturating_sub(epoch_millis());
            let wait = match waits.next() {
                Some(wait) if wait.as_millis() < u128::from(left) => wait,
                _ => return Err(err),
            };
            tracing::warn!(key = %claim.key, error = %err, "storing the result failed; sending it again");
            tokio::time::sleep(wait).await;
        }
    }

    fn matches(&self, hash: &str, stored: &str) -> bool {
        matches!(self.config.payload_check, PayloadCheck::Off)
            || stored.is_empty()
            || hash == stored
    }

    fn payload_hash<E>(&self, payload: &impl Serialize) -> Result<String, IdempotencyError<E>> {
        let pointers = match &self.config.payload_check {
            PayloadCheck::Off => return Ok(String::new()),
            PayloadCheck::Whole => None,
            PayloadCheck::At(pointers) => Some(pointers),
        };
        let value = serde_json::to_value(payload).map_err(IdempotencyError::Result)?;
        let part = match pointers {
            None => value,
            Some(pointers) => {
                if pointers.iter().all(|p| value.pointer(p).is_none()) {
                    tracing::warn!(pointers = ?pointers,
                        "no validate_payload_at pointer matches the payload: its part is hashed as null, as Powertools does, so the check compares nothing");
                }
                let mut parts: Vec<Value> = pointers
                    .iter()
                    .map(|p| value.pointer(p).cloned().unwrap_or(Value::Null))
                    .collect();
                match parts.len() {
                    1 => parts.pop().unwrap_or(Value::Null),
                    _ => Value::Array(parts),
                }
            }
        };
        Ok(self.persistence.format().payload_hash(&part))
    }

    fn remember(
        &self,
        key: &str,
        payload_hash: &str,
        operation: Option<String>,
        result: Option<Vec<u8>>,
        expires_at_s: u64,
    ) {
        self.cache.put(
            key,
            Cached {
                payload_hash: payload_hash.to_string(),
                operation,
                result,
                expires_at_s,
            },
        );
    }
}

/// An operation is 1 to 128 bytes without `#` (which separates it from the key), unless it is
/// a whole Powertools key prefix (`hash_allowed`: the key after it is a fixed-length digest).
fn check_operation<E>(operation: &str, hash_allowed: bool) -> Result<(), IdempotencyError<E>> {
    let hash = !hash_allowed && operation.contains('#');
    if operation.is_empty() || operation.len() > MAX_OPERATION_BYTES || hash {
        return Err(IdempotencyError::Key(KeySourceError::Operation {
            operation: operation.to_string(),
        }));
    }
    Ok(())
}

/// A deadline as an epoch time in the future: `0` is none, a value too small to be an epoch
/// time (before 2001) is a budget from now (`cargo lambda watch` sends the function's timeout
/// that way), a time already past is none (a claim until then would hold nothing).
fn epoch_deadline(deadline_ms: u64, now_ms: u64) -> Option<u64> {
    const EPOCH_2001_MS: u64 = 978_307_200_000;
    match deadline_ms {
        0 => None,
        budget if budget < EPOCH_2001_MS => Some(now_ms.saturating_add(budget)),
        past if past <= now_ms => {
            tracing::warn!(deadline_ms = past, now_ms,
                "the deadline given is already past: the key is held for in_progress_expiry instead");
            None
        }
        at => Some(at),
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
