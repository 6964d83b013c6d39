//! How a [`Coordinator`] runs transaction messages to their outcome, attempt after attempt, and
//! is the [`Protocol`] of the `tx-coordinator` function.
//!
//! A run ([`Coordinator::run`]) creates the TX record (or finds it: the `txId` idempotency
//! point), then moves with the header's state until the transaction is completed:
//!
//! | header | the run |
//! |---|---|
//! | `pending` | locks every item, then commits, or rolls back on a failed condition or an invalid request ([`lock`](super::lock)) |
//! | `committed`, `rolled_back` | finalizes or undoes every item, marks it completed ([`finish`](super::finish)) |
//! | `completed` | returns its outcome; an aborted attempt (conflict, abandoned) is restarted |

mod apply;

use std::time::Duration;

use super::fast::{Fast, FastRun};
use super::lock::LockPhase;
use super::record::{Creation, RollbackReason, TxHeader, TxState};
use super::request::TxMessage;
use super::resolve::Resolved;
use super::{Coordinator, Cost, TxError, TxOutcome, TxReport};
use crate::batch::Deadline;
use crate::ddb::retry::Backoff;
use crate::rejection::{Rejection, RejectionCode};

/// Waits before restarting an aborted attempt: 50 ms doubling up to 250 ms, each jittered
/// up to twice that, so that no wait reaches 500 ms (the longest wait of the default 5
/// attempts before); one wait per restart.
const RESTART_FIRST: Duration = Duration::from_millis(50);
/// Longest restart wait before jitter.
const RESTART_MAX: Duration = Duration::from_millis(250);

/// What one run of a message keeps across its attempts.
struct Run<'a> {
    resolved: Vec<Resolved>,
    deadline: Deadline,
    cost: &'a Cost,
    /// Attempts made by this run (the first included).
    attempts: u32,
    /// Whether this run wrote the decision (commit or rollback).
    decided_here: bool,
    /// This run's id, written with its decision (`DecidedBy`).
    id: String,
    /// DynamoDB's message when it rejected a request of this run.
    invalid: Option<String>,
    /// The waits before restarts.
    restarts: Box<dyn Iterator<Item = Duration> + Send>,
    /// The items read (in lock order) while the record was created: the first attempt's
    /// starting point.
    prefetched: Option<Vec<Option<crate::ddb::Item>>>,
}

/// How a completed transaction ended for its run.
enum Ended {
    /// Final: committed, or rolled back for a final reason.
    Final(TxOutcome),
    /// The attempt was aborted (conflict, abandoned): nothing applied, a new attempt may run.
    Aborted,
}

impl Run<'_> {
    /// The outcome of a completed transaction (an invalid request is a rejection).
    fn ended(&self, header: &TxHeader) -> Result<Ended, TxError> {
        if header.decision == Some(TxState::Committed) {
            return Ok(Ended::Final(if self.decided_here {
                TxOutcome::Committed
            } else {
                TxOutcome::AlreadyCommitted
            }));
        }
        let request = header.failed_request.unwrap_or(0);
        match &header.reason {
            Some(RollbackReason::InvalidRequest) => {
                let message = self
                    .invalid
                    .clone()
                    .unwrap_or_else(|| "DynamoDB rejected the request".into());
                Err(TxError::Rejected(Rejection::new(
                    RejectionCode::RejectedByDynamodb,
                    format!("request {request}: {message}"),
                )))
            }
            Some(RollbackReason::ItemTooLarge) => {
                let message = self.invalid.clone().unwrap_or_else(|| {
                    "the item and the image the lock path saves beside its new value would \
                     exceed DynamoDB's 400 KB item limit"
                        .into()
                });
                Err(TxError::Rejected(Rejection::new(
                    RejectionCode::ItemTooLarge,
                    format!("request {request}: {message}"),
                )))
            }
            Some(reason) if reason.is_final() => Ok(Ended::Final(if self.decided_here {
                TxOutcome::RolledBack { request }
            } else {
                TxOutcome::AlreadyRolledBack { request }
            })),
            _ => Ok(Ended::Aborted),
        }
    }
}

