//! Writing: one conditional `PutItem` per record ([`Ratchet::write`]), and per batch one
//! write per distinct key ([`Protocol::apply`]: coalescing).

use crate::ratchet::format::LAYOUT_ATTRIBUTE;
use std::collections::HashMap;
use std::sync::Arc;

use super::outcome::RatchetOutcome;
use super::record::{RatchetOp, RatchetRecord};
use super::{Ratchet, CONDITION_NEWER, CONDITION_NEWER_BIG};
use crate::batch::{Applied, Deadline, Protocol, RecordResult};
use crate::change::{no_change_mapping, ItemChange};
use crate::ddb::clock::epoch_seconds;
use crate::ddb::{conditional, Cond, Cost, ErrorClass, Item, StoreError};
use crate::rejection::{Rejection, RejectionCode};
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure,
};
use futures::StreamExt;

/// Results of one key's records.
type GroupResults = Vec<(usize, RecordResult<RatchetOutcome>)>;

impl Ratchet {
    /// Write one record (no coalescing): one conditional `PutItem` (in history mode, after
    /// its history row).
    pub async fn write(&self, record: &RatchetRecord) -> Result<RatchetOutcome, StoreError> {
        let cost = Cost::default();
        // With a lifetime ledger: this writer's promise first (and its age guard).
        if let Some((_, refused)) = self
            .check_lifetimes(vec![(0, record.clone())])
            .await
            .1
            .pop()
        {
            return Err(match refused {
                RecordResult::Failed(failure) => failure
                    .into_store_error()
                    .unwrap_or_else(|f| StoreError::Inconsistent(f.to_string())),
                other => StoreError::Inconsistent(format!("the record is {}", other.label())),
            });
        }
        if let Some(table) = &self.config.history_table {
            let (_, failed) = self
                .write_history(table, vec![(0, record.clone())], Deadline::none(), &cost)
                .await;
            if let Some((_, result)) = failed.into_iter().next() {
                return Err(match result {
                    RecordResult::Failed(failure) => match failure.into_store_error() {
                        Ok(err) => err,
                        Err(other) => StoreError::Inconsistent(format!("history row: {other}")),
                    },
                    RecordResult::Rejected(reason) => StoreError::Sdk {
                        operation: "BatchWriteItem",
                        class: ErrorClass::InvalidRequest,
                        code: reason.code.to_string(),
                        message: reason.message,
                        source: None,
                    },
                    other => StoreError::Inconsistent(format!("history row {}", other.label())),
                });
            }
        }
        self.write_counted(record, &cost)
            .await?
            .map_err(|refused| StoreError::Inconsistent(refused.to_string()))
    }

    /// One conditional `PutItem`: the outcome, or `layout_mismatch` when the stored item was
    /// written under other attribute names (see [`super::layout`]).
    async fn write_counted(
        &self,
        record: &RatchetRecord,
        cost: &Cost,
    ) -> Result<Result<RatchetOutcome, Rejection>, StoreError> {
        let key = record.key.canonical();
        if let Some(known) = self.cache.answer(key, record.version()) {
            return Ok(Ok(known)); // a warm redelivery: no call
        }
        let config = &self.config;
        let guard = self.layout.guard();
        let mut request = self
            .client
            .put_item()
            .table_name(&config.table)
            .set_item(Some(self.stored_item(record)?))
            .expression_attribute_names("#ts", &config.ts_attribute)
            .expression_attribute_names("#tb", &config.tie_break_attribute)
            .expression_attribute_values(":ts", record.ts.to_attribute())
            .expression_attribute_values(":tb", AttributeValue::S(record.token.clone()));
        for (placeholder, name) in guard.names {
            request = request.expression_attribute_names(placeholder, name);
        }
        if let Some(marker) = guard.value {
            request = request.expression_attribute_values(":lay", AttributeValue::S(marker));
        }
        let newer = match record.ts.is_big() {
            false => CONDITION_NEWER,
            true => {
                request =
                    request.expression_attribute_values(":numeric", AttributeValue::S("N".into()));
                CONDITION_NEWER_BIG
            }
        };
        let request = request.condition_expression(format!("({}) AND ({newer})", guard.condition));
        let result = request
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        let outcome = conditional("PutItem", result);
        match &outcome {
            Ok(Cond::Done(out)) => cost.add(out.consumed_capacity()),
            _ => cost.add_failed(),
        }
        Ok(Ok(match outcome? {
            Cond::Done(_) => {
                self.cache.note(key, record.version());
                RatchetOutcome::Applied
            }
            Cond::Failed { old } => {
                if let Some(refused) = old.as_ref().and_then(|o| self.layout.foreign(config, o)) {
                    return Ok(Err(refused));
                }
                let stored = old.as_ref().and_then(|o| self.stored_version(o));
                if let Some((ts, tb)) = &stored {
                    self.cache.note(key, (ts, tb));
                }
                if stored
                    .as_ref()
                    .is_some_and(|(ts, tb)| (ts, tb.as_str()) == record.version())
                {
                    RatchetOutcome::Duplicate
                } else {
                    RatchetOutcome::Stale
                }
            }
        }))
    }

