//! `document-writer`: Kinesis or SQS batches of list, set and replace records, applied in place
//! with guarded writes (see `dynamodb_exactly_once::document`). All logic lives in the library
//! crates; this crate only wires settings, the client and the runtime.

use dynamodb_exactly_once_lambda::{BatchResponse, HandlerError, Writer};
use dynamodb_exactly_once::document::Document;
use lambda_runtime::LambdaEvent;
use serde_json::Value;

/// What the handler needs, built once per cold start.
pub type Deps = Writer<Document>;

/// Handle one Kinesis or SQS batch and answer with its partial batch response.
pub async fn handler(
    event: LambdaEvent<Value>,
    deps: &Deps,
) -> Result<BatchResponse, HandlerError> {
    deps.handle(event).await
}
