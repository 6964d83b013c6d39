//! `ratchet-writer`: Kinesis or SQS batches of put/delete records, written with the timestamp
//! ratchet (see `dynamodb_exactly_once::ratchet`). The logic lives in the library crates; this
//! is the wiring.

use dynamodb_exactly_once::ratchet::Ratchet;
use dynamodb_exactly_once_lambda::settings::functions::RATCHET_WRITER;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::run_writer::<Ratchet>(RATCHET_WRITER).await
}
