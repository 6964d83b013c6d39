//! Journaling a batch: one `INSERT` per distinct key (the first put wins), in
//! `BatchExecuteStatement`s of 25.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;

use super::entry::{
    journal_item, journal_key, JOURNAL_KEY_ATTRIBUTE, JOURNAL_SORT_ATTRIBUTE, MAX_JOURNAL_BATCH,
    MIN_RETENTION, TTL_SLACK_SECONDS,
};
use crate::batch::{Applied, Deadline, RecordFailure, RecordResult};
use crate::counter::{Counter, CounterOutcome, CounterRecord};
use crate::ddb::{Cost, StoreError};

/// A distinct key of the batch: its record, and the later records of the same key.
struct Put {
    first: (usize, CounterRecord),
    /// Later records of the key, and whether their deltas equal the first's.
    same: Vec<(usize, bool)>,
}

/// Check that `table` has the journal's key schema, `pk` (S, partition key) and `sk` (S, sort
/// key), described once per process; another layout (the one before `sk`, keyed by `pk`
/// alone, would refuse every batch as "duplicates") is an error naming what it needs.
pub(crate) async fn check_layout(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<(), StoreError> {
    use aws_sdk_dynamodb::types::ScalarAttributeType;
    let schema = crate::ddb::schema::key_schema(client, table).await?;
    let wanted = [
        (JOURNAL_KEY_ATTRIBUTE.to_string(), ScalarAttributeType::S),
        (JOURNAL_SORT_ATTRIBUTE.to_string(), ScalarAttributeType::S),
    ];
    if schema.attributes() == wanted {
        return Ok(());
    }
    let found: Vec<String> = schema
        .attributes()
        .iter()
        .map(|(name, t)| format!("{name} ({})", t.as_str()))
        .collect();
    Err(StoreError::Inconsistent(format!(
        "journal table {table} is keyed by {}; the journal needs `{JOURNAL_KEY_ATTRIBUTE}` (S, \
         partition key) and `{JOURNAL_SORT_ATTRIBUTE}` (S, sort key): create it as the counter \
         stack declares (a journal keyed by `{JOURNAL_KEY_ATTRIBUTE}` alone is the layout before \
         `{JOURNAL_SORT_ATTRIBUTE}`)",
        found.join(", ")
    )))
}

impl Counter {
    /// Journal `records` into `table`: `Journaled` once the put landed (counted by the
    /// roll-up if it is the key's first), a later record of a key in the batch `Duplicate`
    /// (`ConflictingDuplicate` with other deltas), `Failed` when the put failed.
    pub(in crate::counter) async fn write_journal(
        &self,
        table: &str,
        records: Vec<(usize, CounterRecord)>,
        deadline: Deadline,
    ) -> Applied<CounterOutcome> {
        // A journal table of another layout takes none of them (nothing written).
        if let Err(e) = check_layout(&self.client, table).await {
            let e = Arc::new(e);
            let failed = records.into_iter().map(|(i, _)| {
                (
                    i,
                    RecordResult::Failed(RecordFailure::Shared(Arc::clone(&e))),
                )
            });
            return Applied {
                results: failed.collect(),
                write_calls: 0,
            };
        }
        // Keys the counter table would refuse are dead letters now: the roll-up could never
        // apply them.
        let (records, mut refused) =
            crate::batch::fitting_keys(&self.client, &self.config.table, records, |r| &r.key).await;
        let puts = distinct(records, self.config.journal_spread);
        let cost = Cost::default();
        let now_ms = self.clock.now_ms();
        // The first put of a key sets its TTL (a put again leaves the item as it is): never
        // less than the default window, whatever this writer's.
        let keep = self.config.window.max(MIN_RETENTION).as_secs();
        let ttl = now_ms / 1000 + keep + TTL_SLACK_SECONDS;
        let chunks: Vec<Vec<Put>> = chunked(puts);
        let results: Vec<_> = futures::stream::iter(chunks)
            .map(|chunk| self.put_chunk(table, chunk, ttl, now_ms, deadline, &cost))
            .buffer_unordered(self.config.concurrency.max(1))
            .collect()
            .await;
        refused.extend(results.into_iter().flatten());
        Applied {
            results: refused,
            write_calls: cost.write_calls_usize(),
        }
    }

    async fn put_chunk(
        &self,
        table: &str,
        chunk: Vec<Put>,
        ttl: u64,
        now_ms: u64,
        deadline: Deadline,
        cost: &Cost,
    ) -> Vec<(usize, RecordResult<CounterOutcome>)> {
        if deadline.expired() {
            return settle(chunk, |_| RecordResult::Deferred);
        }
        let items: Result<Vec<_>, StoreError> = chunk
            .iter()
            .map(|put| journal_item(&put.first.1, self.config.journal_spread, ttl, now_ms))
            .collect();
        let items = match items {
            Ok(items) => items,
            Err(err) => {
                let err = Arc::new(err);
                return settle(chunk, |_| {
                    RecordResult::Failed(RecordFailure::Shared(Arc::clone(&err)))
                });
            }
        };
        match super::insert::insert_items(&self.client, table, items, cost).await {
            Ok(()) => settle(chunk, |_| RecordResult::Done(CounterOutcome::Journaled)),
            Err((pending, err)) => {
                let err = Arc::new(err);
                settle(chunk, |at| match pending.contains(&at) {
                    true => RecordResult::Failed(RecordFailure::Shared(Arc::clone(&err))),
                    false => RecordResult::Done(CounterOutcome::Journaled),
                })
            }
        }
    }
}

/// Records grouped by journal key, in arrival order of each key's first record.
fn distinct(records: Vec<(usize, CounterRecord)>, spread: u32) -> Vec<Put> {
    let mut puts: Vec<Put> = Vec::new();
    let mut by_key: HashMap<(String, String), usize> = HashMap::new();
    for (i, record) in records {
        let key = journal_key(&record, spread);
        match by_key.get(&key) {
            Some(&at) => {
                let same = puts[at].first.1.add == record.add;
                puts[at].same.push((i, same));
            }
            None => {
                by_key.insert(key, puts.len());
                puts.push(Put {
                    first: (i, record),
                    same: Vec::new(),
                });
            }
        }
    }
    puts
}

fn chunked(puts: Vec<Put>) -> Vec<Vec<Put>> {
    let mut chunks = Vec::new();
    let mut chunk = Vec::with_capacity(MAX_JOURNAL_BATCH);
    for put in puts {
        chunk.push(put);
        if chunk.len() == MAX_JOURNAL_BATCH {
            chunks.push(std::mem::take(&mut chunk));
        }
    }
    if !chunk.is_empty() {
        chunks.push(chunk);
    }
    chunks
}

/// Each put's result (by its position in the chunk) for its first record; its later records
/// are duplicates of it once it is journaled, and share its result otherwise.
fn settle(
    chunk: Vec<Put>,
    result: impl Fn(usize) -> RecordResult<CounterOutcome>,
) -> Vec<(usize, RecordResult<CounterOutcome>)> {
    let mut out = Vec::new();
    for (at, put) in chunk.into_iter().enumerate() {
        let first = result(at);
        for (i, same) in put.same {
            let later = match &first {
                RecordResult::Done(_) if same => RecordResult::Done(CounterOutcome::Duplicate),
                RecordResult::Done(_) => RecordResult::Done(CounterOutcome::ConflictingDuplicate),
                _ => result(at),
            };
            out.push((i, later));
        }
        out.push((put.first.0, first));
    }
    out
}
