//! A transaction's state as its TX record holds it: what an operator or a test looks at
//! ([`Sweeper::status`](crate::txn::sweep::Sweeper::status)).

use super::record::TxHeader;
pub use super::record::{RollbackReason, TxState};

/// A transaction's stored state.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxStatus {
    /// The transaction id.
    pub tx_id: String,
    /// The state ([`TxState::Completed`] once every item is finalized).
    pub state: TxState,
    /// The decision (commit or rollback), once there is one.
    pub decision: Option<TxState>,
    /// The attempt (a retried transaction runs a new attempt).
    pub attempt: u64,
    /// The record's version (moves with every state change).
    pub version: u64,
    /// Why it rolled back, when it did.
    pub reason: Option<RollbackReason>,
    /// The request whose condition failed or that DynamoDB rejected, by index.
    pub failed_request: Option<usize>,
    /// The last state change or heartbeat, epoch milliseconds.
    pub last_touched_ms: u64,
}

impl TxStatus {
    /// The status a header holds.
    pub(crate) fn of(h: TxHeader) -> Self {
        TxStatus {
            decision: h.decision(),
            tx_id: h.tx_id,
            state: h.state,
            attempt: h.attempt,
            version: h.version,
            reason: h.reason,
            failed_request: h.failed_request,
            last_touched_ms: h.last_touched_ms,
        }
    }
}
