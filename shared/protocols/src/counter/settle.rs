//! What each record of a batch ends as: a chunk's result (written, or why not) settled into
//! one [`RecordResult`] per record, the records of a chunk that overflowed the item split in
//! halves to be written again.

use std::collections::VecDeque;
use std::sync::Arc;

use super::update::KeyEntry;
use crate::batch::{Outcome, RecordResult};
use crate::ddb::{ErrorClass, ItemKey, StoreError};
use crate::rejection::{Rejection, RejectionCode};

/// The outcome of one counter record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterOutcome {
    /// Its deltas were added by this invocation.
    Applied,
    /// Its idempotency key was already applied (earlier, by another invocation, by a write
    /// whose response was lost, or by an earlier record of the same batch).
    Duplicate,
}

impl Outcome for CounterOutcome {
    fn label(&self) -> &'static str {
        match self {
            CounterOutcome::Applied => "applied",
            CounterOutcome::Duplicate => "duplicate",
        }
    }
}

/// Per-record results of an item or a batch.
pub(super) type Results = Vec<(usize, RecordResult<CounterOutcome>)>;

/// A written chunk: the entries applied, and those found already applied.
#[derive(Debug, Default)]
pub(super) struct Written {
    /// Applied by this write.
    pub(super) applied: Vec<KeyEntry>,
    /// Found already applied.
    pub(super) duplicates: Vec<KeyEntry>,
}

/// What writing one chunk gives.
pub(super) type ChunkResult = Result<Written, ChunkError>;

/// Why a chunk could not be written.
#[derive(Debug)]
pub(super) enum ChunkError {
    /// The item would exceed DynamoDB's size limit (a `ValidationException` about the size).
    ItemFull(StoreError),
    /// Another error.
    Store(StoreError),
}

impl From<StoreError> for ChunkError {
    fn from(err: StoreError) -> Self {
        let is_size = matches!(&err, StoreError::Sdk { code, message, .. }
            if code == "ValidationException" && message.contains("size"));
        if is_size {
            ChunkError::ItemFull(err)
        } else {
            ChunkError::Store(err)
        }
    }
}

/// Turn a chunk's result into record results (or into two halves to retry).
pub(super) fn settle(
    key: &ItemKey,
    chunk: Vec<KeyEntry>,
    result: ChunkResult,
    results: &mut Results,
    halves: &mut VecDeque<Vec<KeyEntry>>,
) {
    match result {
        Ok(written) => settle_written(written, results),
        Err(ChunkError::ItemFull(err)) if chunk.len() > 1 => {
            tracing::warn!(item = %key.canonical(), keys = chunk.len(), error = %err,
                "counter item is full; retrying the chunk in halves");
            let mut first = chunk;
            let second = first.split_off(first.len() / 2);
            halves.push_front(second);
            halves.push_front(first);
        }
        Err(ChunkError::ItemFull(err)) => reject_item_full(key, chunk, &err, results),
        Err(ChunkError::Store(err)) => settle_failed(chunk, err, results),
    }
}

/// Applied keys count for their first record; every other record is a duplicate.
fn settle_written(written: Written, results: &mut Results) {
    let decided = written
        .applied
        .into_iter()
        .map(|e| (e, CounterOutcome::Applied))
        .chain(
            written
                .duplicates
                .into_iter()
                .map(|e| (e, CounterOutcome::Duplicate)),
        );
    for (entry, outcome) in decided {
        for (n, i) in entry.indices.into_iter().enumerate() {
            // Later records with the same key in this batch are duplicates.
            let o = if n == 0 {
                outcome
            } else {
                CounterOutcome::Duplicate
            };
            results.push((i, RecordResult::Done(o)));
        }
    }
}

/// A single key that does not fit the item any more: dead-lettered, to be replayed later.
fn reject_item_full(key: &ItemKey, chunk: Vec<KeyEntry>, err: &StoreError, results: &mut Results) {
    tracing::error!(item = %key.canonical(), error = %err,
        "counter item is full: the record is kept as a dead letter, replay it \
         after the window rolls over");
    let reason = Rejection::new(
        RejectionCode::ItemFull,
        format!(
            "the counter item {} has no room for another key ({err}); \
             replay after the oldest bucket rolls out, or raise the capacity",
            key.canonical()
        ),
    );
    reject(chunk, &reason, results);
}

