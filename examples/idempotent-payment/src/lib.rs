//! The idempotency layer around an effect outside DynamoDB: a payment. The function is
//! invoked directly with a payment request; each `paymentId` is charged **once**, and every
//! later invocation with it (a client's retry after a timeout, a double click) answers with the
//! first charge's receipt without charging again. The same `paymentId` with another amount or
//! customer is refused (`PayloadMismatch`); while a first charge is still running, a duplicate
//! is refused too (`InProgress`: retry it later, it then gets the receipt).
//!
//! One idempotency record per payment id in `IDEMPOTENCY_TABLE` (partition key `Id`, string;
//! TTL on `ExpiresAt`): a conditional `PutItem` claims the key, an `UpdateItem` stores the
//! receipt, a `DeleteItem` releases the claim when the charge fails.

use dynamodb_exactly_once_lambda::client::client_from_env;
use dynamodb_exactly_once_lambda::idempotency::{
    DynamoDbPersistence, Idempotency, IdempotencyConfig, IdempotencyError,
};
use lambda_runtime::{service_fn, Diagnostic, LambdaEvent};
use serde::{Deserialize, Serialize};

/// The namespace of the idempotency keys: stable across deploys (a function name that changes
/// when the stack replaces the function would forget every payment).
pub const NAMESPACE: &str = "idempotent-payment";
/// The effect: part of every key, so another effect of the same payment (a receipt email under
/// its own operation) runs once too.
const OPERATION: &str = "charge";

/// What the caller sends.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequest {
    /// The caller's id of this payment: charged once per id.
    pub payment_id: String,
    /// Who pays.
    pub customer: String,
    /// How much, in cents; must be positive.
    pub amount_cents: i64,
}

/// What the function answers: the first charge's receipt, also to every duplicate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// The payment this receipt is for.
    pub payment_id: String,
    /// The provider's id of the one charge made.
    pub charge_id: String,
    /// The amount charged, in cents.
    pub amount_cents: i64,
}

/// Why a payment request was not answered with a receipt.
#[derive(Debug, thiserror::Error)]
pub enum PaymentError {
    /// The request can never succeed.
    #[error("amountCents must be positive, got {0}")]
    InvalidAmount(i64),
    /// The idempotency layer refused or failed (in progress, another payload, the store, the
    /// provider).
    #[error(transparent)]
    Idempotency(#[from] IdempotencyError<std::io::Error>),
    /// Charged earlier, but the stored receipt no longer reads as a `Receipt`.
    #[error("payment {0} was charged earlier; its receipt cannot be read")]
    ReceiptUnreadable(String),
}

/// CloudWatch and the caller see a short error type instead of a Rust type path.
impl From<PaymentError> for Diagnostic {
    fn from(error: PaymentError) -> Self {
        let error_type = match &error {
            PaymentError::InvalidAmount(_) => "InvalidAmount",
            PaymentError::Idempotency(IdempotencyError::InProgress { .. }) => "InProgress",
            PaymentError::Idempotency(IdempotencyError::PayloadMismatch { .. }) => {
                "PayloadMismatch"
            }
            PaymentError::Idempotency(_) => "PaymentFailed",
            PaymentError::ReceiptUnreadable(_) => "ReceiptUnreadable",
        };
        Diagnostic {
            error_type: error_type.into(),
            error_message: error.to_string(),
        }
    }
}

/// Stands in for the payment provider's API: every call is a new charge with a new id. The
/// idempotency key goes to the provider too (payment APIs take one): a run cut off at its
/// deadline may still have its request land, and the provider recognises it when it comes
/// again.
async fn charge(
    request: &PaymentRequest,
    idempotency_key: &str,
) -> Result<Receipt, std::io::Error> {
    let charge_id = format!("ch_{:016x}", rand::random::<u64>());
    tracing::info!(payment_id = %request.payment_id, idempotency_key, %charge_id, amount_cents = request.amount_cents, "charged");
    Ok(Receipt {
        payment_id: request.payment_id.clone(),
        charge_id,
        amount_cents: request.amount_cents,
    })
}

/// The idempotency layer on `table`.
pub fn payments(
    client: aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Idempotency<DynamoDbPersistence>, lambda_runtime::Error> {
    let config = IdempotencyConfig::builder(NAMESPACE).build()?;
    Ok(Idempotency::new(
        DynamoDbPersistence::new(client, table),
        config,
    ))
}

/// One payment request: charged once per payment id (held until the invocation's deadline),
/// the first receipt for every duplicate.
pub async fn handle(
    payments: &Idempotency<DynamoDbPersistence>,
    event: LambdaEvent<PaymentRequest>,
) -> Result<Receipt, PaymentError> {
    let request = &event.payload;
    if request.amount_cents <= 0 {
        return Err(PaymentError::InvalidAmount(request.amount_cents));
    }
    let key = request.payment_id.as_str();
    let run = payments
        .call(OPERATION, key)
        .payload(request) // the same id with another amount or customer: PayloadMismatch
        .deadline_ms(event.context.deadline)
        .run(|| charge(request, key))
        .await?;
    let replayed = run.is_replayed();
    let receipt = run
        .value()
        .ok_or_else(|| PaymentError::ReceiptUnreadable(request.payment_id.clone()))?;
    tracing::info!(payment_id = %receipt.payment_id, charge_id = %receipt.charge_id, replayed, "payment answered");
    Ok(receipt)
}

/// The function: logs, the client and the table from the environment, then the runtime.
pub async fn run() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::telemetry::init();
    let table = std::env::var("IDEMPOTENCY_TABLE").map_err(|_| "IDEMPOTENCY_TABLE is not set")?;
    let payments = payments(client_from_env().await?, &table)?;
    let payments = &payments;
    lambda_runtime::run(service_fn(move |event| handle(payments, event))).await
}
