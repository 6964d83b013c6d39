//! `tx-coordinator`: SQS batches, each message one transaction
//! (`{"txId":"…","requests":[{"Update":{…}},…]}`), run with the TX-record protocol (see
//! `dynamodb_exactly_once::txn`). The logic lives in the library crates; this is the wiring.

use dynamodb_exactly_once::txn::Coordinator;
use dynamodb_exactly_once_lambda::settings::functions::TX_COORDINATOR;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::run_writer::<Coordinator>(TX_COORDINATOR).await
}
