//! What each record of a batch ends as: a chunk's result (what was written, and why the rest
//! could not be) settled into one [`RecordResult`] per record; the records of a chunk that
//! DynamoDB refused (the item is full, or one record is invalid) split in halves to be written
//! again, down to the single record, so that only the record at fault is dead-lettered.

use std::collections::VecDeque;
use std::sync::Arc;

use super::record::rejection;
use super::update::KeyEntry;
use crate::batch::{Outcome, RecordResult};
use crate::ddb::error::bounded;
use crate::ddb::{ErrorClass, ItemKey, StoreError};
use crate::rejection::{Rejection, RejectionCode};

/// The outcome of one counter record.
#[must_use = "an outcome such as a conflict or a stale record is not an error: handle it"]
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterOutcome {
    /// Its deltas were added by this invocation.
    Applied,
    /// Its idempotency key was already applied (earlier, by another invocation, by a write
    /// whose response was lost, or by an earlier record of the same batch with the same
    /// deltas).
    Duplicate,
    /// Its idempotency key was already applied by an earlier record of the same batch with
    /// *other* deltas: nothing is added (the first record's deltas count), and a warning is
    /// logged with the key's hash. Across deliveries this cannot be told from a
    /// [`CounterOutcome::Duplicate`]: the item keeps only the key's hash.
    ConflictingDuplicate,
    /// Journaled ([`super::CounterMode::Journal`]): the key's journal item is in the table,
    /// and the roll-up counts it once (or finds it a duplicate of an earlier delivery).
    Journaled,
}

impl Outcome for CounterOutcome {
    fn label(&self) -> &'static str {
        match self {
            CounterOutcome::Applied => "applied",
            CounterOutcome::Duplicate => "duplicate",
            CounterOutcome::ConflictingDuplicate => "conflicting_duplicate",
            CounterOutcome::Journaled => "journaled",
        }
    }
}

/// Per-record results of an item or a batch.
pub(super) type Results = Vec<(usize, RecordResult<CounterOutcome>)>;

/// What a chunk's writes did.
#[derive(Debug, Default)]
pub(super) struct Written {
    /// Applied by this invocation.
    pub(super) applied: Vec<KeyEntry>,
    /// Found already applied.
    pub(super) duplicates: Vec<KeyEntry>,
    /// Absent, but arrived before the item forgot keys (`<prefix>forgot`): refused.
    pub(super) too_old: Vec<(KeyEntry, u64)>,
}

/// What writing one chunk gives: what was written, and the entries a failure left unwritten.
#[derive(Debug)]
pub(super) struct ChunkResult {
    /// Applied or found already applied.
    pub(super) written: Written,
    /// The entries not written, and why.
    pub(super) failure: Option<(Vec<KeyEntry>, ChunkError)>,
}

/// Why a chunk could not be written.
#[derive(Debug)]
pub(super) enum ChunkError {
    /// The item would exceed DynamoDB's size limit (a `ValidationException` about the size).
    ItemFull(StoreError),
    /// DynamoDB refused the request as invalid for another reason (a counter that is not a
    /// number on the item, a key that does not match the table, ...): some record is at fault.
    Invalid(StoreError),
    /// Another error (transient, or the function's configuration).
    Store(StoreError),
    /// The item was written under another attribute prefix (`layout_mismatch`).
    Layout(Rejection),
}

impl From<StoreError> for ChunkError {
    fn from(err: StoreError) -> Self {
        let is_size = matches!(&err, StoreError::Sdk { code, message, .. }
            if code == "ValidationException" && message.contains("size"));
        if is_size {
            ChunkError::ItemFull(err)
        } else if err.class() == ErrorClass::InvalidRequest {
            ChunkError::Invalid(err)
        } else {
            ChunkError::Store(err)
        }
    }
}

