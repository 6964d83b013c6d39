//! `tx-sweeper`: on an EventBridge schedule, finishes or rolls back stale transactions (see
//! `dynamodb_exactly_once::txn::sweep`); answers, logs and emits as EMF metrics a summary of
//! what it did. The schedule payload is not used. With `TX_DEAD_LETTER_TABLE` set, a record
//! it retires on a key the table refuses is kept as a dead letter of the coordinator (see
//! `dynamodb_exactly_once_lambda::run::sweeper_from_env`).

use dynamodb_exactly_once_lambda::settings::functions::TX_SWEEPER;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::run_sweeper(TX_SWEEPER).await
}
