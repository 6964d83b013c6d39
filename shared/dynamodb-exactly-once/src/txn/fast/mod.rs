//! The fast path: a transaction of at most [`FAST_MAX_REQUESTS`] requests runs as **one
//! `TransactWriteItems`** — each request as its own action, its condition `AND`
//! `attribute_not_exists(_txLock)`, a `Put` or `Update` stamping a fresh `_txVer` — plus the
//! `Put` of its TX header, created already completed and committed, conditioned on the
//! `txId` not being recorded ([`Decided`]).
//!
//! # Invariant
//!
//! DynamoDB applies the call whole or not at all, and serializes it with every other write to
//! its items, so a `Locked` read of several items (one `TransactGetItems`) sees all of the
//! transaction or none of it (`Committed` and `Uncommitted` reads are per item).
//! The header `Put` is the same idempotency point as the lock path's creation: of a fast-path
//! call and a lock-path creation of one `txId`, whichever lands first is the transaction, and
//! the other finds its header (same requests hash: a duplicate, resumed or reported; another
//! hash: `tx_id_reused`). A fast-path write never lands on a locked item, so no lock-path
//! undo can revert it; and it moves `_txVer` (or removes the item), so a lock-path
//! transaction that read the item before fails its lock write and reads again: every image
//! the lock path saves is committed state. Nothing is ever locked, so there is nothing for
//! the sweeper and no heartbeat.
//!
//! # Cost
//!
//! One round trip and one write request. Write units as AWS bills them: twice the items'
//! units (transactional) plus 2 for the header (about 250 bytes): a two-item transfer of
//! small items is 6 (native `TransactWriteItems`: 4; the 2 more are the 15-day idempotency
//! record). No reads, no index writes.
//!
//! # Failure modes
//!
//! The cancellation reasons drive the outcome, without a read:
//!
//! * the header exists: the recorded transaction (a duplicate, or the lock path's, resumed);
//! * a request's own condition failed: recorded as rolled back with one `PutItem` of a
//!   completed header (a failed transaction stays failed on redelivery); when the reason
//!   carries no item, a consistent read first tells an absent item from a missing `ALL_OLD`;
//! * an item is held by a lock-path transaction: met as the lock path meets it (finalize,
//!   undo, or wait on a pending holder up to the patience), then the call is sent again; held
//!   by this transaction itself (a duplicate delivery on the lock path, its lock write holding
//!   the header at the moment of the call, so the header's reason is a conflict): sent again
//!   after a short wait, as for a conflict (the next call finds the record and resumes it),
//!   never rolled back as a silent holder;
//! * `TransactionConflict`, `ThrottlingError`, `ProvisionedThroughputExceeded`: sent again
//!   after a short jittered wait, up to [`CONFLICT_RETRIES`] times (within the deadline),
//!   then the run ends as contention and the message is delivered again. Contention never
//!   hands a transaction to the lock path: that path saves each item's image beside its new
//!   value, so an item over about 200 KB that commits here would be refused there, and the
//!   outcome would depend on timing;
//! * DynamoDB rejects the call as a whole: for its size (its message names a size), the
//!   lock path, which writes item by item, takes it; for anything else (overlapping document
//!   paths, an unused placeholder) the request is invalid whatever the path: recorded as
//!   rolled back `invalid_request` with one `PutItem`, as a request DynamoDB names invalid;
//! * an answer lost after the call applied: the SDK's retry carries the same
//!   `ClientRequestToken` (DynamoDB answers it as the first call within 10 minutes), and
//!   after that the header names this run as its decider.

mod call;
mod group;

pub(super) use group::{pack, Group, MemberResult};

use std::time::Duration;

use call::{fast_outcome, header_entry, request_entry, FastWrite};

use super::item::{lock_of, new_token};
use super::lock::LockWait;
use super::record::{parse_owner, Decided, RollbackReason, TxHeader};
use super::request::TxMessage;
use super::resolve::Resolved;
use super::{Coordinator, Cost, TxError};
use crate::batch::Deadline;
use crate::ddb::error::StoreError;
use crate::ddb::retry::Backoff;

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;

/// Most requests on the fast path: `TransactWriteItems` takes 100 actions, the header is one.
pub const FAST_MAX_REQUESTS: usize = 99;
/// Largest requests JSON on the fast path (DynamoDB's aggregate limit is 4 MB of items; a
/// call it refuses as too large goes to the lock path anyway).
pub(crate) const FAST_MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024;
/// Fast-path calls sent again after a `TransactionConflict` (or a throttled item) before the
/// run ends as contention (about 4–7 s of waits).
pub(crate) const CONFLICT_RETRIES: usize = 40;
/// Waits before sending again after a conflict: 5 ms doubling up to 100 ms, jittered.
const CONFLICT_WAIT: Backoff = Backoff::new(
    Duration::from_millis(5),
    Duration::from_millis(100),
    CONFLICT_RETRIES,
);

