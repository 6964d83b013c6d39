//! Writing a batch: records grouped by item and by idempotency key, each item's distinct keys
//! written in chunks ([`Counter::write_item`]), each chunk re-planned after a failed condition
//! ([`Counter::write_chunk`]); each chunk's result is settled by `settle`.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use futures::StreamExt;

use super::layout::{Grid, Knowledge, Layout, Plan};
use super::marker::PrefixMarker;
use super::record::rejection;
use super::settle::{
    defer, reject, settle, ChunkError, ChunkResult, CounterOutcome, Results, Written,
};
use super::update::{chunk_entries, KeyEntry};
use super::{Counter, CounterRecord};
use crate::batch::{Applied, Deadline, Protocol, RecordResult};
use crate::change::{no_change_mapping, ItemChange};
use crate::ddb::error::bounded;
use crate::ddb::{conditional, Cond, Cost, Item, ItemKey, StoreError};
use crate::rejection::{Rejection, RejectionCode};

/// Chunks of one item written at once. Chunks hold distinct keys, so concurrent writes would
/// be correct, but DynamoDB serialises the writes of an item anyway and each one rewrites the
/// whole item (keys included): measured on DynamoDB Local, concurrency only added contention.
pub(crate) const CHUNKS_AT_ONCE: usize = 1;
/// How many times one chunk is re-planned after a failed condition before giving up.
pub(crate) const MAX_CONDITION_ROUNDS: usize = 8;

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
            Some(&at) => self.entries[at].push(i, &record.add, record.arrived),
            None => {
                self.by_hash
                    .insert(record.hashed_key.clone(), self.entries.len());
                self.entries
                    .push(KeyEntry::new(record.hashed_key, record.add, i).arrived(record.arrived));
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

/// What is known of one item's buckets across its chunks: the last write's result, so that
/// the item's next chunk is guarded right the first time.
#[derive(Debug)]
struct ItemHint(Mutex<Knowledge>);

impl ItemHint {
    fn new() -> Self {
        ItemHint(Mutex::new(Knowledge::Guess))
    }

    fn get(&self) -> Knowledge {
        match self.0.lock() {
            Ok(known) => known.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, knowledge: Knowledge) {
        match self.0.lock() {
            Ok(mut known) => *known = knowledge,
            Err(poisoned) => *poisoned.into_inner() = knowledge,
        }
    }
}

impl Counter {
    /// Add one record's deltas exactly once (no coalescing): the outcome, or the error.
    /// In journal mode: `Journaled` once its journal item is put (counted by the roll-up).
    pub async fn add(&self, record: &CounterRecord) -> Result<CounterOutcome, StoreError> {
        if let Some(table) = self.config.journal_table() {
            let applied = self
                .write_journal(table, vec![(0, record.clone())], Deadline::none())
                .await;
            return match applied.results.into_iter().next() {
                Some((_, RecordResult::Done(outcome))) => Ok(outcome),
                Some((_, RecordResult::Failed(failure))) => Err(failure
                    .into_store_error()
                    .unwrap_or_else(|f| StoreError::Inconsistent(f.to_string()))),
                _ => Err(StoreError::Inconsistent("journal put not attempted".into())),
            };
        }
        let entry =
            KeyEntry::new(record.hashed_key.clone(), record.add.clone(), 0).arrived(record.arrived);
        let key_item = record.key.to_item()?;
        let cost = Cost::default();
        let hint = ItemHint::new();
        let result = self
            .write_chunk(&record.key, &key_item, vec![entry], &hint, &cost)
            .await;
        match result.failure {
            Some((_, ChunkError::Store(e) | ChunkError::Invalid(e) | ChunkError::ItemFull(e))) => {
                Err(e)
            }
            Some((_, ChunkError::Layout(reason))) => Err(StoreError::Inconsistent(reason.message)),
            None if !result.written.too_old.is_empty() => Err(StoreError::Inconsistent(
                "the record arrived before its counter item forgot keys of its window: \
                 it may have been counted already (too_old)"
                    .into(),
            )),
            None if result.written.applied.is_empty() => Ok(CounterOutcome::Duplicate),
            None => Ok(CounterOutcome::Applied),
        }
    }

    /// Write one chunk of distinct keys of one item: conditional updates planned on what is
    /// known of the item's buckets (as many keys per update as the expression limits allow
    /// with that many buckets); after each failed condition the keys found present are set
    /// aside and the plan is made again from `ALL_OLD`, at most [`MAX_CONDITION_ROUNDS`]
    /// times. A failure keeps what was written before it.
    async fn write_chunk(
        &self,
        key: &ItemKey,
        key_item: &Item,
        chunk: Vec<KeyEntry>,
        hint: &ItemHint,
        cost: &Cost,
    ) -> ChunkResult {
        let grid = Grid::of(&self.config);
        let marker = PrefixMarker::new(&self.config.attribute_prefix);
        let mut pending = chunk;
        let mut written = Written::default();
        let mut knowledge = hint.get();
        let mut failed_conditions = 0;
        while !pending.is_empty() {
            if failed_conditions == MAX_CONDITION_ROUNDS {
                return contention(key, written, pending);
            }
            let now = self.clock.now_secs();
            let plan = Plan::new(&knowledge, &grid, now);
            let rest = pending.split_off(plan.keys_per_write(&marker).min(pending.len()));
            match self.send_update(key_item, &pending, &plan, cost).await {
                Err(err) => {
                    pending.extend(rest);
                    return ChunkResult {
                        written,
                        failure: Some((pending, err)),
                    };
                }
                Ok(None) => {
                    written.applied.append(&mut pending);
                    pending = rest;
                    knowledge = plan.known_after();
                }
                Ok(Some(old)) => {
                    failed_conditions += 1;
                    pending.extend(rest);
                    if let Some(reason) = marker.foreign(&old) {
                        return ChunkResult {
                            written,
                            failure: Some((pending, ChunkError::Layout(reason))),
                        };
                    }
                    let (layout, keys) = Layout::read(&self.config, &old);
                    let (present, todo) = pending.into_iter().partition(|e| keys.contains(&e.hash));
                    written.duplicates.extend::<Vec<KeyEntry>>(present);
                    pending = todo;
                    if let Some(forgotten) = layout.forgotten {
                        let (old, todo) = pending
                            .into_iter()
                            .partition(|e| e.arrived.is_some_and(|a| a < forgotten));
                        let old: Vec<KeyEntry> = old;
                        written
                            .too_old
                            .extend(old.into_iter().map(|e| (e, forgotten)));
                        pending = todo;
                    }
                    knowledge = Knowledge::Known(layout);
                }
            }
            hint.set(knowledge.clone());
        }
        ChunkResult {
            written,
            failure: None,
        }
    }

    /// Send one planned update: `None` when it was applied, `Some(ALL_OLD)` when its condition
    /// failed (an empty item when there was none).
    async fn send_update(
        &self,
        key_item: &Item,
        pending: &[KeyEntry],
        plan: &Plan,
        cost: &Cost,
    ) -> Result<Option<Item>, ChunkError> {
        let result = match self.build_update(key_item, pending, plan) {
            Ok(update) => update.send().await,
            Err(err) => return Err(ChunkError::Invalid(err)),
        };
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

    /// Write one item's distinct keys: chunks in order, halves of a chunk DynamoDB refused.
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
                let reason = rejection(RejectionCode::InvalidKey, &e.to_string());
                reject(entries, &reason, &mut results);
                return results;
            }
        };
        let hint = ItemHint::new();
        let mut halves = VecDeque::new();
        let first_pass = self
            .write_chunks(&key, &key_item, entries, deadline, &hint, cost)
            .await;
        for result in first_pass {
            match result {
                Ok(result) => settle(&key, result, &mut results, &mut halves),
                Err(chunk) => defer(chunk, &mut results),
            }
        }
        // Chunks DynamoDB refused (the item is full, or a record is invalid), retried in
        // halves one at a time, down to single keys.
        while let Some(chunk) = halves.pop_front() {
            if deadline.expired() {
                defer(chunk, &mut results);
                continue;
            }
            let result = self.write_chunk(&key, &key_item, chunk, &hint, cost).await;
            settle(&key, result, &mut results, &mut halves);
        }
        results
    }

    /// The first pass over an item's chunks: each chunk's result, or the chunk itself when it
    /// was not started (the deadline is close).
    async fn write_chunks(
        &self,
        key: &ItemKey,
        key_item: &Item,
        entries: Vec<KeyEntry>,
        deadline: Deadline,
        hint: &ItemHint,
        cost: &Cost,
    ) -> Vec<Result<ChunkResult, Vec<KeyEntry>>> {
        // The chunks of one item hold distinct keys: independent conditional writes, written
        // CHUNKS_AT_ONCE at a time (items themselves are written concurrently).
        let chunks = chunk_entries(entries, self.config.max_keys_per_write());
        futures::stream::iter(chunks)
            .map(|chunk| async move {
                if deadline.expired() {
                    return Err(chunk);
                }
                Ok(self.write_chunk(key, key_item, chunk, hint, cost).await)
            })
            .buffered(CHUNKS_AT_ONCE)
            .collect()
            .await
    }
}

