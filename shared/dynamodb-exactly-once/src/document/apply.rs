//! Batches: records grouped by item; each item's records applied in batch order by one task,
//! items concurrently (bounded by `concurrency`).

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;

use super::record::DocumentRecord;
use super::{Document, DocumentOutcome};
use crate::batch::{Applied, Deadline, Protocol, RecordResult, Redelivery};
use crate::ddb::{Cost, ErrorClass, StoreError};
use crate::rejection::{Rejection, RejectionCode};

/// Results of one item's records.
type ItemResults = Vec<(usize, RecordResult<DocumentOutcome>)>;

impl Document {
    /// Apply one item's records in order. After a transient failure the item's later records
    /// are not attempted (reported failed with it), so a redelivery replays them in order.
    async fn apply_item(
        &self,
        records: Vec<(usize, DocumentRecord)>,
        deadline: Deadline,
        cost: &Cost,
    ) -> ItemResults {
        let mut results = Vec::with_capacity(records.len());
        let mut failed: Option<Arc<StoreError>> = None;
        for (i, record) in records {
            if let Some(err) = &failed {
                results.push((i, RecordResult::Failed(err.shared())));
                continue;
            }
            if deadline.expired() {
                results.push((i, RecordResult::Deferred));
                continue;
            }
            let result = match self.write_counted(&record, cost).await {
                Ok(outcome) => RecordResult::Done(outcome),
                Err(StoreError::Sdk { code, message, .. })
                    if code == super::write::LAYOUT_MISMATCH_CODE =>
                {
                    RecordResult::Rejected(Rejection::new(RejectionCode::LayoutMismatch, message))
                }
                Err(err) if err.class() == ErrorClass::InvalidRequest => RecordResult::Rejected(
                    Rejection::new(RejectionCode::RejectedByDynamodb, err.to_string()),
                ),
                Err(err) => {
                    tracing::debug!(record = i, op = record.op.name(), error = %err,
                        "document write failed; the item's later records wait for redelivery");
                    let err = Arc::new(err);
                    failed = Some(Arc::clone(&err));
                    RecordResult::Failed(err.shared())
                }
            };
            results.push((i, result));
        }
        results
    }
}

impl Protocol for Document {
    type Record = DocumentRecord;
    type Outcome = DocumentOutcome;

    fn parse(&self, body: &[u8]) -> Result<DocumentRecord, Rejection> {
        self.parse_record(body)
    }

    fn parse_delivered(&self, body: &[u8], delivery: &str) -> Result<DocumentRecord, Rejection> {
        Ok(self.parse_record(body)?.delivered_as(delivery))
    }

    fn concurrency(&self) -> usize {
        self.config.concurrency
    }

    /// A plain `list_append` applied again appends again.
    fn redelivery(&self) -> Redelivery {
        Redelivery::Ordered
    }

    async fn apply(
        &self,
        records: Vec<(usize, DocumentRecord)>,
        deadline: Deadline,
    ) -> Applied<DocumentOutcome> {
        let table = &self.config.table;
        let (records, refused) =
            crate::batch::fitting_keys(&self.client, table, records, |r| &r.key).await;
        let mut order: Vec<String> = Vec::new();
        let mut items: HashMap<String, Vec<(usize, DocumentRecord)>> = HashMap::new();
        for (i, record) in records {
            let id = record.key.canonical().to_string();
            items
                .entry(id.clone())
                .or_insert_with(|| {
                    order.push(id);
                    Vec::new()
                })
                .push((i, record));
        }
        let cost = Cost::default();
        let cost_ref = &cost;
        let results: Vec<ItemResults> =
            futures::stream::iter(order.into_iter().filter_map(|id| items.remove(&id)))
                .map(|records| self.apply_item(records, deadline, cost_ref))
                .buffer_unordered(self.config.concurrency)
                .collect()
                .await;
        Applied {
            results: results.into_iter().flatten().chain(refused).collect(),
            write_calls: cost.write_calls_usize(),
        }
    }
}