/// A chunk whose write failed: dead-lettered when DynamoDB refused it as invalid, otherwise
/// failed (to be delivered again). When the chunk holds several records, they all share the
/// one error ([`StoreError::Shared`]).
fn settle_failed(chunk: Vec<KeyEntry>, err: StoreError, results: &mut Results) {
    if err.class() == ErrorClass::InvalidRequest {
        let reason = Rejection::new(RejectionCode::RejectedByDynamodb, err.to_string());
        reject(chunk, &reason, results);
        return;
    }
    let indices: Vec<usize> = chunk.into_iter().flat_map(|e| e.indices).collect();
    if let [only] = indices[..] {
        results.push((only, RecordResult::Failed(err)));
        return;
    }
    let err = Arc::new(err);
    results.extend(
        indices
            .into_iter()
            .map(|i| (i, RecordResult::Failed(err.shared()))),
    );
}

/// Every record of `entries` rejected for `reason`.
pub(super) fn reject(entries: Vec<KeyEntry>, reason: &Rejection, results: &mut Results) {
    for i in entries.into_iter().flat_map(|e| e.indices) {
        results.push((i, RecordResult::Rejected(reason.clone())));
    }
}

/// Every record of `entries` deferred (the deadline is close).
pub(super) fn defer(entries: Vec<KeyEntry>, results: &mut Results) {
    for i in entries.into_iter().flat_map(|e| e.indices) {
        results.push((i, RecordResult::Deferred));
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn entry(hash: &str, indices: Vec<usize>) -> KeyEntry {
        KeyEntry {
            hash: hash.into(),
            add: [("n".to_string(), 1)].into(),
            indices,
        }
    }

    fn sdk(class: ErrorClass, code: &str, message: &str) -> StoreError {
        StoreError::Sdk {
            operation: "UpdateItem",
            class,
            code: code.into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_failed_chunk_shares_its_error_and_a_size_error_fills_the_item() {
        let chunk = || vec![entry("a", vec![0, 2]), entry("b", vec![1])];
        let mut results = Vec::new();
        settle_failed(
            chunk(),
            sdk(ErrorClass::Transient, "ThrottlingException", "slow down"),
            &mut results,
        );
        assert_eq!(
            results.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            [0, 2, 1]
        );
        assert!(results.iter().all(|(_, r)| matches!(r,
            RecordResult::Failed(e @ StoreError::Shared(_)) if e.is_retryable())));
        let mut results = Vec::new();
        settle_failed(
            vec![entry("a", vec![4])],
            sdk(ErrorClass::Transient, "Timeout", ""),
            &mut results,
        );
        assert!(matches!(
            &results[..],
            [(4, RecordResult::Failed(StoreError::Sdk { .. }))]
        ));
        let mut results = Vec::new();
        settle_failed(
            chunk(),
            sdk(ErrorClass::InvalidRequest, "ValidationException", "bad key"),
            &mut results,
        );
        assert!(results.iter().all(|(_, r)| matches!(r,
            RecordResult::Rejected(reason) if reason.code == RejectionCode::RejectedByDynamodb)));
        let full = sdk(
            ErrorClass::InvalidRequest,
            "ValidationException",
            "Item size has exceeded the maximum allowed size",
        );
        assert!(matches!(ChunkError::from(full), ChunkError::ItemFull(_)));
        let other = sdk(ErrorClass::InvalidRequest, "ValidationException", "bad key");
        assert!(matches!(ChunkError::from(other), ChunkError::Store(_)));
    }

    #[test]
    fn refusal_messages_stay_bounded_whatever_the_key_or_the_error() {
        let key = ItemKey::from_json(&serde_json::json!({"PK": "k".repeat(100_000)}))
            .expect("key");
        let huge = || {
            sdk(
                ErrorClass::InvalidRequest,
                "ValidationException",
                &"m".repeat(100_000),
            )
        };
        let mut results = Vec::new();
        reject_item_full(&key, vec![entry("a", vec![0])], &huge(), &mut results);
        settle_failed(vec![entry("b", vec![1])], huge(), &mut results);
        assert_eq!(results.len(), 2);
        for (_, result) in results {
            let RecordResult::Rejected(reason) = result else {
                panic!("not rejected: {result:?}");
            };
            let text = reason.to_string();
            assert!(text.len() < 300, "{} bytes: {text:.400}", text.len());
        }
    }
}
