//! `tx-sweeper`: on an EventBridge schedule, finishes or rolls back stale transactions and
//! deletes completed TX records after their retention (see `shared::sweep`). The schedule
//! payload is not used (taken as JSON). Answers and logs a JSON summary of what it did.

use lambda_runtime::LambdaEvent;
use serde_json::Value;
use shared::source::Deadline;
use shared::sweep::{SweepError, SweepSummary, Sweeper};

/// What the handler needs, built once per cold start.
pub type Deps = Sweeper;

/// Run one sweep, stopping cleanly before the invocation deadline.
pub async fn handler(event: LambdaEvent<Value>, deps: &Deps) -> Result<SweepSummary, SweepError> {
    let deadline = Deadline::from_epoch_ms(event.context.deadline, deps.config().deadline_margin);
    deps.sweep(deadline).await
}