impl Coordinator {
    /// Run one transaction message to its outcome (or resume it, or report its outcome). A
    /// message naming a table outside the allow-list (one built with
    /// [`TxMessage::builder`]) is refused `table_not_allowed`.
    pub async fn run(&self, message: &TxMessage, deadline: Deadline) -> Result<TxReport, TxError> {
        if let Some(r) = message
            .requests
            .iter()
            .find(|r| !self.config.allowed_tables.contains(&r.table))
        {
            return Err(TxError::Rejected(Rejection::new(
                RejectionCode::TableNotAllowed,
                format!("table `{}` is not in the allow-list", r.table),
            )));
        }
        let cost = Cost::default();
        let outcome = self.run_with(message, deadline, &cost).await?;
        Ok(TxReport {
            outcome,
            write_calls: cost.write_calls(),
            write_units: cost.write_units(),
            index_write_units: cost.index_write_units(),
            billed_write_units: cost.billed_write_units(),
        })
    }

    async fn run_with(
        &self,
        message: &TxMessage,
        deadline: Deadline,
        cost: &Cost,
    ) -> Result<TxOutcome, TxError> {
        self.run_as(message, deadline, cost, super::item::new_token())
            .await
    }

    /// [`Self::run_with`] as the run `id` (`DecidedBy`): a group-commit member run alone
    /// after its group's call keeps its id, so that it knows a header the call wrote as its
    /// own.
    pub(super) async fn run_as(
        &self,
        message: &TxMessage,
        deadline: Deadline,
        cost: &Cost,
        id: String,
    ) -> Result<TxOutcome, TxError> {
        let run = self.run_steps(message, deadline, cost, id);
        let expired: crate::ddb::conflict::Expired =
            std::sync::Arc::new(move || deadline.expired());
        match crate::ddb::conflict::under_deadline(expired, run).await {
            // A write still refused (a conflict, a throttle) when the deadline came: the
            // transaction stays as it is and resumes on the next delivery.
            Err(TxError::Store(e)) if deadline.expired() && e.is_retryable() => {
                tracing::debug!(error = %e, "deadline reached while a write was sent again");
                Err(TxError::Deferred)
            }
            other => other,
        }
    }

    /// [`Self::run_as`]'s steps, every write sent again within `deadline`.
    async fn run_steps(
        &self,
        message: &TxMessage,
        deadline: Deadline,
        cost: &Cost,
        id: String,
    ) -> Result<TxOutcome, TxError> {
        if deadline.expired() {
            return Err(TxError::Deferred);
        }
        if let Some(too_old) = self.config.too_old(message) {
            return Err(too_old);
        }
        let resolved = self.resolve(&message.requests).await?;
        let restarts = Backoff::new(
            RESTART_FIRST,
            RESTART_MAX,
            self.config.max_attempts as usize,
        );
        let mut run = Run {
            resolved,
            deadline,
            cost,
            attempts: 1,
            decided_here: false,
            id,
            invalid: None,
            restarts: Box::new(restarts.delays()),
            prefetched: None,
        };
        let mut header = self.first_header(message, &mut run).await?;
        loop {
            let state = header.state;
            header = match state {
                TxState::Pending => self.attempt(&mut run, &header).await?,
                TxState::Committed if run.decided_here && self.config.read_ahead => {
                    self.complete_committed(&header, &run.resolved, cost)
                        .await?
                }
                TxState::Committed | TxState::RolledBack => {
                    self.complete(&header, &run.resolved, cost).await?
                }
                TxState::Completed => match run.ended(&header)? {
                    Ended::Final(outcome) => return Ok(outcome),
                    Ended::Aborted => self.restart_aborted(&mut run, &header).await?,
                },
            };
        }
    }

    /// The transaction's header to start from: completed by the fast path (one call, see
    /// [`fast`](super::fast)) when the transaction fits it and nothing held it up, else
    /// created (or found) for the lock path.
    async fn first_header(
        &self,
        message: &TxMessage,
        run: &mut Run<'_>,
    ) -> Result<TxHeader, TxError> {
        let requests_json = message.requests_json();
        let mut header = None;
        if self.fits_fast_path(message, &requests_json) {
            let fast = FastRun {
                message,
                requests_json: &requests_json,
                resolved: &run.resolved,
                run_id: &run.id,
                deadline: run.deadline,
                cost: run.cost,
            };
            if let Fast::Header(h) = self.run_fast(&fast, &mut run.invalid).await? {
                header = Some(*h);
            }
        }
        let header = match header {
            Some(h) => h,
            None if self.config.read_ahead => {
                // The items are read while the record is created: one round trip for both.
                let (created, read) = futures::join!(
                    self.create_or_resume(message, &requests_json, run.cost),
                    self.read_in_lock_order(&run.resolved)
                );
                run.prefetched = read.ok();
                created?
            }
            None => {
                self.create_or_resume(message, &requests_json, run.cost)
                    .await?
            }
        };
        // Decided by this run: its fast-path call (or a lost answer of it, retried).
        if header.decider.as_deref() == Some(run.id.as_str()) {
            run.decided_here = true;
        }
        Ok(header)
    }

