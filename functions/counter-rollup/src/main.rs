//! `counter-rollup`: the handler of the counter journal's DynamoDB Streams event source
//! mapping (with a tumbling window, for the shard id): adds each journaled key of a shard's
//! batch to its counter item, once (see `dynamodb_exactly_once::counter::journal`), answers
//! the partial batch response, and logs and emits as EMF metrics what it did. Reads
//! counter-writer's `COUNTER_*` settings (journal mode).

use dynamodb_exactly_once_lambda::settings::functions::COUNTER_ROLLUP;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::run_rollup(COUNTER_ROLLUP).await
}
