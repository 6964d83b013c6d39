//! History mode: every record of a batch in the history table, at its own row, with
//! `BatchWriteItem` (25 rows per call, unprocessed rows asked again with backoff).
//!
//! A row is a function of the record alone (no processing time), so writing it again is a
//! no-op and the table is the same whatever the order, duplication or batching.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::StreamExt;
use serde_json::{Map, Value};

use super::outcome::RatchetOutcome;
use super::record::{RatchetOp, RatchetRecord};
use super::ts::Ts;
use super::Ratchet;
use crate::batch::{Deadline, RecordResult};
use crate::ddb::item::item_to_json;
use crate::ddb::{Cost, ErrorClass, Item, ItemKey, StoreError};
use crate::rejection::{Rejection, RejectionCode};

/// History table: partition key, the item's canonical key, e.g. `{"PK":"u1","SK":"a"}` (S).
pub const HISTORY_KEY_ATTRIBUTE: &str = "ItemKey";
/// History table: sort key, [`history_sort_key`] of the record's `(ts, tie-break)` (S).
pub const HISTORY_SORT_ATTRIBUTE: &str = "RecordVersion";
/// History row: the record's `ts` (N, or S above `u64`: see [`super::Ts`]).
pub const HISTORY_TS_ATTRIBUTE: &str = "Timestamp";
/// History row: the record's tie-break token (S).
pub const HISTORY_TIE_BREAK_ATTRIBUTE: &str = "TieBreak";
/// History row: `put` or `delete` (S).
pub const HISTORY_OP_ATTRIBUTE: &str = "Op";
/// History row: the put's item as the latest table stores it (M); absent for a delete.
pub const HISTORY_ITEM_ATTRIBUTE: &str = "Item";
/// Rows per `BatchWriteItem` (DynamoDB's limit).
const BATCH_WRITE_ROWS: usize = crate::ddb::batch::BATCH_WRITE_ITEMS;
/// Key condition of [`Ratchet::history`].
const KEY_CONDITION_ITEM: &str = "#hk = :hk";

/// The history sort key of a record version: `ts` on 20 digits (negative: `-` and
/// `ts + 2^63` on 20 digits; above `u64`: `~` and its 64 digits), `#`, the tie-break token.
/// Strings sort exactly as versions do (by `ts`, then token), and two different records with
/// the same `ts` never share a row because their tokens differ (a delete is `1`; a put is `0`
/// + SHA-256 of its item).
///
/// ```
/// use dynamodb_exactly_once::ratchet::{history_sort_key, Ts};
/// let key = |ts: i64, token| history_sort_key(&Ts::from(ts), token);
/// assert_eq!(key(1721770090000, "1"), "00000001721770090000#1");
/// assert!(key(-2, "1") < key(-1, "1"));
/// assert!(key(-1, "1") < key(0, "0ab"));
/// assert!(key(7, "0ff") < key(7, "1"));
/// let big = Ts::from_digits("49590338271490256608559692538361571095921575989136588898")?;
/// assert!(history_sort_key(&Ts::from(u64::MAX), "1") < history_sort_key(&big, "0ab"));
/// # Ok::<(), dynamodb_exactly_once::ratchet::TsError>(())
/// ```
pub fn history_sort_key(ts: &Ts, token: &str) -> String {
    format!("{}#{token}", ts.sort_key())
}

/// Why a history row was not written.
#[derive(Debug, Clone)]
enum RowFailure {
    /// Not attempted: the deadline is close.
    Deferred,
    /// The write failed (or DynamoDB refused the row as invalid).
    Error(Arc<StoreError>),
}

type RowResults = Vec<(String, Result<(), RowFailure>)>;

/// A row's identity within a batch: key and sort key.
fn row_id(row: &Item) -> String {
    let part = |name: &str| match row.get(name) {
        Some(AttributeValue::S(s)) => s.as_str(),
        _ => "",
    };
    format!(
        "{}\u{0}{}",
        part(HISTORY_KEY_ATTRIBUTE),
        part(HISTORY_SORT_ATTRIBUTE)
    )
}

/// The history row of a record: key, sort key, `ts`, token, op and (put) the item.
pub(crate) fn history_row(record: &RatchetRecord) -> Item {
    let mut row = Item::new();
    let s = |v: String| AttributeValue::S(v);
    row.insert(
        HISTORY_KEY_ATTRIBUTE.into(),
        s(record.key.canonical().into()),
    );
    row.insert(
        HISTORY_SORT_ATTRIBUTE.into(),
        s(history_sort_key(&record.ts, &record.token)),
    );
    row.insert(HISTORY_TS_ATTRIBUTE.into(), record.ts.to_attribute());
    row.insert(HISTORY_TIE_BREAK_ATTRIBUTE.into(), s(record.token.clone()));
    let op = match &record.op {
        RatchetOp::Put(item) => {
            row.insert(
                HISTORY_ITEM_ATTRIBUTE.into(),
                AttributeValue::M(item.clone()),
            );
            "put"
        }
        RatchetOp::Delete => "delete",
    };
    row.insert(HISTORY_OP_ATTRIBUTE.into(), s(op.into()));
    row
}

