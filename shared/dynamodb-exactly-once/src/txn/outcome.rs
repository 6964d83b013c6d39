//! What running or driving a transaction ends with: [`TxOutcome`] (decided), [`TxError`]
//! (not decided now), [`TxReport`] (outcome and cost), `Driven` (the sweeper's step, crate-internal).

use crate::batch::{Outcome, RecordFailure, RecordResult};
use crate::ddb::error::StoreError;
use crate::rejection::Rejection;

/// How a transaction ended.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an outcome such as a conflict or a stale record is not an error: handle it"]
pub enum TxOutcome {
    /// Committed by this run: every request applied.
    Committed,
    /// Request `request`'s condition failed: nothing applied.
    RolledBack {
        /// Index of the request whose `ConditionExpression` failed.
        request: usize,
    },
    /// The `txId` was already committed: nothing done again.
    AlreadyCommitted,
    /// The `txId` was already rolled back on request `request`'s condition.
    AlreadyRolledBack {
        /// Index of the request whose condition failed.
        request: usize,
    },
}

impl TxOutcome {
    /// Whether the requests are applied.
    pub fn is_committed(&self) -> bool {
        matches!(self, TxOutcome::Committed | TxOutcome::AlreadyCommitted)
    }
}

impl Outcome for TxOutcome {
    fn label(&self) -> &'static str {
        match self {
            TxOutcome::Committed => "committed",
            TxOutcome::RolledBack { .. } => "rolled_back",
            TxOutcome::AlreadyCommitted | TxOutcome::AlreadyRolledBack { .. } => "duplicate",
        }
    }
}

/// A transaction's outcome and cost.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
#[must_use = "the report holds the outcome"]
pub struct TxReport {
    /// The outcome.
    pub outcome: TxOutcome,
    /// Write requests made (failed conditional writes included).
    pub write_calls: u64,
    /// Consumed write capacity units reported by DynamoDB.
    pub write_units: f64,
    /// Of `write_units`, those of the TX table's sweep index.
    pub index_write_units: f64,
    /// Write units as AWS bills them: `write_units` with every `TransactWriteItems` counted
    /// twice.
    pub billed_write_units: f64,
}

/// A transaction could not be decided now.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum TxError {
    /// DynamoDB failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The message can never succeed (dead-lettered).
    #[error("rejected: {0}")]
    Rejected(Rejection),
    /// The deadline is close; the transaction stays as it is and resumes on redelivery.
    #[error("deadline reached; the transaction resumes on the next delivery")]
    Deferred,
    /// Still aborted by contention after the allowed attempts.
    #[error("transaction {tx_id} aborted by contention {attempts} times; retry later")]
    Contention {
        /// The transaction.
        tx_id: String,
        /// Attempts made.
        attempts: u32,
    },
}

impl TxError {
    /// The batch result of a message that ended with this error: rejected (dead letter),
    /// deferred, or failed (delivered again; contention is [`StoreError::Contention`], a
    /// transient error).
    pub(super) fn into_record_result(self) -> RecordResult<TxOutcome> {
        match self {
            TxError::Rejected(r) => RecordResult::Rejected(r),
            TxError::Deferred => RecordResult::Deferred,
            TxError::Store(e) => RecordResult::Failed(e.into()),
            TxError::Contention { tx_id, attempts } => {
                RecordResult::Failed(RecordFailure::Store(StoreError::Contention {
                    what: format!("transaction {tx_id}"),
                    attempts: usize::try_from(attempts).unwrap_or(usize::MAX),
                }))
            }
        }
    }
}

/// What the sweeper's drive step did to one stale transaction (see [`super::sweep`]).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an outcome such as a conflict or a stale record is not an error: handle it"]
pub(crate) enum Driven {
    /// Already completed.
    Nothing,
    /// Rolled back (it was pending) or completed its rollback.
    RolledBack,
    /// Rolled back final because a request names a key the table refuses, and handed to a
    /// [`KeepRetired`](super::sweep::KeepRetired) (kept as a dead letter) before completion.
    Retired,
    /// Completed its commit.
    Finished,
    /// Pending, with a sign of life since it was found stale (a delivery resumed it): left
    /// alone.
    Alive,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddb::error::ErrorClass;

    #[test]
    fn contention_is_a_transient_failure() {
        let error = TxError::Contention {
            tx_id: "t-1".into(),
            attempts: 5,
        };
        match error.into_record_result() {
            RecordResult::Failed(RecordFailure::Store(e @ StoreError::Contention { .. })) => {
                assert_eq!(e.class(), ErrorClass::Transient);
                assert!(e.to_string().contains("t-1"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }
}
