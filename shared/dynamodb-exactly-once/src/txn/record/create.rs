//! Creating a TX record: the header, with its requests inline or in part items (see the
//! layout in [`super`]).
//!
//! Invariant: a header that exists has all its parts. Parts are written before the header
//! or in the same `TransactWriteItems`; every creation writes its parts under its own
//! `Nonce`, so a second creation of the same `txId` can never overwrite the recorded ones
//! (its parts, if any were written, expire by TTL).
//!
//! Cost (a large transaction's first delivery): up to [`CREATE_AT_ONCE_BYTES`] of requests,
//! one `TransactWriteItems` of two puts (transactional: each billed twice); larger, a read,
//! the parts (in waves of [`PARTS_PER_WAVE`], [`PART_WAVE_GAP`] apart: one partition key takes
//! 1,000 write units per second, a part is up to 350; a record of P parts takes
//! ⌈P/2⌉ − 1 seconds more, e.g. 9 s for 7 MB of requests), the header. A redelivery that finds the record pays one failed condition (or,
//! when the parts go first, one read).
//!
//! Failure modes: a lost answer is recognised by the `Nonce` in the header the next send is
//! refused on; `TransactionConflict` is waited out ([`CREATE_CONFLICT_WAIT`]), then the
//! read-first way is taken.

use crate::txn::format::{
    ATTR_ATTEMPT, ATTR_CHUNK, ATTR_EXPIRES_AT, ATTR_ISSUED_AT, ATTR_LAST_TOUCHED, ATTR_NONCE,
    ATTR_PART, ATTR_PARTS, ATTR_REQUESTS, ATTR_REQUESTS_HASH, ATTR_STATE, ATTR_SWEEP_KEY,
    ATTR_TX_ID, ATTR_VERSION,
};
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    Put, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};

use super::table::{count, TxTable, CONDITION_NEW};
use super::{
    get_s, header_key, n, part_sort_key, s, transaction_hash, Creation, TxHeader, TxState,
    INLINE_REQUEST_BYTES, PART_BYTES, PART_TTL_SECONDS,
};
use crate::ddb::clock::{epoch_millis, epoch_seconds};
use crate::ddb::cond::{conditional, Cond};
use crate::ddb::conflict::again_on_conflict;
use crate::ddb::error::{ErrorClass, StoreError};
use crate::ddb::item::Item;
use crate::ddb::retry::Backoff;
use crate::ddb::Cost;
use crate::txn::item::new_token;

/// Largest requests JSON created with its header in one call. Bounded because a redelivery
/// that finds the record pays a refused call (AWS may bill its part write too, twice) where
/// the read-first way pays one read; 64 KB keeps that under about 130 write units.
pub(crate) const CREATE_AT_ONCE_BYTES: usize = 64 * 1024;

/// Part items written at once: each is up to [`PART_BYTES`] (350 write units), and all of a
/// record's parts share its partition key (`TxId`), which takes at most 1,000 write units per
/// second: two parts (700 units) leave room for the header and a redelivery's writes.
pub(super) const PARTS_PER_WAVE: usize = 2;
/// Wait between waves of part writes, from the previous wave's last answer: the writes of two
/// waves never land within one second (a send is applied before its answer, and the next
/// wave is sent a second after that answer).
pub(super) const PART_WAVE_GAP: Duration = Duration::from_secs(1);

/// Waits before sending a creation again after a `TransactionConflict`: 5 ms doubling up to
/// 100 ms, jittered, 6 times; then the read-first way.
const CREATE_CONFLICT_WAIT: Backoff =
    Backoff::new(Duration::from_millis(5), Duration::from_millis(100), 6);

/// Why a one-call creation was refused.
enum AtOnceFailure {
    /// The header exists (its image, when DynamoDB returned it).
    Exists(Option<Item>),
    /// A transaction conflict: nothing was written, send again.
    Conflict,
    /// Anything else, as the store reports it.
    Error(StoreError),
}

fn at_once_failure(err: SdkError<TransactWriteItemsError, impl std::fmt::Debug>) -> AtOnceFailure {
    if let Some(TransactWriteItemsError::TransactionCanceledException(e)) = err.as_service_error() {
        let reasons = e.cancellation_reasons();
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        if code(0) == "ConditionalCheckFailed" {
            return AtOnceFailure::Exists(reasons.first().and_then(|r| r.item().cloned()));
        }
        if crate::txn::sent_again(code(0)) || crate::txn::sent_again(code(1)) {
            return AtOnceFailure::Conflict;
        }
    }
    AtOnceFailure::Error(StoreError::from_sdk("TransactWriteItems", err))
}

