//! The idempotency layer as a `tower::Layer`: a record handler written as a `tower::Service`
//! (here `service_fn`; any service, with any other layers around it), wrapped in
//! `IdempotencyLayer` and run by the batch processor. Each message is sent to the mail
//! provider once per SQS message id; a redelivered message gets the stored response and the
//! inner service is not called. The table is `IDEMPOTENCY_TABLE` (partition key `Id`, TTL on
//! `ExpiresAt`; see docs/idempotency.md).

use std::sync::Arc;

use dynamodb_exactly_once_lambda::client::client_from_env;
use dynamodb_exactly_once_lambda::idempotency::{
    DynamoDbPersistence, Idempotency, IdempotencyConfig, IdempotencyLayer, KeySource,
};
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError};
use lambda_runtime::service_fn;
use serde::{Deserialize, Serialize};
use tower_layer::Layer;

const FUNCTION: &str = "mailer";

/// What producers send.
#[derive(Debug, Deserialize)]
struct Email {
    to: String,
    subject: String,
}

/// What the mail provider answers: the stored response duplicates get.
#[derive(Debug, Serialize, Deserialize)]
struct Sent {
    message_id: String,
}

/// Stands in for the provider's API.
async fn send(record: Record<Email>) -> Result<Sent, RecordError> {
    let email = &record.body;
    if email.to.is_empty() {
        return Err(RecordError::reject("no recipient"));
    }
    tracing::info!(subject = %email.subject, "sent");
    Ok(Sent {
        message_id: format!("<{}@mail>", record.id()),
    })
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::telemetry::init();
    let table = std::env::var("IDEMPOTENCY_TABLE")?;
    let idempotency = Arc::new(Idempotency::new(
        DynamoDbPersistence::new(client_from_env().await?, table),
        IdempotencyConfig::builder(FUNCTION).build()?,
    ));
    // The key: the SQS message id (the same on every redelivery of the message).
    let mailer =
        IdempotencyLayer::new(idempotency, "send-email", KeySource::Id).layer(service_fn(send));
    let processor = Processor::service_builder(FUNCTION, mailer).build()?;
    lambda_runtime::run(processor).await
}
