//! Group commit: the fast-path transactions of one batch share `TransactWriteItems` calls.
//!
//! On an SQS standard queue the pipeline hands [`Coordinator::apply`](crate::batch::Protocol::apply)
//! the whole batch at once (several transactions on one account included), so they may as
//! well commit together. (On SQS FIFO and Kinesis the ordered route hands it one record per
//! call: no group forms there.) Members are packed greedily into calls of up to 100 actions
//! (each member's requests and its header `Put`, exactly as it would send them alone) and
//! [`FAST_MAX_REQUEST_BYTES`], no two actions on one item (a member's items and its header
//! key are disjoint from every other member's, which also keeps two deliveries of one `txId`
//! apart). A call applies every member or none.
//!
//! # Invariant
//!
//! A member commits through a group call exactly as through its own call: the same actions,
//! conditions and header, so everything the fast path guarantees holds per member; the group
//! only adds atomicity across members. A cancelled call applied nothing: every member whose
//! actions the cancellation reasons name (a failed condition, a lock, a recorded header, a
//! conflict) leaves the group and runs alone ([`Coordinator::run_as`], under the same run id),
//! and the rest are sent again. A call that failed otherwise (an error after the SDK's
//! retries, whatever it applied) sends every member alone: each finds its header if the call
//! applied, and knows it as its own by the run id.
//!
//! # Cost
//!
//! The same write units as one call per member (DynamoDB bills actions, not calls); one
//! request and one round trip per group instead of one per transaction: 100 two-item
//! transfers take 4 calls (33 transfers of 3 actions per call). A member that conflicts costs
//! the group one cancelled call.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{CancellationReason, ReturnConsumedCapacity, TransactWriteItem};

use super::call::{header_entry, request_entry};
use super::FAST_MAX_REQUEST_BYTES;
use crate::batch::{Deadline, Outcome, RecordFailure, RecordResult};
use crate::ddb::error::StoreError;
use crate::ddb::item::Item;
use crate::txn::item::new_token;
use crate::txn::record::{Decided, RollbackReason, TxHeader, TxState};
use crate::txn::request::TxMessage;
use crate::txn::resolve::Resolved;
use crate::txn::{Coordinator, Cost, TxOutcome};

/// Most actions in one `TransactWriteItems`.
const MAX_ACTIONS: usize = 100;

/// A transaction of the batch, ready for the fast path.
pub(crate) struct Member {
    /// The record's index in the batch.
    pub index: usize,
    pub message: TxMessage,
    resolved: Vec<Resolved>,
    requests_json: String,
    /// The run id its header names (`DecidedBy`), kept if it runs alone.
    run_id: String,
    /// The items it writes and its header, as (table, canonical key).
    keys: BTreeSet<(String, String)>,
}

impl Member {
    fn actions(&self) -> usize {
        self.resolved.len() + 1
    }

    fn header(&self, coordinator: &Coordinator) -> Item {
        Decided {
            tx_id: &self.message.tx_id,
            requests_json: &self.requests_json,
            issued_at_ms: self.message.issued_at_ms,
            decider: &self.run_id,
            rolled_back: None,
            retain: coordinator.config.retain,
        }
        .item()
    }
}

/// The members of one call.
#[derive(Default)]
pub(crate) struct Group {
    pub members: Vec<Member>,
    actions: usize,
    bytes: usize,
    keys: BTreeSet<(String, String)>,
}

impl Group {
    fn fits(&self, m: &Member) -> bool {
        self.actions + m.actions() <= MAX_ACTIONS
            && self.bytes + m.requests_json.len() <= FAST_MAX_REQUEST_BYTES
            && self.keys.is_disjoint(&m.keys)
    }

    fn push(&mut self, m: Member) {
        self.actions += m.actions();
        self.bytes += m.requests_json.len();
        self.keys.extend(m.keys.iter().cloned());
        self.members.push(m);
    }
}

/// Pack members into groups, first fit in batch order.
pub(crate) fn pack(members: Vec<Member>) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for m in members {
        match groups.iter_mut().find(|g| g.fits(&m)) {
            Some(g) => g.push(m),
            None => {
                let mut g = Group::default();
                g.push(m);
                groups.push(g);
            }
        }
    }
    groups
}

/// Log each member's outcome as a transaction run alone logs it (`write_calls`: its own
/// calls when it ran alone; 0 when the group's call applied or settled it, `group` naming the
/// group's size).
fn log_members(
    results: &[MemberResult],
    tx_ids: &BTreeMap<usize, String>,
    alone_calls: &BTreeMap<usize, u64>,
    group: usize,
) {
    for (index, result) in results {
        if let RecordResult::Done(outcome) = result {
            let tx_id = tx_ids.get(index).map_or("", String::as_str);
            let write_calls = alone_calls.get(index).copied().unwrap_or(0);
            tracing::info!(
                tx_id,
                outcome = outcome.label(),
                write_calls,
                group,
                "transaction"
            );
        }
    }
}