/// The condition kept failing: what was written stays, the rest fails (transient).
fn contention(key: &ItemKey, written: Written, pending: Vec<KeyEntry>) -> ChunkResult {
    let err = StoreError::Contention {
        what: format!(
            "the buckets of counter item {}",
            bounded(key.canonical(), 64)
        ),
        attempts: MAX_CONDITION_ROUNDS,
    };
    ChunkResult {
        written,
        failure: Some((pending, ChunkError::Store(err))),
    }
}

impl Protocol for Counter {
    type Record = CounterRecord;
    type Outcome = CounterOutcome;

    fn parse(&self, body: &[u8]) -> Result<CounterRecord, Rejection> {
        self.parse_record(body)
    }

    /// Aggregation, when [`super::CounterConfig::aggregation`] is set.
    fn parse_change(&self, change: &ItemChange) -> Result<CounterRecord, Rejection> {
        match &self.config.aggregation {
            Some(aggregation) => aggregation.record(self, change),
            None => Err(no_change_mapping("COUNTER_CHANGE_GROUP_BY")),
        }
    }

    /// The duplicate window: an older record's key may have left the item, so applying it
    /// could count it twice.
    fn max_record_age(&self) -> Option<std::time::Duration> {
        Some(self.config.record_age_limit())
    }