/// Whether DynamoDB's message refusing a whole call is about its size ("Transaction payload
/// size cannot exceed 4MB. Payload Size: …", as DynamoDB Local 3.3 words it): the lock path,
/// which writes item by item, may still take it.
fn too_large(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("size") || message.contains("too large") || message.contains("length")
}

/// How the fast path left a transaction.
#[derive(Debug)]
pub(super) enum Fast {
    /// Its header: completed by this run, or recorded by another delivery (same requests).
    Header(Box<TxHeader>),
    /// The lock path takes it.
    LockPath,
}

impl Fast {
    fn header(header: TxHeader) -> Fast {
        Fast::Header(Box::new(header))
    }
}

/// What a fast-path run keeps between its calls.
struct SendAgain {
    /// Waits before sending again (a conflict, an item that is there after all).
    conflicts: Box<dyn Iterator<Item = Duration> + Send>,
    /// The wait on a lock-path holder met.
    wait: LockWait,
}

impl SendAgain {
    /// Wait before the next call; once the budget is spent, the run ends as contention
    /// (delivered again), never by handing the transaction to the lock path.
    async fn pause(&mut self, tx_id: &str) -> Result<Option<Fast>, TxError> {
        match self.conflicts.next() {
            Some(pause) => {
                tokio::time::sleep(pause).await;
                Ok(None)
            }
            None => Err(TxError::Contention {
                tx_id: tx_id.to_string(),
                attempts: u32::try_from(CONFLICT_RETRIES + 1).unwrap_or(u32::MAX),
            }),
        }
    }
}

/// What one fast-path run needs.
pub(super) struct FastRun<'a> {
    pub message: &'a TxMessage,
    pub requests_json: &'a str,
    pub resolved: &'a [Resolved],
    /// The run's id (`DecidedBy`).
    pub run_id: &'a str,
    pub deadline: Deadline,
    pub cost: &'a Cost,
}

impl Coordinator {
    /// Whether `message` may take the fast path.
    pub(super) fn fits_fast_path(&self, message: &TxMessage, requests_json: &str) -> bool {
        self.config.fast_path
            && !message.requests.is_empty()
            && message.requests.len() <= FAST_MAX_REQUESTS
            && requests_json.len() <= FAST_MAX_REQUEST_BYTES
    }

    /// Run the transaction as one call (see the module docs). `invalid` receives DynamoDB's
    /// message when it rejected a request.
    pub(super) async fn run_fast(
        &self,
        run: &FastRun<'_>,
        invalid: &mut Option<String>,
    ) -> Result<Fast, TxError> {
        let mut again = SendAgain {
            conflicts: Box::new(CONFLICT_WAIT.delays()),
            wait: LockWait::new(),
        };
        loop {
            if run.deadline.expired() {
                return Err(TxError::Deferred);
            }
            let header = Decided {
                tx_id: &run.message.tx_id,
                requests_json: run.requests_json,
                issued_at_ms: run.message.issued_at_ms,
                decider: run.run_id,
                rolled_back: None,
                retain: self.config.retain,
            }
            .item();
            let ending = match self.fast_call(run, header.clone()).await? {
                FastWrite::Committed => return Ok(Fast::header(TxHeader::try_from(&header)?)),
                FastWrite::Invalid(i, message) => {
                    *invalid = Some(message);
                    let why = (RollbackReason::InvalidRequest, run.resolved[i].index);
                    return self.record_failed(run, why).await;
                }
                other => other,
            };
            if let Some(fast) = self.settle(run, ending, &mut again, invalid).await? {
                return Ok(fast);
            }
        }
    }

