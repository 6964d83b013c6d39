//! Rejected records to an SQS queue instead of a table (feature `sqs`): an order handler whose
//! invalid orders become letters on the queue named by `ORDERS_DEAD_LETTER_QUEUE_URL`, each
//! acknowledged only once SQS accepted it. A queue URL ending in `.fifo` gets FIFO letters
//! (the order's message group, a de-duplication id per record).
//!
//! ```sh
//! cargo build -p dynamodb-exactly-once-lambda --features sqs --example sqs_dead_letters
//! ```
//!
//! # Run it
//!
//! `cargo lambda watch` serves the workspace's binaries, not examples: start only its Lambda
//! APIs and run the example against them yourself (from the repository root, port 9000 free),
//! with `ORDERS_DEAD_LETTER_QUEUE_URL` in its environment:
//!
//! ```sh
//! cargo lambda watch --only-lambda-apis -A 127.0.0.1 -P 9000 &
//! AWS_LAMBDA_RUNTIME_API=http://127.0.0.1:9000/.rt AWS_LAMBDA_FUNCTION_NAME=_ \
//!   AWS_LAMBDA_FUNCTION_VERSION=1 AWS_LAMBDA_FUNCTION_MEMORY_SIZE=4096 \
//!   ORDERS_DEAD_LETTER_QUEUE_URL=<the queue's URL> \
//!   cargo run -p dynamodb-exactly-once-lambda --features sqs --example sqs_dead_letters &
//! cargo lambda invoke --data-file events/processor-orders-sqs.json -A 127.0.0.1 -P 9000
//! kill %2 %1
//! ```
//!
//! Locally, an SQS emulator such as `moto_server` (PyPI `moto[server]`) serves the queue:
//! start it on a free port, create the queue there, and give the example
//! `AWS_ENDPOINT_URL_SQS=http://127.0.0.1:<port>` with any credentials and region. The
//! invocation then reports only `order-02` (the transient failure); `order-01` and `order-03`
//! are letters on the queue. A function of your own starts from the example crate
//! `examples/processor-sqs` instead (a SAM template, `cargo lambda watch` as it is).
//!
//! # Reading the letters
//!
//! Each message body is an `SqsLetter` in JSON:
//! `serde_json::from_str::<dynamodb_exactly_once_lambda::dead_letter::SqsLetter>(body)`
//! gives the record's id (the same on every copy: de-duplicate by it on a standard queue), the
//! reason, the source position, and the body (`payload()`), cut when it did not fit in the
//! message (`body_truncated`, with the whole size in `body_bytes`).

use dynamodb_exactly_once_lambda::client::sqs_client_from_env;
use dynamodb_exactly_once_lambda::dead_letter::SqsDeadLetters;
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError};
use serde::Deserialize;

/// The name letters, logs and metrics carry.
const FUNCTION: &str = "orders-processor";

/// What the producers send.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    order_id: String,
    customer: String,
    amount_cents: i64,
}

/// One order: rejected if its amount cannot be charged, retried if the provider is down
/// (customer "flaky" always is).
async fn handle(record: Record<Order>) -> Result<(), RecordError> {
    let order = &record.body;
    if order.amount_cents <= 0 {
        return Err(RecordError::reject(format!(
            "amountCents must be positive, got {}",
            order.amount_cents
        )));
    }
    if order.customer == "flaky" {
        return Err(RecordError::retry("payment provider unavailable"));
    }
    tracing::info!(order_id = %order.order_id, amount_cents = order.amount_cents, "charged");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::telemetry::init();
    let letters = SqsDeadLetters::new(
        sqs_client_from_env().await?,
        std::env::var("ORDERS_DEAD_LETTER_QUEUE_URL")?,
        FUNCTION,
    )
    .for_deployment(std::env::var("AWS_LAMBDA_FUNCTION_NAME").ok());
    let processor = Processor::builder(FUNCTION, handle)
        .dead_letters(letters)
        .build()?;
    lambda_runtime::run(processor).await
}
