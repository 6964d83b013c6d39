//! `tx-coordinator`: SQS batches, each message one transaction
//! (`{"txId":"…","requests":[{"Update":{…}},…]}`), run with the TX-record protocol (see
//! `shared::txn`). All logic lives in the shared crate; this crate only wires settings, the
//! client and the runtime. Malformed messages are dead-lettered, transient failures and
//! deferred transactions are reported in `batchItemFailures`.

use lambda_runtime::LambdaEvent;
use serde_json::Value;
use shared::source::BatchResponse;
use shared::txn::Coordinator;
use shared::writer::{HandlerError, Writer};

/// What the handler needs, built once per cold start.
pub type Deps = Writer<Coordinator>;

/// Handle one SQS batch and answer with its partial batch response.
pub async fn handler(
    event: LambdaEvent<Value>,
    deps: &Deps,
) -> Result<BatchResponse, HandlerError> {
    deps.handle(event).await
}
