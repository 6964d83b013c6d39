//! History mode: every record of a batch in the history table, at its own row, with
//! `BatchWriteItem` (25 rows per call, unprocessed rows asked again with backoff).
//!
//! A row is a function of the record alone (no processing time), so writing it again is a
//! no-op and the table is the same whatever the order, duplication or batching.

use crate::ratchet::format::{HISTORY_KEY_ATTRIBUTE, HISTORY_SORT_ATTRIBUTE};
use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::StreamExt;
use serde_json::{Map, Value};

use super::outcome::RatchetOutcome;
use super::record::{history_row, RatchetRecord};
use super::Ratchet;
use crate::batch::{Deadline, RecordResult};
use crate::ddb::item::item_to_json;
use crate::ddb::{Cost, ErrorClass, Item, ItemKey, StoreError};
use crate::rejection::{Rejection, RejectionCode};

/// Rows per `BatchWriteItem` (DynamoDB's limit).
const BATCH_WRITE_ROWS: usize = crate::ddb::batch::BATCH_WRITE_ITEMS;
/// Key condition of [`Ratchet::history`].
const KEY_CONDITION_ITEM: &str = "#hk = :hk";

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