    /// The item a record writes: the put's item, or a tombstone (key, version, flag, TTL).
    fn stored_item(&self, record: &RatchetRecord) -> Result<Item, StoreError> {
        let mut item = self.plain_stored_item(record)?;
        if let Some(marker) = self.layout.marker() {
            item.insert(LAYOUT_ATTRIBUTE.into(), AttributeValue::S(marker.into()));
        }
        Ok(item)
    }

    fn plain_stored_item(&self, record: &RatchetRecord) -> Result<Item, StoreError> {
        let RatchetOp::Put(item) = &record.op else {
            let config = &self.config;
            let mut item = record.key.to_item()?;
            let expires = epoch_seconds() + config.tombstone_ttl.as_secs();
            for (name, value) in [
                (&config.ts_attribute, record.ts.to_attribute()),
                (
                    &config.tie_break_attribute,
                    AttributeValue::S(record.token.clone()),
                ),
                (&config.deleted_attribute, AttributeValue::Bool(true)),
                (
                    &config.ttl_attribute,
                    AttributeValue::N(expires.to_string()),
                ),
            ] {
                item.insert(name.clone(), value);
            }
            return Ok(item);
        };
        Ok(item.clone())
    }

    /// Write one key's records: the winner, or the next candidate when DynamoDB rejects it.
    async fn write_group(
        &self,
        group: Vec<(usize, RatchetRecord)>,
        deadline: Deadline,
        cost: &Cost,
    ) -> GroupResults {
        if deadline.expired() {
            return group
                .into_iter()
                .map(|(i, _)| (i, RecordResult::Deferred))
                .collect();
        }
        let mut results = Vec::with_capacity(group.len());
        let mut candidates = group;
        // Greatest version first; equal versions are identical records (the token hashes the item).
        candidates.sort_by(|(_, a), (_, b)| b.version().cmp(&a.version()));
        while let Some((winner_index, winner)) = candidates.first().cloned() {
            let split = candidates
                .iter()
                .take_while(|(_, r)| r.version() == winner.version())
                .count();
            let same: Vec<usize> = candidates.drain(..split).map(|(i, _)| i).collect();
            let rest = || same.iter().skip(1).chain(candidates.iter().map(|(i, _)| i));
            match self.write_counted(&winner, cost).await {
                Ok(Err(refused)) => {
                    results.extend(
                        same.iter()
                            .map(|i| (*i, RecordResult::Rejected(refused.clone()))),
                    );
                }
                Ok(Ok(outcome)) => {
                    results.push((winner_index, RecordResult::Done(outcome)));
                    results.extend(same.iter().skip(1).map(|i| (*i, duplicate())));
                    results.extend(candidates.iter().map(|(i, _)| (*i, superseded())));
                    return results;
                }
                Err(err) if err.class() == ErrorClass::InvalidRequest => {
                    let reason = Rejection::new(RejectionCode::RejectedByDynamodb, err.to_string());
                    results.extend(
                        same.iter()
                            .map(|i| (*i, RecordResult::Rejected(reason.clone()))),
                    );
                }
                Err(err) => {
                    // Nothing of this key is acknowledged until its winner is written.
                    let others: Vec<usize> = rest().copied().collect();
                    if others.is_empty() {
                        results.push((winner_index, RecordResult::Failed(err.into())));
                        return results;
                    }
                    let shared = Arc::new(err);
                    results.extend(
                        others
                            .into_iter()
                            .chain([winner_index])
                            .map(|i| (i, RecordResult::Failed(shared.shared()))),
                    );
                    return results;
                }
            }
        }
        results
    }
}

