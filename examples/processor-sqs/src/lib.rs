//! Your own handler behind the batch processor, on an SQS queue: each order adds its amount to
//! its customer's totals **once per order id**, however often SQS delivers the message or the
//! producer sends it again (the library's counter: one conditional `UpdateItem`). An order whose
//! amount is not positive can never succeed: it is kept in the dead-letter table and
//! acknowledged. A throttled or failed write is reported in the partial batch response
//! (`batchItemFailures`) and delivered again; nothing else in the batch is.
//!
//! Settings (environment variables, set by `template.yaml`): `TOTALS_TABLE` (partition key
//! `PK`, string) and `DEAD_LETTER_TABLE` (partition key `Id`, string).

use std::sync::Arc;

use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::ItemKey;
use dynamodb_exactly_once_lambda::client::client_from_env;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError};
use serde::Deserialize;

/// The name dead letters, logs and metrics carry.
pub const FUNCTION: &str = "processor-sqs";

/// What the producers send, one order per message body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    /// The order's id: its amount counts once per id.
    pub order_id: String,
    /// Whose totals it adds to.
    pub customer: String,
    /// Must be positive.
    pub amount_cents: i64,
}

/// One order: rejected if its amount is not positive; else added to `customer#<customer>`'s
/// `orders` and `amountCents`, once per order id. A `StoreError` converts (`?`) into a retry,
/// or into a rejection when DynamoDB refused the request as invalid.
pub async fn handle(totals: &Counter, record: Record<Order>) -> Result<(), RecordError> {
    let order = &record.body;
    if order.amount_cents <= 0 {
        return Err(RecordError::reject(format!(
            "amountCents must be positive, got {}",
            order.amount_cents
        )));
    }
    let key = ItemKey::partition("PK", format!("customer#{}", order.customer))
        .map_err(|e| RecordError::reject(e.to_string()))?;
    let deltas = [("orders", 1), ("amountCents", order.amount_cents)];
    let outcome = totals
        .add(&totals.record(key, deltas, order.order_id.as_str())?)
        .await?;
    // `Duplicate`: this order was counted already (a redelivery); nothing was added.
    tracing::info!(order_id = %order.order_id, ?outcome, "order counted");
    Ok(())
}

/// The processor: [`handle`] per record on `totals_table`, rejected orders kept in
/// `dead_letter_table`.
pub fn processor(
    client: aws_sdk_dynamodb::Client,
    totals_table: &str,
    dead_letter_table: &str,
) -> Result<Processor<Order>, lambda_runtime::Error> {
    let totals = Arc::new(Counter::new(
        client.clone(),
        CounterConfig::builder(totals_table).build()?,
    ));
    let processor = Processor::builder(FUNCTION, move |record| {
        let totals = Arc::clone(&totals);
        async move { handle(&totals, record).await }
    })
    .dead_letters(DeadLetters::new(client, dead_letter_table, FUNCTION))
    .build()?;
    Ok(processor)
}

/// The function: logs, the client and the tables from the environment, then the runtime.
pub async fn run() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::telemetry::init();
    let totals_table = std::env::var("TOTALS_TABLE").map_err(|_| "TOTALS_TABLE is not set")?;
    let dead_letter_table =
        std::env::var("DEAD_LETTER_TABLE").map_err(|_| "DEAD_LETTER_TABLE is not set")?;
    let client = client_from_env().await?;
    lambda_runtime::run(processor(client, &totals_table, &dead_letter_table)?).await
}
