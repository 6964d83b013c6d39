//! Writing a batch: records grouped by item and by idempotency key, each item's distinct keys
//! written in chunks ([`Counter::write_item`]), each chunk re-planned after a failed condition
//! ([`Counter::write_chunk`]), and every chunk's result settled into one result per record.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use futures::StreamExt;

use super::update::{chunk_entries, Attempt, KeyEntry, Knowledge, OldState};
use super::{Counter, CounterRecord};
use crate::batch::{Applied, Deadline, Outcome, Protocol, RecordResult};
use crate::ddb::{conditional, Cond, Cost, ErrorClass, Item, ItemKey, StoreError};
use crate::rejection::{Rejection, RejectionCode};

/// Chunks of one item written at once. Chunks hold distinct keys, so concurrent writes would
/// be correct, but DynamoDB serialises the writes of an item anyway and each one rewrites the
/// whole item (keys included): measured on DynamoDB Local, concurrency only added contention.
pub const CHUNKS_AT_ONCE: usize = 1;
/// How many times one chunk is re-planned after a failed condition before giving up.
pub const MAX_CONDITION_ROUNDS: usize = 8;

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
type Results = Vec<(usize, RecordResult<CounterOutcome>)>;

/// A written chunk: the entries applied, and those found already applied.
#[derive(Debug, Default)]
struct Written {
    applied: Vec<KeyEntry>,
    duplicates: Vec<KeyEntry>,
}

/// What writing one chunk gives.
type ChunkResult = Result<Written, ChunkError>;

/// Why a chunk could not be written.
#[derive(Debug)]
enum ChunkError {
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

/// The records of one item in a batch: its distinct keys, and where each key is.
#[derive(Debug)]
struct ItemGroup {
    key: ItemKey,
    entries: Vec<KeyEntry>,
    by_hash: HashMap<String, usize>,
}

impl ItemGroup {
    /// Add record `i`: a new key, or one more record of a key already in the group.
    fn push(&mut self, i: usize, record: CounterRecord) {
        match self.by_hash.get(&record.hashed_key) {
            Some(&at) => self.entries[at].indices.push(i),
            None => {
                self.by_hash
                    .insert(record.hashed_key.clone(), self.entries.len());
                self.entries.push(KeyEntry {
                    hash: record.hashed_key,
                    add: record.add,
                    indices: vec![i],
                });
            }
        }
    }
}

/// Group records by item (first-appearance order), then by idempotency key within the item.
fn group_by_item(records: Vec<(usize, CounterRecord)>) -> Vec<ItemGroup> {
    let mut groups: Vec<ItemGroup> = Vec::new();
    let mut by_item: HashMap<String, usize> = HashMap::new();
    for (i, record) in records {
        let at = *by_item
            .entry(record.key.canonical().to_string())
            .or_insert_with(|| {
                groups.push(ItemGroup {
                    key: record.key.clone(),
                    entries: Vec::new(),
                    by_hash: HashMap::new(),
                });
                groups.len() - 1
            });
        groups[at].push(i, record);
    }
    groups
}

impl Counter {
    /// Add one record's deltas exactly once (no coalescing): the outcome, or the error.
    pub async fn add(&self, record: &CounterRecord) -> Result<CounterOutcome, StoreError> {
        let entry = KeyEntry {
            hash: record.hashed_key.clone(),
            add: record.add.clone(),
            indices: vec![0],
        };
        let key_item = record.key.to_item()?;
        let cost = Cost::default();
        match self
            .write_chunk(&record.key, &key_item, vec![entry], &cost)
            .await
        {
            Ok(written) if !written.applied.is_empty() => Ok(CounterOutcome::Applied),
            Ok(_) => Ok(CounterOutcome::Duplicate),
            Err(ChunkError::Store(e) | ChunkError::ItemFull(e)) => Err(e),
        }
    }

    /// Write one chunk of distinct keys of one item: a conditional update, and after each
    /// failed condition the keys found present set aside and the guard re-planned from
    /// `ALL_OLD`, at most [`MAX_CONDITION_ROUNDS`] times.
    async fn write_chunk(
        &self,
        key: &ItemKey,
        key_item: &Item,
        chunk: Vec<KeyEntry>,
        cost: &Cost,
    ) -> ChunkResult {
        let mut pending = chunk;
        let mut duplicates = Vec::new();
        let mut knowledge = Knowledge::Guess;
        let mut old_buckets: Vec<u64> = Vec::new();
        for _ in 0..MAX_CONDITION_ROUNDS {
            if pending.is_empty() {
                break;
            }
            let now = self.current_bucket();
            let attempt = Attempt::plan(knowledge, now, self.config.window_buckets, &old_buckets);
            let Some(old) = self.send_update(key_item, &pending, &attempt, cost).await? else {
                return Ok(Written {
                    applied: pending,
                    duplicates,
                });
            };
            let state = OldState::read(&self.config, &old);
            let (present, rest): (Vec<KeyEntry>, Vec<KeyEntry>) = pending
                .into_iter()
                .partition(|e| state.keys.contains(&e.hash));
            duplicates.extend(present);
            pending = rest;
            knowledge = Knowledge::Known(state.bucket);
            old_buckets = state.buckets;
        }
        if pending.is_empty() {
            return Ok(Written {
                applied: Vec::new(),
                duplicates,
            });
        }
        Err(ChunkError::Store(StoreError::Contention {
            what: format!("the bucket of counter item {}", key.canonical()),
            attempts: MAX_CONDITION_ROUNDS,
        }))
    }