/// Turn a chunk's result into record results, and a refused part of several keys into two
/// halves to write again.
pub(super) fn settle(
    key: &ItemKey,
    result: ChunkResult,
    results: &mut Results,
    halves: &mut VecDeque<Vec<KeyEntry>>,
) {
    settle_written(result.written, results);
    let Some((rest, err)) = result.failure else {
        return;
    };
    match err {
        ChunkError::ItemFull(err) | ChunkError::Invalid(err) if rest.len() > 1 => {
            tracing::warn!(item = %bounded(key.canonical(), 64), keys = rest.len(), error = %err,
                "DynamoDB refused a counter chunk; retrying it in halves");
            let mut first = rest;
            let second = first.split_off(first.len() / 2);
            halves.push_front(second);
            halves.push_front(first);
        }
        ChunkError::ItemFull(err) => reject_item_full(key, rest, &err, results),
        ChunkError::Invalid(err) => reject_invalid(key, rest, &err, results),
        ChunkError::Store(err) => settle_failed(rest, err, results),
        ChunkError::Layout(reason) => {
            tracing::error!(item = %bounded(key.canonical(), 64), reason = %reason,
                "counter item of another attribute prefix: its records are kept as dead letters");
            reject(rest, &reason, results);
        }
    }
}

/// Applied keys count for their first record; every other record is a duplicate (a
/// conflicting one when its deltas differ from the first record's).
fn settle_written(written: Written, results: &mut Results) {
    for (entry, forgotten) in written.too_old {
        reject(vec![entry], &forgotten_rejection(forgotten), results);
    }
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
        for (n, &i) in entry.indices.iter().enumerate() {
            let o = if n == 0 {
                outcome
            } else if entry.conflicting.contains(&i) {
                tracing::warn!(key_hash = %entry.hash, record = i,
                    "idempotency key delivered again with other deltas; the first delivery counts");
                CounterOutcome::ConflictingDuplicate
            } else {
                CounterOutcome::Duplicate
            };
            results.push((i, RecordResult::Done(o)));
        }
    }
}

/// Why a record that arrived before its item forgot keys is kept (`too_old`).
pub(super) fn forgotten_rejection(forgotten: u64) -> Rejection {
    rejection(
        RejectionCode::TooOld,
        &format!(
            "the record arrived before epoch second {forgotten}, when its counter item started \
             forgetting the keys of its window (its oldest bucket was removed): its key may \
             have been counted already. Replay with force after checking"
        ),
    )
}

/// A single key that does not fit the item any more: dead-lettered, to be replayed later.
fn reject_item_full(key: &ItemKey, rest: Vec<KeyEntry>, err: &StoreError, results: &mut Results) {
    tracing::error!(item = %bounded(key.canonical(), 64), error = %err,
        "counter item is full: the record is kept as a dead letter, replay it \
         after the window rolls over");
    let reason = rejection(
        RejectionCode::ItemFull,
        &format!(
            "the counter item {} has no room for another key; replay after its oldest bucket \
             rolls out, or raise the capacity ({err})",
            bounded(key.canonical(), 48)
        ),
    );
    reject(rest, &reason, results);
}

/// A single key (its record and in-batch duplicates) that DynamoDB refuses as invalid.
fn reject_invalid(key: &ItemKey, rest: Vec<KeyEntry>, err: &StoreError, results: &mut Results) {
    tracing::warn!(item = %bounded(key.canonical(), 64), error = %err,
        "DynamoDB refused a counter record; it is kept as a dead letter");
    reject(
        rest,
        &rejection(RejectionCode::RejectedByDynamodb, &err.to_string()),
        results,
    );
}

