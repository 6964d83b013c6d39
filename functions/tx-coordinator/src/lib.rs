//! `tx-coordinator`: SQS batches, each message one transaction
//! (`{"txId":"…","requests":[{"Update":{…}},…]}`), run with the TX-record protocol (see
//! `dynamodb_exactly_once::txn`). All logic lives in the library crates; this crate only wires
//! settings, the client and the runtime. Malformed messages are dead-lettered, transient
//! failures and deferred transactions are reported in `batchItemFailures`.

use dynamodb_exactly_once_lambda::{BatchResponse, HandlerError, Writer};
use dynamodb_exactly_once::txn::Coordinator;
use lambda_runtime::LambdaEvent;
use serde_json::Value;

/// What the handler needs, built once per cold start.
pub type Deps = Writer<Coordinator>;

/// Handle one SQS batch and answer with its partial batch response.
pub async fn handler(
    event: LambdaEvent<Value>,
    deps: &Deps,
) -> Result<BatchResponse, HandlerError> {
    deps.handle(event).await
}
