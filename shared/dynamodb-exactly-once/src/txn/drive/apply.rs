//! The coordinator as the batch [`Protocol`] of the `tx-coordinator` function: group commit
//! for the messages that fit it, one run per other message, each bounded by the deadline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};

use super::Coordinator;
use crate::batch::{Applied, Deadline, Outcome, Protocol, RecordResult};
use crate::rejection::Rejection;
use crate::txn::fast::{pack, Group, MemberResult};
use crate::txn::request::TxMessage;
use crate::txn::{Cost, TxOutcome};

impl Protocol for Coordinator {
    type Record = TxMessage;
    type Outcome = TxOutcome;

    fn parse(&self, body: &[u8]) -> Result<TxMessage, Rejection> {
        self.parse_message(body)
    }

    /// The idempotency horizon: a message older than the retention of completed records may
    /// find its record deleted and apply again; it is kept as a `too_old` dead letter.
    fn max_record_age(&self) -> Option<Duration> {
        Some(self.config.retain)
    }

    /// Transactions on one account keyed by partition key must not overtake each other: a
    /// transfer that failed transiently holds back the later ones of its key in the batch.
    fn ordered_by_key(&self) -> bool {
        true
    }

    fn concurrency(&self) -> usize {
        self.config.concurrency
    }

    async fn apply(
        &self,
        records: Vec<(usize, TxMessage)>,
        deadline: Deadline,
    ) -> Applied<TxOutcome> {
        // Boxed: the state machine of a batch of runs is deep enough to overflow the
        // compiler's layout depth inside the Lambda handler's.
        Box::pin(self.apply_batch(records, deadline)).await
    }
}

impl Coordinator {
    /// [`Protocol::apply`]: group commit for the members that fit it, one run per other
    /// message.
    async fn apply_batch(
        &self,
        records: Vec<(usize, TxMessage)>,
        deadline: Deadline,
    ) -> Applied<TxOutcome> {
        let calls = AtomicU64::new(0);
        let calls_ref = &calls;
        let group_cost = Cost::default();
        let mut alone = Vec::new();
        let mut groups = Vec::new();
        if self.config.group_commit && self.config.fast_path && records.len() > 1 {
            let mut members = Vec::new();
            for (i, message) in records {
                match self.member(i, message).await {
                    Ok(m) => members.push(m),
                    Err(message) => alone.push((i, message)),
                }
            }
            groups = pack(members);
        } else {
            alone = records;
        }
        let group_cost = &group_cost;
        // Each run and each group call is bounded on its own (a group's inside
        // `commit_group`), a little before the batch: at the cut-off the members that finished
        // keep their results, the others are reported `CutOff` (delivered again), and the
        // batch still answers.
        let work: Vec<BoxFuture<'_, Vec<MemberResult>>> = groups
            .into_iter()
            .map(|g: Group| self.commit_group(g, deadline, group_cost).boxed())
            .chain(alone.into_iter().map(|(i, message)| {
                let run =
                    async move { vec![self.apply_one(i, message, deadline, calls_ref).await] };
                deadline.bound_records(vec![i], "transaction", run).boxed()
            }))
            .collect();
        let results: Vec<(usize, RecordResult<TxOutcome>)> = futures::stream::iter(work)
            .buffer_unordered(self.config.concurrency)
            .flat_map(futures::stream::iter)
            .collect()
            .await;
        let calls = calls.into_inner() + group_cost.write_calls();
        Applied {
            results,
            write_calls: usize::try_from(calls).unwrap_or(usize::MAX),
        }
    }

    async fn apply_one(
        &self,
        i: usize,
        message: TxMessage,
        deadline: Deadline,
        calls: &AtomicU64,
    ) -> (usize, RecordResult<TxOutcome>) {
        let cost = Cost::default();
        let result = self.run_with(&message, deadline, &cost).await;
        calls.fetch_add(cost.write_calls(), Ordering::Relaxed);
        let result = match result {
            Ok(outcome) => {
                tracing::info!(tx_id = %message.tx_id, outcome = outcome.label(),
                    write_calls = cost.write_calls(), write_units = cost.write_units(),
                    "transaction");
                RecordResult::Done(outcome)
            }
            Err(e) => e.into_record_result(),
        };
        (i, result)
    }
}
