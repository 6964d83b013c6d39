//! `counter-writer`: Kinesis or SQS batches of counter deltas, each added exactly once per
//! idempotency key (see `dynamodb_exactly_once::counter`). The logic lives in the library
//! crates; this is the wiring.

use dynamodb_exactly_once::counter::Counter;
use dynamodb_exactly_once_lambda::settings::functions::COUNTER_WRITER;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::run_writer::<Counter>(COUNTER_WRITER).await
}