/// Part `i` (from 1) of a creation's requests JSON.
fn part_item(tx_id: &str, nonce: &str, i: u64, chunk: &str) -> Item {
    let mut item = Item::from([
        (ATTR_TX_ID.to_string(), s(tx_id)),
        (ATTR_PART.to_string(), s(part_sort_key(Some(nonce), i))),
        (ATTR_CHUNK.to_string(), s(chunk)),
        (
            ATTR_EXPIRES_AT.to_string(),
            n(epoch_seconds() + PART_TTL_SECONDS),
        ),
    ]);
    item.shrink_to_fit();
    item
}

impl TxTable {
    /// Create the record, or find it: [`Creation::Exists`] when the id is taken by another
    /// creation.
    ///
    /// * Requests of at most [`INLINE_REQUEST_BYTES`]: the header alone, requests inline.
    /// * Up to [`CREATE_AT_ONCE_BYTES`]: the header and its one part in one
    ///   `TransactWriteItems` (one round trip; the part is billed twice, transactional).
    /// * Larger, or when that call keeps meeting conflicts: the header is read first (a
    ///   redelivery finds it and writes no part: each is up to 350 KB of write units, kept 90
    ///   days), then the parts, all at once, then the header.
    pub(crate) async fn create(
        &self,
        tx_id: &str,
        requests_json: &str,
        issued_at_ms: Option<u64>,
        cost: &Cost,
    ) -> Result<Creation, StoreError> {
        let nonce = new_token();
        let mut header = header_key(tx_id);
        header.insert(ATTR_NONCE.into(), s(&nonce));
        header.insert(
            ATTR_REQUESTS_HASH.into(),
            s(transaction_hash(requests_json, issued_at_ms)),
        );
        if let Some(at) = issued_at_ms {
            header.insert(ATTR_ISSUED_AT.into(), n(at));
        }
        header.insert(ATTR_STATE.into(), s(TxState::Pending.as_str()));
        header.insert(ATTR_VERSION.into(), n(1));
        header.insert(ATTR_ATTEMPT.into(), n(1));
        header.insert(ATTR_SWEEP_KEY.into(), s(super::sweep_key(tx_id)));
        header.insert(ATTR_LAST_TOUCHED.into(), n(epoch_millis()));
        // The header stays under 1 KB while the items are locked: every lock write's
        // `ConditionCheck` of it is billed by its size (twice, transactional).
        if requests_json.len() <= INLINE_REQUEST_BYTES {
            header.insert(ATTR_REQUESTS.into(), s(requests_json));
            return self.put_header(tx_id, header, cost).await;
        }
        if requests_json.len() <= CREATE_AT_ONCE_BYTES {
            let part = part_item(tx_id, &nonce, 1, requests_json);
            let mut with_part = header.clone();
            with_part.insert(ATTR_PARTS.into(), n(1));
            if let Some(created) = self.create_at_once(tx_id, with_part, part, cost).await? {
                return Ok(created);
            }
        }
        if let Some(existing) = self.get(tx_id).await? {
            return Ok(Creation::Exists(existing));
        }
        let parts = self.put_parts(tx_id, &nonce, requests_json, cost).await?;
        header.insert(ATTR_PARTS.into(), n(parts));
        self.put_header(tx_id, header, cost).await
    }