/// A chunk whose write failed for a reason a retry may fix: its records fail (to be
/// delivered again). When the chunk holds several records, they all share the one error
/// ([`RecordFailure::Shared`](crate::batch::RecordFailure::Shared)).
fn settle_failed(rest: Vec<KeyEntry>, err: StoreError, results: &mut Results) {
    let indices: Vec<usize> = rest.into_iter().flat_map(|e| e.indices).collect();
    if let [only] = indices[..] {
        results.push((only, RecordResult::Failed(err.into())));
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
    use crate::batch::RecordFailure;
    use crate::ddb::Number;

    fn entry(hash: &str, indices: Vec<usize>) -> KeyEntry {
        KeyEntry {
            hash: hash.into(),
            add: [("n".to_string(), Number::from(1))].into(),
            indices,
            conflicting: Vec::new(),
            arrived: None,
        }
    }

    fn sdk(class: ErrorClass, code: &str, message: &str) -> StoreError {
        StoreError::Sdk {
            operation: "UpdateItem",
            class,
            code: code.into(),
            message: message.into(),
            source: None,
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
            RecordResult::Failed(e @ RecordFailure::Shared(_)) if e.is_retryable())));
        let mut results = Vec::new();
        settle_failed(
            vec![entry("a", vec![4])],
            sdk(ErrorClass::Transient, "Timeout", ""),
            &mut results,
        );
        assert!(matches!(
            &results[..],
            [(
                4,
                RecordResult::Failed(RecordFailure::Store(StoreError::Sdk { .. }))
            )]
        ));
        let full = sdk(
            ErrorClass::InvalidRequest,
            "ValidationException",
            "Item size has exceeded the maximum allowed size",
        );
        assert!(matches!(ChunkError::from(full), ChunkError::ItemFull(_)));
        let other = sdk(ErrorClass::InvalidRequest, "ValidationException", "bad key");
        assert!(matches!(ChunkError::from(other), ChunkError::Invalid(_)));
        let throttled = sdk(ErrorClass::Transient, "ThrottlingException", "slow down");
        assert!(matches!(ChunkError::from(throttled), ChunkError::Store(_)));
    }

    #[test]
    fn a_refused_chunk_is_split_down_to_the_record_at_fault() {
        let key = ItemKey::from_json(&serde_json::json!({"PK": "a"})).expect("key");
        let refused = |rest: Vec<KeyEntry>| ChunkResult {
            written: Written {
                applied: vec![entry("w", vec![9])],
                duplicates: Vec::new(),
                too_old: Vec::new(),
            },
            failure: Some((
                rest,
                ChunkError::Invalid(sdk(
                    ErrorClass::InvalidRequest,
                    "ValidationException",
                    "An operand in the update expression has an incorrect data type",
                )),
            )),
        };
        let (mut results, mut halves) = (Vec::new(), VecDeque::new());
        let three = vec![
            entry("a", vec![0]),
            entry("b", vec![1]),
            entry("c", vec![2]),
        ];
        settle(&key, refused(three), &mut results, &mut halves);
        // What was written before the refusal counts; the rest is split.
        assert!(matches!(
            &results[..],
            [(9, RecordResult::Done(CounterOutcome::Applied))]
        ));
        let sizes: Vec<usize> = halves.iter().map(Vec::len).collect();
        assert_eq!(sizes, [1, 2]);
        let mut results = Vec::new();
        settle(
            &key,
            refused(vec![entry("b", vec![1, 4])]),
            &mut results,
            &mut halves,
        );
        let rejected: Vec<usize> = results
            .iter()
            .filter(|(_, r)| {
                matches!(r, RecordResult::Rejected(reason)
                if reason.code == RejectionCode::RejectedByDynamodb)
            })
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(rejected, [1, 4]);
    }

    #[test]
    fn in_batch_duplicates_with_other_deltas_are_conflicting() {
        let mut e = entry("a", vec![0, 1, 2]);
        e.conflicting = vec![2];
        let mut results = Vec::new();
        settle_written(
            Written {
                applied: Vec::new(),
                duplicates: vec![e],
                too_old: Vec::new(),
            },
            &mut results,
        );
        let outcomes: Vec<&str> = results.iter().map(|(_, r)| r.label()).collect();
        assert_eq!(
            outcomes,
            ["duplicate", "duplicate", "conflicting_duplicate"]
        );
    }

    #[test]
    fn refusal_messages_stay_bounded_whatever_the_key_or_the_error() {
        let key = ItemKey::from_json(&serde_json::json!({"PK": "k".repeat(2_000)})).expect("key");
        let huge = || {
            sdk(
                ErrorClass::InvalidRequest,
                "ValidationException",
                &"m".repeat(100_000),
            )
        };
        let mut results = Vec::new();
        reject_item_full(&key, vec![entry("a", vec![0])], &huge(), &mut results);
        reject_invalid(&key, vec![entry("b", vec![1])], &huge(), &mut results);
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
