//! A ready writer on an event shape that already exists: the `counter-writer` protocol, its
//! settings from the environment as usual (`COUNTER_TABLE`, `COUNTER_DEAD_LETTER_TABLE`, …),
//! and a record mapping set in code instead of `COUNTER_RECORD_MAPPING`. Producers keep
//! sending `{"customer":"c1","eventTime":1700000000000,"amount":250}`; each SQS message counts
//! once (its message id is the idempotency key), per customer, into `amount` and `events`.
//!
//! The same function without code: deploy `counter-writer` with `COUNTER_RECORD_MAPPING` set
//! to [`MAPPING`] (see docs/mapping.md).

use dynamodb_exactly_once::counter::Counter;
use dynamodb_exactly_once_lambda::client::client_from_env;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::mapping::RecordMapping;
use dynamodb_exactly_once_lambda::settings::functions::COUNTER_WRITER;
use dynamodb_exactly_once_lambda::Writer;

/// The counter record each event becomes.
const MAPPING: &str = r#"{
    "key": {"PK": "=customer#{/customer}", "SK": "=totals"},
    "add": {"amount": "/amount", "events": 1},
    "idempotencyKey": "$id"
}"#;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::telemetry::init();
    let client = client_from_env().await?;
    let counter: Counter = COUNTER_WRITER.from_env(client.clone())?;
    let table = std::env::var("COUNTER_DEAD_LETTER_TABLE")?;
    let writer = Writer::builder(COUNTER_WRITER.name, counter)
        .dead_letters(DeadLetters::new(client, table, COUNTER_WRITER.name))
        .mapping(RecordMapping::new("MAPPING", MAPPING)?)
        .build()?;
    lambda_runtime::run(writer).await
}