/// What a cancelled group call's reasons say.
struct Cancelled {
    /// The members one of whose actions failed.
    named: BTreeSet<usize>,
    /// Of those, the members whose header alone failed, with the header found (`ALL_OLD`): a
    /// redelivery, settled without a call of its own.
    recorded: BTreeMap<usize, TxHeader>,
}

impl Cancelled {
    fn read(members: &[Member], owner: &[usize], reasons: &[CancellationReason]) -> Cancelled {
        let failed = |i: usize| {
            reasons
                .get(i)
                .and_then(|r| r.code())
                .is_some_and(|c| c != "None")
        };
        let named: BTreeSet<usize> = (0..owner.len())
            .filter(|&i| failed(i))
            .filter_map(|i| owner.get(i).copied())
            .collect();
        let mut recorded = BTreeMap::new();
        let mut start = 0;
        for (k, m) in members.iter().enumerate() {
            let header = start + m.actions() - 1;
            let only_header = (start..header).all(|i| !failed(i)) && failed(header);
            let found = reasons.get(header).and_then(|r| r.item());
            if let (true, Some(item)) = (only_header, found) {
                if let Ok(h) = TxHeader::try_from(item) {
                    recorded.insert(k, h);
                }
            }
            start += m.actions();
        }
        Cancelled { named, recorded }
    }

    /// Member `k`'s outcome from its recorded header, when that header settles it: the same
    /// requests, completed, committed or rolled back on a failed condition. Anything else
    /// (another hash, still open, aborted) runs alone, which reports or resumes it.
    fn recorded_outcome(&self, k: usize, m: &Member) -> Option<TxOutcome> {
        let h = self.recorded.get(&k)?;
        let hash = m.message.transaction_hash(&m.requests_json);
        let same = h.requests_hash.as_deref() == Some(hash.as_str());
        if !same || h.state != TxState::Completed {
            return None;
        }
        let ours = h.decider.as_deref() == Some(m.run_id.as_str());
        match (h.decision(), &h.reason) {
            (Some(TxState::Committed), _) if ours => Some(TxOutcome::Committed),
            (Some(TxState::Committed), _) => Some(TxOutcome::AlreadyCommitted),
            (Some(TxState::RolledBack), Some(RollbackReason::ConditionFailed)) => {
                Some(TxOutcome::AlreadyRolledBack {
                    request: h.failed_request.unwrap_or(0),
                })
            }
            _ => None,
        }
    }
}

/// One member's result.
pub(crate) type MemberResult = (usize, RecordResult<TxOutcome>);

impl Coordinator {
    /// `message` as a group member, or `None` when it does not fit the fast path (or its
    /// requests do not resolve: it runs alone and reports why).
    pub(crate) async fn member(
        &self,
        index: usize,
        message: TxMessage,
    ) -> Result<Member, TxMessage> {
        let requests_json = message.requests_json();
        // Too old (or issued ahead of the clock): runs alone, which refuses it.
        let too_old = self.config.too_old(&message).is_some();
        if too_old || !self.fits_fast_path(&message, &requests_json) {
            return Err(message);
        }
        let Ok(resolved) = self.resolve(&message.requests).await else {
            return Err(message);
        };
        let mut keys: BTreeSet<(String, String)> =
            resolved.iter().map(|r| r.order.clone()).collect();
        keys.insert((self.config.table.clone(), message.tx_id.clone()));
        Ok(Member {
            index,
            message,
            resolved,
            requests_json,
            run_id: new_token(),
            keys,
        })
    }

