//! Plain writes refused by a transaction in flight are retried by the SDK.
//!
//! DynamoDB refuses a `PutItem`, `UpdateItem` or `DeleteItem` on an item that an in-flight
//! `TransactWriteItems` holds with `TransactionConflictException`, *without applying it*. The
//! SDK's standard retry does not retry that code (it is neither throttling nor transient to
//! it), so one collision would fail the write. Since the write was not applied, sending it
//! again is always safe, whatever its condition: [`retrying_conflicts`] gives a client whose
//! retry policy (the caller's own: attempts, backoff) also covers this code. Every protocol
//! handle (`try_new`) wraps its client with it: their items may take part in transactions
//! (this project's, or the application's own `TransactWriteItems`).

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::client::interceptors::context::InterceptorContext;
use aws_smithy_runtime_api::client::orchestrator::OrchestratorError;
use aws_smithy_runtime_api::client::retries::classifiers::{ClassifyRetry, RetryAction};

/// The same client, its retries also covering `TransactionConflictException` on plain writes.
pub(crate) fn retrying_conflicts(client: Client) -> Client {
    let config = client
        .config()
        .to_builder()
        .retry_classifier(TransactionConflictIsTransient)
        .build();
    Client::from_conf(config)
}

/// `TransactionConflictException` on `PutItem`, `UpdateItem`, `DeleteItem`: retry.
#[derive(Debug)]
struct TransactionConflictIsTransient;

impl ClassifyRetry for TransactionConflictIsTransient {
    fn classify_retry(&self, ctx: &InterceptorContext) -> RetryAction {
        let Some(Err(error)) = ctx.output_or_error() else {
            return RetryAction::NoActionIndicated;
        };
        let Some(error) = OrchestratorError::as_operation_error(error) else {
            return RetryAction::NoActionIndicated;
        };
        let conflict = error
            .downcast_ref::<UpdateItemError>()
            .is_some_and(UpdateItemError::is_transaction_conflict_exception)
            || error
                .downcast_ref::<PutItemError>()
                .is_some_and(PutItemError::is_transaction_conflict_exception)
            || error
                .downcast_ref::<DeleteItemError>()
                .is_some_and(DeleteItemError::is_transaction_conflict_exception);
        if conflict {
            RetryAction::transient_error()
        } else {
            RetryAction::NoActionIndicated
        }
    }

    fn name(&self) -> &'static str {
        "TransactionConflictIsTransient"
    }
}
