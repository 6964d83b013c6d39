//! The idempotency layer around an external call: each order from an SQS queue is charged
//! once, whatever SQS redelivers; a duplicate gets the first charge's receipt. The table is
//! `IDEMPOTENCY_TABLE` (partition key `Id`, TTL on `ExpiresAt`; see docs/idempotency.md).

use std::sync::Arc;

use dynamodb_exactly_once_lambda::client::client_from_env;
use dynamodb_exactly_once_lambda::idempotency::{
    DynamoDbPersistence, Idempotency, IdempotencyConfig, IdempotencyError,
};
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError};
use serde::{Deserialize, Serialize};

const FUNCTION: &str = "payments";

/// What producers send.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    order_id: String,
    amount_cents: i64,
}

/// What the payment provider answers, kept for duplicates.
#[derive(Debug, Serialize, Deserialize)]
struct Receipt {
    charge_id: String,
}

/// Stands in for the provider's API.
async fn charge(order: &Order) -> Result<Receipt, std::io::Error> {
    Ok(Receipt {
        charge_id: format!("ch_{}_{}", order.order_id, order.amount_cents),
    })
}

type Layer = Arc<Idempotency<DynamoDbPersistence>>;

/// One order, charged once per order id.
async fn handle(idempotency: Layer, record: Record<Order>) -> Result<(), RecordError> {
    let order = &record.body;
    let run = idempotency
        .run(&order.order_id, order, None, || charge(order))
        .await;
    match run {
        Ok(run) => {
            let replayed = run.is_replayed();
            let receipt = run.into_value();
            tracing::info!(order_id = %order.order_id, charge_id = %receipt.charge_id, replayed, "charged");
            Ok(())
        }
        Err(IdempotencyError::PayloadMismatch { key }) => Err(RecordError::reject(format!(
            "order {key} was sent again with another amount"
        ))),
        Err(e) => Err(RecordError::transient(e.to_string())),
    }
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::telemetry::init();
    let table = std::env::var("IDEMPOTENCY_TABLE")?;
    let config = IdempotencyConfig::builder(FUNCTION).build()?;
    let layer: Layer = Arc::new(Idempotency::new(
        DynamoDbPersistence::new(client_from_env().await?, table),
        config,
    ));
    let processor =
        Processor::builder(FUNCTION, move |record| handle(Arc::clone(&layer), record)).build()?;
    lambda_runtime::run(processor).await
}