    /// What a call that did not apply leads to: `Some`, the end of the fast path; `None`,
    /// send the call again (after meeting a lock, or a short wait).
    async fn settle(
        &self,
        run: &FastRun<'_>,
        ending: FastWrite,
        again: &mut SendAgain,
        invalid: &mut Option<String>,
    ) -> Result<Option<Fast>, TxError> {
        let failed = |i: usize| (RollbackReason::ConditionFailed, run.resolved[i].index);
        match ending {
            FastWrite::Recorded(old) => {
                let found = match old {
                    Some(item) => Some(TxHeader::try_from(&item)?),
                    None => self.tx.get(&run.message.tx_id).await?,
                };
                // None: it expired between the call and the read; send again.
                match found {
                    Some(existing) => Ok(Some(self.found_recorded(run, existing).await?)),
                    None => Ok(None),
                }
            }
            FastWrite::Locked(i, item) => self.meet_held(run, i, &item, again).await,
            FastWrite::ConditionFailed(i) => Ok(Some(self.record_failed(run, failed(i)).await?)),
            FastWrite::FailedUnread(i) => match self.get_item(&run.resolved[i]).await? {
                // Absent: the request's own condition failed on the absent item.
                None => Ok(Some(self.record_failed(run, failed(i)).await?)),
                Some(item) if lock_of(&item).is_some() => {
                    self.meet_held(run, i, &item, again).await
                }
                // There after all (`ALL_OLD` left out): send again, within the budget.
                Some(_) => again.pause(&run.message.tx_id).await,
            },
            FastWrite::Conflict => again.pause(&run.message.tx_id).await,
            FastWrite::RefusedWhole(message) if too_large(&message) => {
                tracing::debug!(tx_id = %run.message.tx_id, message,
                    "the fast path's call was refused for its size: the lock path takes it");
                Ok(Some(Fast::LockPath))
            }
            FastWrite::RefusedWhole(message) => {
                tracing::debug!(tx_id = %run.message.tx_id, message,
                    "the fast path's call was refused as a whole: invalid_request");
                *invalid = Some(message);
                Ok(Some(self.refused_whole(run).await?))
            }
            FastWrite::Committed | FastWrite::Invalid(..) => Err(TxError::Store(
                StoreError::Inconsistent("fast path: an ending settled twice".into()),
            )),
        }
    }

    /// Request `i`'s item is locked: met as the lock path meets it (then the call is sent
    /// again); but a lock of this transaction itself (a duplicate delivery on the lock path,
    /// whose lock write held the header when this call was cancelled) is only waited out
    /// (within the conflict budget) and the call sent again: the next call finds the record
    /// and resumes it, where meeting the lock would roll back its own attempt after the
    /// patience.
    async fn meet_held(
        &self,
        run: &FastRun<'_>,
        i: usize,
        item: &crate::ddb::item::Item,
        again: &mut SendAgain,
    ) -> Result<Option<Fast>, TxError> {
        let tx_id = run.message.tx_id.as_str();
        let own = lock_of(item)
            .and_then(parse_owner)
            .is_some_and(|(tx, _)| tx == tx_id);
        if own {
            return again.pause(tx_id).await;
        }
        self.meet_lock(&run.resolved[i], item, &mut again.wait, run.cost)
            .await?;
        Ok(None)
    }

    /// The one call: every request's action, then the header's.
    async fn fast_call(
        &self,
        run: &FastRun<'_>,
        header: crate::ddb::item::Item,
    ) -> Result<FastWrite, StoreError> {
        let token = new_token();
        let mut entries = Vec::with_capacity(run.resolved.len() + 1);
        for r in run.resolved {
            entries.push(request_entry(r, &token)?);
        }
        entries.push(header_entry(&self.config.table, header)?);
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(entries))
            .client_request_token(token)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        fast_outcome(result, run.resolved.len(), run.cost)
    }

    /// The call was refused as a whole for another reason than its size: the request is
    /// invalid on any path. Recorded as rolled back `invalid_request` (DynamoDB's message
    /// names no request: request 0 is recorded), with one `PutItem`.
    async fn refused_whole(&self, run: &FastRun<'_>) -> Result<Fast, TxError> {
        let first = run.resolved.first().map_or(0, |r| r.index);
        self.record_failed(run, (RollbackReason::InvalidRequest, first))
            .await
    }

    /// A request failed for a final reason: record the transaction as rolled back (nothing
    /// was applied), unless another delivery recorded it first.
    async fn record_failed(
        &self,
        run: &FastRun<'_>,
        (reason, request): (RollbackReason, usize),
    ) -> Result<Fast, TxError> {
        let decided = Decided {
            tx_id: &run.message.tx_id,
            requests_json: run.requests_json,
            issued_at_ms: run.message.issued_at_ms,
            decider: run.run_id,
            rolled_back: Some((reason, request)),
            retain: self.config.retain,
        };
        match self.tx.create_decided(&decided, run.cost).await? {
            super::record::Creation::Created(header) => Ok(Fast::header(header)),
            super::record::Creation::Exists(existing) => self.found_recorded(run, existing).await,
        }
    }

    /// The `txId` was recorded by another delivery: the same requests, or `tx_id_reused`.
    async fn found_recorded(&self, run: &FastRun<'_>, existing: TxHeader) -> Result<Fast, TxError> {
        let header = self
            .same_requests(run.message, run.requests_json, existing)
            .await?;
        Ok(Fast::header(header))
    }
}
