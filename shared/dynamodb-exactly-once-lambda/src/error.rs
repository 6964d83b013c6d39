//! Errors of a whole invocation, and what CloudWatch shows for them.
//!
//! Per-record failures never end up here: they go into `batchItemFailures` (or the
//! dead-letter table). An `Err` from a handler means Lambda retries the entire batch (or the
//! schedule), so it is reserved for payloads that are not a batch at all and for a sweep that
//! could not read its index. `From<HandlerError> for Diagnostic` gives CloudWatch a readable
//! `errorType` (`InvalidEvent`, `Retryable`, `NonRetryable`) instead of a Rust type path.

use dynamodb_exactly_once::txn::sweep::SweepError;
use dynamodb_exactly_once::{ConfigError, StoreError};
use lambda_runtime::Diagnostic;

use crate::source::EventError;

/// The invocation failed as a whole.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The payload is not a Kinesis or SQS batch.
    #[error(transparent)]
    Event(#[from] EventError),
    /// The sweep could not run (its index could not be read).
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// The function's configuration cannot handle this batch safely (nothing ran; every
    /// record is delivered again once the configuration is fixed).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The invocation is to be made again as it was (the journal roll-up could not apply a
    /// tumbling window's keys: the mapping invokes again with the same state, and the
    /// watermarks turn away what was applied).
    #[error("{0}")]
    Retry(String),
}

impl HandlerError {
    /// The `errorType` CloudWatch shows.
    pub fn error_type(&self) -> &'static str {
        match self {
            HandlerError::Event(_) => "InvalidEvent",
            HandlerError::Sweep(SweepError::Store(e)) => store_error_type(e),
            HandlerError::Sweep(_) => "NonRetryable",
            HandlerError::Config(_) => "Configuration",
            HandlerError::Retry(_) => "Retryable",
        }
    }
}

fn store_error_type(err: &StoreError) -> &'static str {
    if err.is_retryable() {
        "Retryable"
    } else {
        "NonRetryable"
    }
}

impl From<HandlerError> for Diagnostic {
    fn from(err: HandlerError) -> Self {
        Diagnostic {
            error_type: err.error_type().into(),
            error_message: err.to_string(),
        }
    }
}
