//! `tx-sweeper`: on an EventBridge schedule, finishes or rolls back stale transactions and
//! deletes completed TX records after their retention (see `dynamodb_exactly_once::sweep`). The
//! schedule payload is not used (taken as JSON). Answers and logs a JSON summary of what it
//! did, and emits it as EMF metrics.

use dynamodb_exactly_once_lambda::telemetry::{invocation_span, traced};
use dynamodb_exactly_once_lambda::HandlerError;
use dynamodb_exactly_once::sweep::{SweepSummary, Sweeper};
use dynamodb_exactly_once::Deadline;
use lambda_runtime::LambdaEvent;
use serde_json::Value;

/// What the handler needs, built once per cold start.
pub type Deps = Sweeper;

/// Run one sweep, stopping cleanly before the invocation deadline.
pub async fn handler(event: LambdaEvent<Value>, deps: &Deps) -> Result<SweepSummary, HandlerError> {
    let span = invocation_span(&event.context, "tx-sweeper");
    let deadline = Deadline::from_epoch_ms(event.context.deadline, deps.config().deadline_margin);
    let summary = traced(span, deps.sweep(deadline)).await?;
    dynamodb_exactly_once_lambda::metrics::emit_sweep_metrics(&summary);
    Ok(summary)
}