    /// The header (with `attribute_not_exists`) and its only part in one `TransactWriteItems`
    /// (a fresh `ClientRequestToken` per send: the SDK's retries of a send reuse it). `None`
    /// when conflicts kept it from landing ([`CREATE_CONFLICT_WAIT`]): nothing was written.
    async fn create_at_once(
        &self,
        tx_id: &str,
        header: Item,
        part: Item,
        cost: &Cost,
    ) -> Result<Option<Creation>, StoreError> {
        let header_put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(header.clone()))
            .condition_expression(CONDITION_NEW)
            .expression_attribute_names("#txpid", ATTR_TX_ID)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::Inconsistent(format!("TX {tx_id}: header put: {e}")))?;
        let part_put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(part))
            .build()
            .map_err(|e| StoreError::Inconsistent(format!("TX {tx_id}: part put: {e}")))?;
        let mut waits = CREATE_CONFLICT_WAIT.delays();
        loop {
            let result = self
                .client
                .transact_write_items()
                .transact_items(TransactWriteItem::builder().put(header_put.clone()).build())
                .transact_items(TransactWriteItem::builder().put(part_put.clone()).build())
                .client_request_token(new_token())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            let err = match result {
                Ok(out) => {
                    cost.add_transactional(out.consumed_capacity(), 2);
                    return Ok(Some(Creation::Created(TxHeader::try_from(&header)?)));
                }
                Err(err) => err,
            };
            match at_once_failure(err) {
                AtOnceFailure::Exists(old) => {
                    cost.add_failed_condition(old.as_ref());
                    return self.found(tx_id, &header, old).await.map(Some);
                }
                AtOnceFailure::Conflict => {
                    cost.add_failed();
                    match waits.next() {
                        Some(wait) => tokio::time::sleep(wait).await,
                        None => return Ok(None),
                    }
                }
                AtOnceFailure::Error(e) => {
                    cost.add_failed();
                    return Err(e);
                }
            }
        }
    }

    /// The header a creation was refused on (`old`, or read when DynamoDB left it out): still
    /// ours when it carries our `Nonce` (our creation applied, its answer lost and the call
    /// sent again), else another creation's.
    async fn found(
        &self,
        tx_id: &str,
        ours: &Item,
        old: Option<Item>,
    ) -> Result<Creation, StoreError> {
        let existing = match old {
            Some(item) => TxHeader::try_from(&item)?,
            None => self.get(tx_id).await?.ok_or_else(|| {
                StoreError::Inconsistent(format!(
                    "TX {tx_id}: creation refused but no header found"
                ))
            })?,
        };
        let nonce = get_s(ours, ATTR_NONCE);
        Ok(if existing.nonce.is_some() && existing.nonce == nonce {
            Creation::Created(existing)
        } else {
            Creation::Exists(existing)
        })
    }

    /// Write the requests JSON as part items, [`PARTS_PER_WAVE`] at once, each wave
    /// [`PART_WAVE_GAP`] after the previous one answered; returns how many.
    async fn put_parts(
        &self,
        tx_id: &str,
        nonce: &str,
        requests_json: &str,
        cost: &Cost,
    ) -> Result<u64, StoreError> {
        let parts: Vec<(&str, u64)> = chunks(requests_json, PART_BYTES)
            .into_iter()
            .zip(1u64..)
            .collect();
        for (k, wave) in parts.chunks(PARTS_PER_WAVE).enumerate() {
            if k > 0 {
                // No wave after the run's deadline: the run ends `Deferred`, the parts written
                // (under this creation's nonce, which nothing else names) expire by their TTL.
                if crate::ddb::conflict::run_deadline_expired() {
                    return Err(StoreError::Sdk {
                        operation: "PutItem",
                        class: ErrorClass::Transient,
                        code: "DeadlineReached".into(),
                        message: format!(
                            "TX {tx_id}: the deadline came after {} of {} request parts",
                            k * PARTS_PER_WAVE,
                            parts.len()
                        ),
                        source: None,
                    });
                }
                tokio::time::sleep(PART_WAVE_GAP).await;
            }
            let puts = wave.iter().map(|&(chunk, i)| {
                // Unconditional: the key names this creation (its nonce), which no other uses.
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(part_item(tx_id, nonce, i, chunk)))
                    .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
                    .send()
            });
            for out in futures::future::join_all(puts).await {
                let out = out.map_err(|e| StoreError::from_sdk("PutItem", e))?;
                cost.add(out.consumed_capacity.as_ref());
            }
        }
        Ok(u64::try_from(parts.len()).unwrap_or(u64::MAX))
    }

    /// The header's conditional creation (`ALL_OLD` on failure; the creator recognises its
    /// own header by its `Nonce`).
    pub(super) async fn put_header(
        &self,
        tx_id: &str,
        header: Item,
        cost: &Cost,
    ) -> Result<Creation, StoreError> {
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(header.clone()))
            .condition_expression(CONDITION_NEW)
            .expression_attribute_names("#txpid", ATTR_TX_ID)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes);
        let result = again_on_conflict(|| request.clone().send()).await;
        let result = conditional("PutItem", result);
        count(cost, &result, |out| out.consumed_capacity.as_ref());
        match result? {
            Cond::Done(_) => Ok(Creation::Created(TxHeader::try_from(&header)?)),
            Cond::Failed { old } => self.found(tx_id, &header, old).await,
        }
    }
}

/// Split a string into chunks of at most `max` bytes on character boundaries.
fn chunks(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(max);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (head, tail) = rest.split_at(end);
        out.push(head);
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_char_boundaries() {
        let text = "aé".repeat(10);
        let parts = chunks(&text, 4);
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|p| p.len() <= 4));
    }
}