    /// Kept on the record: its item refuses it (`too_old`) when it arrived before the item
    /// forgot keys ([`super::CounterConfig::forgotten_attribute`]).
    fn with_arrival(&self, record: CounterRecord, arrived_ms: u64) -> CounterRecord {
        record.arrived_at(arrived_ms)
    }

    fn concurrency(&self) -> usize {
        self.config.concurrency
    }

    /// Records of one item in a row are one coalesced write (chunks written in arrival order).
    fn coalesce_key(&self, record: &CounterRecord) -> Option<String> {
        Some(record.key.canonical().to_string())
    }

    async fn apply(
        &self,
        records: Vec<(usize, CounterRecord)>,
        deadline: Deadline,
    ) -> Applied<CounterOutcome> {
        let now = self.clock.now_secs();
        let mut known = Vec::new();
        let mut identities = HashMap::new();
        let mut todo = Vec::with_capacity(records.len());
        for (i, record) in records {
            let item = record.key.canonical().to_string();
            if self.cache.holds(&item, &record.hashed_key, now) {
                known.push((i, RecordResult::Done(CounterOutcome::Duplicate))); // no call
                continue;
            }
            identities.insert(i, (item, record.hashed_key.clone()));
            todo.push((i, record));
        }
        let mut applied = match self.config.journal_table() {
            // Boxed: the journal's future inside every writer's invocation future overflows the
            // compiler's layout depth limit otherwise.
            Some(table) => Box::pin(self.write_journal(table, todo, deadline)).await,
            None => {
                let table = &self.config.table;
                let (todo, refused) =
                    crate::batch::fitting_keys(&self.client, table, todo, |r| &r.key).await;
                let mut applied = self.write_items(todo, deadline).await;
                applied.results.extend(refused);
                applied
            }
        };
        for (i, result) in &applied.results {
            if let (RecordResult::Done(_), Some((item, hash))) = (result, identities.get(i)) {
                self.cache.note(item, hash, now);
            }
        }
        applied.results.extend(known);
        applied
    }
}

impl Counter {
    /// Write the records' items concurrently (bounded by `concurrency`).
    async fn write_items(
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
                let indices: Vec<usize> = entries.iter().flat_map(|e| e.indices.clone()).collect();
                let writing = self.write_item(key, entries, deadline, cost_ref);
                deadline.bound_records(indices, "UpdateItem", writing).await
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
            add: [("n".to_string(), crate::ddb::Number::from(1))].into(),
            idempotency_key: key.into(),
            hashed_key: key.into(),
            arrived: None,
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