fn duplicate() -> RecordResult<RatchetOutcome> {
    RecordResult::Done(RatchetOutcome::Duplicate)
}

fn superseded() -> RecordResult<RatchetOutcome> {
    RecordResult::Done(RatchetOutcome::Superseded)
}

impl Protocol for Ratchet {
    type Record = RatchetRecord;
    type Outcome = RatchetOutcome;

    fn parse(&self, body: &[u8]) -> Result<RatchetRecord, Rejection> {
        self.parse_record(body)
    }

    /// Replication, when [`super::RatchetConfig::replication`] is set.
    fn parse_change(&self, change: &ItemChange) -> Result<RatchetRecord, Rejection> {
        match &self.config.replication {
            Some(replication) => super::replicate::replicate(&self.config, replication, change),
            None => Err(no_change_mapping("RATCHET_CHANGES=replicate")),
        }
    }

    /// The tombstone lifetime: an older put may arrive after its item's tombstone expired
    /// (with a lifetime ledger: a shorter lifetime still in use, see [`super::LifetimeLedger`]).
    fn max_record_age(&self) -> Option<std::time::Duration> {
        Some(self.record_age_limit(epoch_seconds()))
    }

    /// Kept on the record: with a lifetime ledger, `apply` refuses it (`too_old`) when it is
    /// older than the guard the ledger gives.
    fn with_arrival(&self, mut record: RatchetRecord, arrived_ms: u64) -> RatchetRecord {
        record.arrived = Some(arrived_ms / 1000);
        record
    }

    fn concurrency(&self) -> usize {
        self.config.concurrency
    }

    /// Records of one item in a row are one write (the winner); not in history mode, where
    /// each record's history row is a write of its own that may fail alone.
    fn coalesce_key(&self, record: &RatchetRecord) -> Option<String> {
        self.config
            .history_table
            .is_none()
            .then(|| record.key.canonical().to_string())
    }

    /// In history mode, every record's history row first; then, per key, the winner of the
    /// records whose row is written (a record is acknowledged when both are done).
    async fn apply(
        &self,
        records: Vec<(usize, RatchetRecord)>,
        deadline: Deadline,
    ) -> Applied<RatchetOutcome> {
        let cost = Cost::default();
        let table = &self.config.table;
        let (records, mut results) = self.check_lifetimes(records).await;
        if records.is_empty() {
            return Applied {
                results,
                write_calls: 0,
            };
        }
        let (records, refused) =
            crate::batch::fitting_keys(&self.client, table, records, |r| &r.key).await;
        let records = match &self.config.history_table {
            Some(table) => {
                let (records, history) = self.write_history(table, records, deadline, &cost).await;
                results.extend(history);
                records
            }
            None => records,
        };
        results.extend(refused);
        results.extend(self.write_latest(records, deadline, &cost).await);
        Applied {
            results,
            write_calls: cost.write_calls_usize(),
        }
    }
}

impl Ratchet {
    /// Coalesce by key and write each key's winner, keys concurrently.
    async fn write_latest(
        &self,
        records: Vec<(usize, RatchetRecord)>,
        deadline: Deadline,
        cost: &Cost,
    ) -> GroupResults {
        let mut order: Vec<String> = Vec::new();
        let mut groups: HashMap<String, Vec<(usize, RatchetRecord)>> = HashMap::new();
        for (i, record) in records {
            let id = record.key.canonical().to_string();
            groups
                .entry(id.clone())
                .or_insert_with(|| {
                    order.push(id);
                    Vec::new()
                })
                .push((i, record));
        }
        let results: Vec<GroupResults> =
            futures::stream::iter(order.into_iter().filter_map(|id| groups.remove(&id)))
                .map(|group| {
                    let indices: Vec<usize> = group.iter().map(|(i, _)| *i).collect();
                    let writing = self.write_group(group, deadline, cost);
                    deadline.bound_records(indices, "PutItem", writing)
                })
                .buffer_unordered(self.config.concurrency)
                .collect()
                .await;
        results.into_iter().flatten().collect()
    }
}
