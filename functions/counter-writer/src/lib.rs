//! `counter-writer`: Kinesis or SQS batches of counter deltas, each added exactly once per
//! idempotency key (see `shared::counter`). All logic lives in the shared crate; this crate only
//! wires settings, the client and the runtime.

use lambda_runtime::LambdaEvent;
use serde_json::Value;
use shared::counter::Counter;
use shared::source::BatchResponse;
use shared::writer::{HandlerError, Writer};

/// What the handler needs, built once per cold start.
pub type Deps = Writer<Counter>;

/// Handle one Kinesis or SQS batch and answer with its partial batch response.
pub async fn handler(
    event: LambdaEvent<Value>,
    deps: &Deps,
) -> Result<BatchResponse, HandlerError> {
    deps.handle(event).await
}
