//! Your own handler behind the batch processor: typed `Order` records, a payment call that may
//! fail transiently (reported and delivered again), invalid amounts rejected (kept as dead
//! letters, or left to the queue's own dead-letter queue), bodies that are not orders kept too.
//!
//! # Run it
//!
//! `cargo lambda watch` serves the workspace's binaries, not examples: start only its Lambda
//! APIs and run the example against them yourself (from the repository root, port 9000 free):
//!
//! ```sh
//! cargo lambda watch --only-lambda-apis -A 127.0.0.1 -P 9000 &
//! AWS_LAMBDA_RUNTIME_API=http://127.0.0.1:9000/.rt AWS_LAMBDA_FUNCTION_NAME=_ \
//!   AWS_LAMBDA_FUNCTION_VERSION=1 AWS_LAMBDA_FUNCTION_MEMORY_SIZE=4096 \
//!   cargo run -p dynamodb-exactly-once-lambda --example processor &
//! cargo lambda invoke --data-file events/processor-orders-sqs.json -A 127.0.0.1 -P 9000
//! # {"batchItemFailures":[{"itemIdentifier":"order-01"},{"itemIdentifier":"order-02"},{"itemIdentifier":"order-03"}]}
//! kill %2 %1
//! ```
//!
//! Without `ORDERS_DEAD_LETTER_TABLE` the rejected orders (`order-01`: a negative amount,
//! `order-03`: no amount, so not an `Order`) are reported with the transient failure
//! (`order-02`, the "flaky" customer), for the queue's redrive policy to move them to its
//! dead-letter queue. With DynamoDB Local running (`docs/local.md`: its endpoint in
//! `AWS_ENDPOINT_URL_DYNAMODB`, and `cargo run -p ops -- create-tables --template
//! template.yaml` for `DeadLetterTable`), add `ORDERS_DEAD_LETTER_TABLE=DeadLetterTable` to
//! the example's environment: the rejected orders are then kept there and acknowledged, and
//! only `order-02` is reported.

use dynamodb_exactly_once_lambda::client::client_from_env;
use dynamodb_exactly_once_lambda::dead_letter::{DeadLetters, ReportOnly};
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError, StreamOrder};
use serde::Deserialize;

/// The name dead letters, logs and metrics carry.
const FUNCTION: &str = "orders-processor";

/// What the producers send.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    order_id: String,
    customer: String,
    amount_cents: i64,
}

/// The payment provider did not answer.
#[derive(Debug, thiserror::Error)]
#[error("payment provider unavailable for customer {0}")]
struct PaymentUnavailable(String);

/// Stands in for your payment API, called with an idempotency key so that a redelivered order
/// is not charged twice by a provider that honours it. Customer "flaky" always times out.
async fn charge(idempotency_key: &str, order: &Order) -> Result<(), PaymentUnavailable> {
    if order.customer == "flaky" {
        return Err(PaymentUnavailable(order.customer.clone()));
    }
    tracing::info!(order_id = %order.order_id, idempotency_key, amount_cents = order.amount_cents, "charged");
    Ok(())
}

/// One order: rejected if its amount cannot be charged, retried if the provider is down.
async fn handle(record: Record<Order>) -> Result<(), RecordError> {
    let order = &record.body;
    if order.amount_cents <= 0 {
        return Err(RecordError::reject(format!(
            "amountCents must be positive, got {}",
            order.amount_cents
        )));
    }
    charge(&record.delivery_id(), order)
        .await
        .map_err(RecordError::transient)
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::telemetry::init();
    // Streams in shard order, stopping at the first failure: the safe default for a handler
    // whose effects are not idempotent (SQS FIFO is always run by message group).
    let builder = Processor::builder(FUNCTION, handle).stream_order(StreamOrder::Shard);
    let builder = match std::env::var("ORDERS_DEAD_LETTER_TABLE") {
        Ok(table) => {
            builder.dead_letters(DeadLetters::new(client_from_env().await?, table, FUNCTION))
        }
        // No table: rejected records are reported for the source's own DLQ, and on a stream
        // the records held back behind one share its fate (chosen explicitly: a processor
        // with no sink chosen refuses ordered stream batches).
        Err(_) => builder.dead_letters(ReportOnly),
    };
    lambda_runtime::run(builder.build()?).await
}
