//! `document-writer`: Kinesis or SQS batches of list, set and replace records, applied in place
//! with guarded writes (see `dynamodb_exactly_once::document`). The logic lives in the library
//! crates; this is the wiring.

use dynamodb_exactly_once::document::Document;
use dynamodb_exactly_once_lambda::settings::functions::DOCUMENT_WRITER;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::run_writer::<Document>(DOCUMENT_WRITER).await
}
