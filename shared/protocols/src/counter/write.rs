//! Writing a batch: records grouped by item and by idempotency key, each item's distinct keys
//! written in chunks ([`Counter::write_item`]), each chunk re-planned after a failed condition
//! ([`Counter::write_chunk`]); each chunk's result is settled by `settle`.

use std::collections::{HashMap, VecDeque};

use futures::StreamExt;

use super::settle::{
    defer, reject, settle, ChunkError, ChunkResult, CounterOutcome, Results, Written,
};
use super::update::{chunk_entries, Attempt, KeyEntry, Knowledge, OldState};
use super::{Counter, CounterRecord};
use crate::batch::{Applied, Deadline, Protocol};
use crate::ddb::{conditional, Cond, Cost, Item, ItemKey, StoreError};
use crate::rejection::{Rejection, RejectionCode};

/// Chunks of one item written at once. Chunks hold distinct keys, so concurrent writes would
/// be correct, but DynamoDB serialises the writes of an item anyway and each one rewrites the
/// whole item (keys included): measured on DynamoDB Local, concurrency only added contention.
pub const CHUNKS_AT_ONCE: usize = 1;
/// How many times one chunk is re-planned after a failed condition before giving up.
pub const MAX_CONDITION_ROUNDS: usize = 8;

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_group_by_item_then_by_key_in_arrival_order() {
        let record = |pk: &str, key: &str| CounterRecord {
            key: ItemKey::from_json(&json!({ "PK": pk })).expect("key"),
            add: [("n".to_string(), 1)].into(),
            idempotency_key: key.into(),
            hashed_key: key.into(),
        };
        let records = [("b", "k1"), ("a", "k1"), ("b", "k2"), ("b", "k1")];
        let groups = group_by_item(
            records
                .map(|(pk, k)| record(pk, k))
                .into_iter()
                .enumerate()
                .collect(),
        );
        let shape: Vec<(String, Vec<Vec<usize>>)> = groups
            .into_iter()
            .map(|g| {
                (
                    g.key.canonical().to_string(),
                    g.entries.into_iter().map(|e| e.indices).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                (r#"{"PK":"b"}"#.into(), vec![vec![0, 3], vec![2]]),
                (r#"{"PK":"a"}"#.into(), vec![vec![1]])
            ]
        );
    }
}
