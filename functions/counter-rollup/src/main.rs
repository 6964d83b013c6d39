//! `counter-rollup`: on an EventBridge schedule, reads the counter journal's DynamoDB stream
//! from its checkpoints and adds each newly journaled key to its counter item, once (see
//! `dynamodb_exactly_once::counter::journal`); answers, logs and emits as EMF metrics a report
//! of what it did. Reads counter-writer's `COUNTER_*` settings (journal mode). The schedule
//! payload is not used.

use dynamodb_exactly_once_lambda::settings::functions::COUNTER_ROLLUP;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::run_rollup(COUNTER_ROLLUP).await
}