impl Ratchet {
    /// Write the history rows of a batch's records: the records whose row is written (they
    /// go on to the latest table), and the results of the others.
    pub(crate) async fn write_history(
        &self,
        table: &str,
        records: Vec<(usize, RatchetRecord)>,
        deadline: Deadline,
        cost: &Cost,
    ) -> (
        Vec<(usize, RatchetRecord)>,
        Vec<(usize, RecordResult<RatchetOutcome>)>,
    ) {
        let mut rows: HashMap<String, Item> = HashMap::new();
        let ids: Vec<String> = records
            .iter()
            .map(|(_, record)| {
                let row = history_row(record);
                let id = row_id(&row);
                rows.entry(id.clone()).or_insert(row);
                id
            })
            .collect();
        let written: HashMap<String, Result<(), RowFailure>> = self
            .put_rows(table, rows.into_iter().collect(), deadline, cost)
            .await
            .into_iter()
            .collect();
        let mut ready = Vec::with_capacity(records.len());
        let mut failed = Vec::new();
        for ((i, record), id) in records.into_iter().zip(ids) {
            match written.get(&id) {
                Some(Ok(())) => ready.push((i, record)),
                Some(Err(failure)) => failed.push((i, record_failure(failure))),
                None => failed.push((i, RecordResult::Deferred)),
            }
        }
        (ready, failed)
    }

    /// Write rows in chunks of 25, chunks concurrently; one result per row id.
    async fn put_rows(
        &self,
        table: &str,
        rows: Vec<(String, Item)>,
        deadline: Deadline,
        cost: &Cost,
    ) -> RowResults {
        let chunks: Vec<Vec<(String, Item)>> = rows
            .chunks(BATCH_WRITE_ROWS)
            .map(<[(String, Item)]>::to_vec)
            .collect();
        futures::stream::iter(chunks)
            .map(|chunk| async move {
                if deadline.expired() {
                    return chunk
                        .into_iter()
                        .map(|(id, _)| (id, Err(RowFailure::Deferred)))
                        .collect();
                }
                self.put_chunk(table, chunk, cost).await
            })
            .buffer_unordered(self.config.concurrency)
            .collect::<Vec<RowResults>>()
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// One chunk; when DynamoDB refuses it as invalid, each row alone, so that one bad row
    /// cannot fail the others.
    async fn put_chunk(&self, table: &str, chunk: Vec<(String, Item)>, cost: &Cost) -> RowResults {
        let ids: Vec<String> = chunk.iter().map(|(id, _)| id.clone()).collect();
        let items: Vec<Item> = chunk.into_iter().map(|(_, item)| item).collect();
        match self.batch_write(table, items.clone(), cost).await {
            Ok(()) => ids.into_iter().map(|id| (id, Ok(()))).collect(),
            Err((_, err)) if err.class() == ErrorClass::InvalidRequest && items.len() > 1 => {
                let mut out = Vec::with_capacity(items.len());
                for (id, item) in ids.into_iter().zip(items) {
                    let result = self.batch_write(table, vec![item], cost).await;
                    out.push((id, result.map_err(|(_, e)| RowFailure::Error(Arc::new(e)))));
                }
                out
            }
            Err((pending, err)) => {
                let err = Arc::new(err);
                ids.into_iter()
                    .map(|id| match pending.contains(&id) {
                        true => (id, Err(RowFailure::Error(Arc::clone(&err)))),
                        false => (id, Ok(())),
                    })
                    .collect()
            }
        }
    }

    /// `BatchWriteItem` of up to 25 rows until none is unprocessed; on failure, the ids of the
    /// rows not written and the error.
    async fn batch_write(
        &self,
        table: &str,
        rows: Vec<Item>,
        cost: &Cost,
    ) -> Result<(), (Vec<String>, StoreError)> {
        let ids: Vec<String> = rows.iter().map(row_id).collect();
        crate::ddb::batch::put_items(&self.client, table, rows, cost)
            .await
            .map_err(|(pending, err)| (pending.iter().map(|at| ids[*at].clone()).collect(), err))
    }

    /// Every history row of `key`, oldest first (empty when history mode is off).
    pub async fn history(&self, key: &ItemKey) -> Result<Vec<Map<String, Value>>, StoreError> {
        let Some(table) = &self.config.history_table else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(table)
                .key_condition_expression(KEY_CONDITION_ITEM)
                .expression_attribute_names("#hk", HISTORY_KEY_ATTRIBUTE)
                .expression_attribute_values(":hk", AttributeValue::S(key.canonical().into()))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| StoreError::from_sdk("Query", e))?;
            for row in page.items.unwrap_or_default() {
                out.push(item_to_json(row)?);
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(out);
            }
        }
    }
}

/// The result of a record whose history row was not written.
fn record_failure(failure: &RowFailure) -> RecordResult<RatchetOutcome> {
    match failure {
        RowFailure::Deferred => RecordResult::Deferred,
        RowFailure::Error(err) if err.class() == ErrorClass::InvalidRequest => {
            RecordResult::Rejected(Rejection::new(
                RejectionCode::RejectedByDynamodb,
                format!("history row: {err}"),
            ))
        }
        RowFailure::Error(err) => RecordResult::Failed(err.shared()),
    }
}