    /// Send one attempt: `None` when it was applied, `Some(ALL_OLD)` when its condition
    /// failed (an empty item when there was none).
    async fn send_update(
        &self,
        key_item: &Item,
        pending: &[KeyEntry],
        attempt: &Attempt,
        cost: &Cost,
    ) -> Result<Option<Item>, ChunkError> {
        let result = self.build_update(key_item, pending, attempt).send().await;
        match conditional("UpdateItem", result) {
            Ok(Cond::Done(out)) => {
                cost.add(out.consumed_capacity());
                Ok(None)
            }
            Ok(Cond::Failed { old }) => {
                cost.add_failed();
                Ok(Some(old.unwrap_or_default()))
            }
            Err(err) => {
                cost.add_failed();
                Err(err.into())
            }
        }
    }

    /// Write one item's distinct keys: chunks in order, halves on overflow.
    async fn write_item(
        &self,
        key: ItemKey,
        entries: Vec<KeyEntry>,
        deadline: Deadline,
        cost: &Cost,
    ) -> Results {
        let mut results = Vec::new();
        let key_item = match key.to_item() {
            Ok(item) => item,
            Err(e) => {
                let reason = Rejection::new(RejectionCode::InvalidKey, e.to_string());
                reject(entries, &reason, &mut results);
                return results;
            }
        };
        let mut halves = VecDeque::new();
        let first_pass = self
            .write_chunks(&key, &key_item, entries, deadline, cost)
            .await;
        for (chunk, result) in first_pass {
            match result {
                Some(result) => settle(&key, chunk, result, &mut results, &mut halves),
                None => defer(chunk, &mut results),
            }
        }
        // Chunks that overflowed the item, retried in halves one at a time.
        while let Some(chunk) = halves.pop_front() {
            if deadline.expired() {
                defer(chunk, &mut results);
                continue;
            }
            let result = self.write_chunk(&key, &key_item, chunk.clone(), cost).await;
            settle(&key, chunk, result, &mut results, &mut halves);
        }
        results
    }

    /// The first pass over an item's chunks: each chunk with its result (`None`: not started,
    /// the deadline is close).
    async fn write_chunks(
        &self,
        key: &ItemKey,
        key_item: &Item,
        entries: Vec<KeyEntry>,
        deadline: Deadline,
        cost: &Cost,
    ) -> Vec<(Vec<KeyEntry>, Option<ChunkResult>)> {
        // The chunks of one item hold distinct keys: independent conditional writes, written
        // CHUNKS_AT_ONCE at a time (items themselves are written concurrently).
        let chunks = chunk_entries(entries, self.config.max_keys_per_write());
        futures::stream::iter(chunks)
            .map(|chunk| async move {
                if deadline.expired() {
                    return (chunk, None);
                }
                let result = self.write_chunk(key, key_item, chunk.clone(), cost).await;
                (chunk, Some(result))
            })
            .buffered(CHUNKS_AT_ONCE)
            .collect()
            .await
    }
}

/// Turn a chunk's result into record results (or into two halves to retry).
fn settle(
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
fn reject(entries: Vec<KeyEntry>, reason: &Rejection, results: &mut Results) {
    for i in entries.into_iter().flat_map(|e| e.indices) {
        results.push((i, RecordResult::Rejected(reason.clone())));
    }
}

/// Every record of `entries` deferred (the deadline is close).
fn defer(entries: Vec<KeyEntry>, results: &mut Results) {
    for i in entries.into_iter().flat_map(|e| e.indices) {
        results.push((i, RecordResult::Deferred));
    }
}

impl Protocol for Counter {
    type Record = CounterRecord;
    type Outcome = CounterOutcome;

    fn parse(&self, body: &[u8]) -> Result<CounterRecord, Rejection> {
        self.parse_record(body)
    }

    async fn apply(
        &self,
        records: Vec<(usize, CounterRecord)>,
        deadline: Deadline,
    ) -> Applied<CounterOutcome> {
        let cost = Cost::default();
        let cost_ref = &cost;
        let results: Vec<Results> = futures::stream::iter(group_by_item(records))
            .map(|ItemGroup { key, entries, .. }| async move {
                if deadline.expired() {
                    let mut results = Vec::new();
                    defer(entries, &mut results);
                    return results;
                }
                self.write_item(key, entries, deadline, cost_ref).await
            })
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        Applied {
            results: results.into_iter().flatten().collect(),
            write_calls: cost.write_calls_usize(),
        }
    }
}
