//! The idempotency layer around an external call: each order from an SQS queue is charged
//! once per order id, whatever SQS redelivers and whether the producer sends an order twice;
//! a duplicate gets the first charge's receipt. The key is the body's `/orderId`, the claim
//! lasts until the invocation's deadline. The table is `IDEMPOTENCY_TABLE` (partition key
//! `Id`, TTL on `ExpiresAt`; see docs/idempotency.md).

use std::sync::Arc;

use dynamodb_exactly_once_lambda::client::client_from_env;
use dynamodb_exactly_once_lambda::idempotency::{
    DynamoDbPersistence, Idempotency, IdempotencyConfig, KeySource,
};
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError};
use serde::{Deserialize, Serialize};

const FUNCTION: &str = "payments";
/// The effect: part of every idempotency key, so another effect of the same order (a
/// confirmation email under its own operation) runs once too.
const OPERATION: &str = "charge";

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

/// Stands in for the provider's API. The idempotency key goes to the provider too (payment
/// APIs take one): a run cut off at its deadline may still have its request land, and the
/// provider is what recognises that request when a later run sends it again.
async fn charge(order: &Order, idempotency_key: &str) -> Result<Receipt, std::io::Error> {
    Ok(Receipt {
        charge_id: format!(
            "ch_{}_{}_{idempotency_key}",
            order.order_id, order.amount_cents
        ),
    })
}

/// The layer and where it takes each record's key.
struct Charges {
    idempotency: Idempotency<DynamoDbPersistence>,
    keys: KeySource<Order>,
}

/// One order, charged once per order id: one call. In progress elsewhere: delivered again
/// (then replayed); the order id reused with another amount: rejected, which under the
/// processor's default `ReportOnly` sink means reported on every delivery until the queue's
/// redrive policy moves the message to its dead-letter queue (configure one).
async fn handle(charges: Arc<Charges>, record: Record<Order>) -> Result<(), RecordError> {
    let key = format!("order-{}", record.body.order_id);
    let run = charges
        .idempotency
        .run_record(OPERATION, &charges.keys, &record, || async {
            charge(&record.body, &key)
                .await
                .map_err(RecordError::transient)
        })
        .await?;
    let replayed = run.is_replayed();
    match run.value() {
        Some(receipt) => {
            tracing::info!(order_id = %record.body.order_id, charge_id = %receipt.charge_id, replayed, "charged")
        }
        // Charged earlier; its receipt no longer reads as `Receipt` (changed by a deploy).
        None => tracing::info!(order_id = %record.body.order_id, "charged earlier"),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::telemetry::init();
    let table = std::env::var("IDEMPOTENCY_TABLE")?;
    let config = IdempotencyConfig::builder(FUNCTION).build()?;
    let charges = Arc::new(Charges {
        idempotency: Idempotency::new(
            DynamoDbPersistence::new(client_from_env().await?, table),
            config,
        ),
        keys: KeySource::pointer("/orderId")?,
    });
    let processor =
        Processor::builder(FUNCTION, move |record| handle(Arc::clone(&charges), record)).build()?;
    lambda_runtime::run(processor).await
}