    /// Step 1 of the lock path: create the record, or find it recorded with the same requests
    /// (compared by the hash the header keeps, whatever their size: no read of the parts).
    async fn create_or_resume(
        &self,
        message: &TxMessage,
        requests_json: &str,
        cost: &Cost,
    ) -> Result<TxHeader, TxError> {
        let created = self
            .tx
            .create(&message.tx_id, requests_json, message.issued_at_ms, cost)
            .await?;
        match created {
            Creation::Created(header) => Ok(header),
            Creation::Exists(existing) => {
                self.same_requests(message, requests_json, existing).await
            }
        }
    }

    /// `existing` if it records the same requests as `message`, else `tx_id_reused`.
    pub(super) async fn same_requests(
        &self,
        message: &TxMessage,
        requests_json: &str,
        existing: TxHeader,
    ) -> Result<TxHeader, TxError> {
        let same = match &existing.requests_hash {
            Some(hash) if *hash == message.transaction_hash(requests_json) => true,
            // Hashed without `issuedAt` (by a version before it, which ignored the field, or
            // for a message without one): the same requests are the same transaction.
            Some(hash) if existing.issued_at_ms.is_none() => {
                *hash == super::record::transaction_hash(requests_json, None)
            }
            Some(_) => false,
            // A record written before requests were hashed.
            None => self.tx.requests_json(&existing).await? == requests_json,
        };
        if !same {
            return Err(TxError::Rejected(Rejection::new(
                RejectionCode::TxIdReused,
                format!(
                    "txId {} is already recorded with other requests",
                    message.tx_id
                ),
            )));
        }
        Ok(existing)
    }

    /// Steps 2–3 of a pending attempt: lock every item, then decide (commit, or roll back);
    /// returns the header after.
    async fn attempt(&self, run: &mut Run<'_>, header: &TxHeader) -> Result<TxHeader, TxError> {
        if run.deadline.expired() {
            return Err(TxError::Deferred);
        }
        let cost = run.cost;
        let phase = self
            .lock_all(
                header,
                &run.resolved,
                run.prefetched.take(),
                cost,
                run.deadline,
            )
            .await?;
        let transition = match phase {
            LockPhase::Deferred => return Err(TxError::Deferred),
            LockPhase::Decided => return Ok(self.reload(&header.tx_id).await?),
            LockPhase::Locked(tokens) => self.commit(header, tokens, &run.id, cost).await?,
            LockPhase::ConditionFailed(i) => {
                let why = RollbackReason::ConditionFailed;
                self.roll_back_by(header, why, Some(i), Some(&run.id), cost)
                    .await?
            }
            LockPhase::Invalid(i, message) => {
                run.invalid = Some(message);
                let why = RollbackReason::InvalidRequest;
                self.roll_back_by(header, why, Some(i), Some(&run.id), cost)
                    .await?
            }
            LockPhase::TooLarge(i, message) => {
                run.invalid = Some(message);
                let why = RollbackReason::ItemTooLarge;
                self.roll_back_by(header, why, Some(i), Some(&run.id), cost)
                    .await?
            }
        };
        let after = self.header_after(transition, &header.tx_id).await?;
        // Moved by this write, or by an earlier attempt of it whose answer was lost.
        if after.decider.as_deref() == Some(run.id.as_str()) {
            run.decided_here = true;
        }
        Ok(after)
    }

    /// An aborted attempt: wait, then restart with the next attempt (unless the attempts or
    /// the time are spent).
    async fn restart_aborted(
        &self,
        run: &mut Run<'_>,
        header: &TxHeader,
    ) -> Result<TxHeader, TxError> {
        if run.attempts >= self.config.max_attempts {
            return Err(TxError::Contention {
                tx_id: header.tx_id.clone(),
                attempts: run.attempts,
            });
        }
        if run.deadline.expired() {
            return Err(TxError::Deferred);
        }
        run.attempts += 1;
        tokio::time::sleep(run.restarts.next().unwrap_or(RESTART_MAX)).await;
        let transition = self.restart(header, run.cost).await?;
        Ok(self.header_after(transition, &header.tx_id).await?)
    }
}

#[cfg(test)]
mod tests;