    /// Commit a group (see the module docs): every member's result.
    pub(crate) async fn commit_group(
        &self,
        group: Group,
        deadline: Deadline,
        cost: &Cost,
    ) -> Vec<MemberResult> {
        let mut members = group.members;
        let tx_ids: BTreeMap<usize, String> = members
            .iter()
            .map(|m| (m.index, m.message.tx_id.clone()))
            .collect();
        let size = members.len();
        let mut results = Vec::with_capacity(members.len());
        let mut alone = Vec::new();
        while members.len() > 1 {
            if deadline.expired() {
                results.extend(members.drain(..).map(|m| (m.index, RecordResult::Deferred)));
                break;
            }
            // Bounded on its own: at the cut-off a call in flight leaves its members unknown
            // (cut off, delivered again), while results already known are kept.
            let Some(answer) = deadline.bound_part(self.group_call(&members, cost)).await else {
                let cut = |m: Member| {
                    let failure = RecordFailure::CutOff("transaction");
                    (m.index, RecordResult::Failed(failure))
                };
                results.extend(members.drain(..).map(cut));
                break;
            };
            match answer {
                Ok(None) => {
                    let done = members.drain(..).map(|m| m.index);
                    results.extend(done.map(|i| (i, RecordResult::Done(TxOutcome::Committed))));
                }
                Ok(Some(cancelled)) if !cancelled.named.is_empty() => {
                    let mut stay = Vec::new();
                    for (k, m) in members.into_iter().enumerate() {
                        if !cancelled.named.contains(&k) {
                            stay.push(m);
                        } else if let Some(outcome) = cancelled.recorded_outcome(k, &m) {
                            results.push((m.index, RecordResult::Done(outcome)));
                        } else {
                            alone.push(m);
                        }
                    }
                    members = stay;
                }
                // Cancelled for no member's action, or failed: each member alone.
                Ok(Some(_)) | Err(_) => alone.append(&mut members),
            }
        }
        alone.append(&mut members);
        let alone_calls = self.run_alone(alone, deadline, cost, &mut results).await;
        log_members(&results, &tx_ids, &alone_calls, size);
        results
    }

    /// Run each member that left its group on its own (its results pushed to `results`);
    /// returns each one's write calls.
    async fn run_alone(
        &self,
        alone: Vec<Member>,
        deadline: Deadline,
        cost: &Cost,
        results: &mut Vec<MemberResult>,
    ) -> BTreeMap<usize, u64> {
        let runs = alone.into_iter().map(|m| async move {
            let own = Cost::default();
            // Boxed: the run's state machine is deep, and this one sits inside the batch's.
            let run = Box::pin(self.run_as(&m.message, deadline, &own, m.run_id.clone()));
            // Each run bounded on its own: one still in flight at the cut-off does not take the
            // group's other results with it.
            let result = match deadline.bound_part(run).await {
                Some(Ok(outcome)) => RecordResult::Done(outcome),
                Some(Err(e)) => e.into_record_result(),
                None => RecordResult::Failed(RecordFailure::CutOff("transaction")),
            };
            (m.index, result, own)
        });
        let mut alone_calls = BTreeMap::new();
        for (index, result, own) in futures::future::join_all(runs).await {
            cost.absorb(&own);
            alone_calls.insert(index, own.write_calls());
            results.push((index, result));
        }
        alone_calls
    }

    /// One call for `members`: `Ok(None)` applied; `Ok(Some(c))` cancelled, naming members;
    /// `Err` failed otherwise.
    async fn group_call(
        &self,
        members: &[Member],
        cost: &Cost,
    ) -> Result<Option<Cancelled>, StoreError> {
        let token = new_token();
        let mut entries: Vec<TransactWriteItem> = Vec::new();
        let mut owner = Vec::new();
        for (k, m) in members.iter().enumerate() {
            for r in &m.resolved {
                entries.push(request_entry(r, &token)?);
            }
            entries.push(header_entry(&self.config.table, m.header(self))?);
            owner.extend(std::iter::repeat_n(k, m.actions()));
        }
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(entries))
            .client_request_token(token)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        let err = match result {
            Ok(out) => {
                cost.add_transactional(out.consumed_capacity(), owner.len());
                return Ok(None);
            }
            Err(err) => err,
        };
        cost.add_failed();
        if let SdkError::ServiceError(e) = &err {
            if let TransactWriteItemsError::TransactionCanceledException(c) = e.err() {
                return Ok(Some(Cancelled::read(
                    members,
                    &owner,
                    c.cancellation_reasons(),
                )));
            }
        }
        Err(StoreError::from_sdk("TransactWriteItems", err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(index: usize, items: &[&str], tx_id: &str) -> Member {
        let mut keys: BTreeSet<(String, String)> = items
            .iter()
            .map(|k| ("Accounts".to_string(), (*k).to_string()))
            .collect();
        keys.insert(("Tx".to_string(), tx_id.to_string()));
        Member {
            index,
            message: TxMessage {
                tx_id: tx_id.into(),
                requests: Vec::new(),
                raw_requests: Vec::new(),
                issued_at_ms: None,
            },
            resolved: Vec::new(),
            requests_json: "[]".into(),
            run_id: "r".into(),
            keys,
        }
    }

    #[test]
    fn members_sharing_an_item_or_a_tx_id_go_to_different_calls() {
        let groups = pack(vec![
            member(0, &["a", "b"], "t0"),
            member(1, &["c", "d"], "t1"),
            member(2, &["b", "e"], "t2"),
            member(3, &["f"], "t1"),
        ]);
        let indices: Vec<Vec<usize>> = groups
            .iter()
            .map(|g| g.members.iter().map(|m| m.index).collect())
            .collect();
        assert_eq!(indices, [vec![0, 1], vec![2, 3]]);
    }
}
