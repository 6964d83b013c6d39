//! Infrastructure errors, kept apart from protocol outcomes.
//!
//! A conditional write that loses (`Stale`, `Duplicate`, `Conflict`, ...) is an *outcome* and never
//! shows up here. A [`StoreError`] means DynamoDB could not be asked or refused the request itself.
//! [`StoreError::class`] tells a caller what to do with it:
//!
//! * [`ErrorClass::Transient`]: throttling, 5xx, timeouts, connection failures; retrying later
//!   may succeed, so a batch reports the record in `batchItemFailures`.
//! * [`ErrorClass::InvalidRequest`]: DynamoDB rejected the request as invalid (`ValidationException`:
//!   a key that does not match the table's schema, an item over the size limit). Retrying can
//!   never succeed, so the record is dead-lettered instead of blocking its shard.
//! * [`ErrorClass::Fatal`]: the function itself is misconfigured (missing table, no permission).
//!   Not the record's fault: the batch is reported as failed so that nothing is lost while an
//!   operator fixes the configuration.
//!
//! An error made from the SDK's ([`StoreError::from_sdk`]) keeps it as its
//! [`source`](std::error::Error::source); its `Display` stays one bounded line.
//!
//! Why one *record* of a batch was not decided (its write failed, a write it shares failed,
//! the pipeline held it back or cut it off) is a [`RecordFailure`](crate::batch::RecordFailure),
//! built on this type.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

/// What a caller should do with a failed DynamoDB call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorClass {
    /// Retry later; the same request may succeed.
    Transient,
    /// The request itself is invalid; retrying cannot help.
    InvalidRequest,
    /// Configuration or permission problem of the function.
    Fatal,
}

/// A DynamoDB call (or its marshalling) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The SDK returned an error.
    #[error("DynamoDB {operation} failed ({class:?}, {code}): {message}")]
    Sdk {
        /// The DynamoDB operation, e.g. `PutItem`.
        operation: &'static str,
        /// How the error should be handled.
        class: ErrorClass,
        /// The service's error code, or the SDK's failure kind.
        code: String,
        /// The service's message, or the SDK's description.
        message: String,
        /// The SDK's error: the operation's service error (e.g. `PutItemError`), or the cause
        /// of a timeout, dispatch, response or construction failure. `None` when this crate
        /// made the error (from a transaction's cancellation reasons, or for a request it does
        /// not send).
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// An item could not be converted between JSON and DynamoDB attribute values.
    #[error("item marshalling failed: {0}")]
    Marshal(#[from] serde_dynamo::Error),
    /// An item read from the table does not have the shape the protocol wrote.
    #[error("inconsistent item in table: {0}")]
    Inconsistent(String),
    /// A batch operation still had unprocessed items or keys after every retry.
    #[error("DynamoDB {operation}: still unprocessed after {attempts} attempts")]
    Unprocessed {
        /// `BatchGetItem` or `BatchWriteItem`.
        operation: &'static str,
        /// Attempts made.
        attempts: usize,
    },
    /// Other writers kept winning the races for the same item or transaction.
    #[error("{what}: still contended after {attempts} attempts; retry later")]
    Contention {
        /// What was contended.
        what: String,
        /// Attempts made.
        attempts: usize,
    },
    /// The caller asked to write an attribute the protocol owns (or a key attribute).
    #[error("`{0}` is a key or protocol attribute and cannot be written by the caller")]
    ReservedAttribute(String),
    /// The key does not fit the table's key schema (names, types, sizes): nothing was sent.
    #[error("invalid key: {0}")]
    InvalidKey(String),
}

/// Error codes DynamoDB documents as retryable.
const TRANSIENT_CODES: &[&str] = &[
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    "TransactionConflictException",
    "TransactionInProgressException",
    "LimitExceededException",
];

/// Longest message kept from an SDK error (service messages can quote request values; the
/// SDK's `Debug` output can hold whole responses): logs and dead letters stay bounded.
pub(crate) const MAX_MESSAGE_CHARS: usize = 300;

pub use crate::text::bounded;

/// An error and its sources, `: `-separated and bounded (never a `Debug` dump).
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    bounded(&text, MAX_MESSAGE_CHARS)
}

impl StoreError {
    /// Classify an SDK error of the given operation.
    ///
    /// The SDK's error is kept as the [`source`](std::error::Error::source) (the operation's
    /// service error, or the cause of a failure to get an answer; the raw response is
    /// dropped); `Display` holds its code and a bounded message.
    pub fn from_sdk<E, R>(operation: &'static str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug,
    {
        let (class, code, message) = match &err {
            SdkError::ServiceError(service) => {
                let e = service.err();
                let code = e.code().unwrap_or("Unknown").to_string();
                let message = bounded(e.message().unwrap_or_default(), MAX_MESSAGE_CHARS);
                let class = if TRANSIENT_CODES.contains(&code.as_str()) {
                    ErrorClass::Transient
                } else if code == "ValidationException" {
                    ErrorClass::InvalidRequest
                } else {
                    ErrorClass::Fatal
                };
                (class, code, message)
            }
            SdkError::TimeoutError(_) => (ErrorClass::Transient, "Timeout".into(), chain(&err)),
            SdkError::DispatchFailure(_) => {
                (ErrorClass::Transient, "DispatchFailure".into(), chain(&err))
            }
            SdkError::ResponseError(_) => {
                (ErrorClass::Transient, "ResponseError".into(), chain(&err))
            }
            SdkError::ConstructionFailure(_) => {
                (ErrorClass::Fatal, "ConstructionFailure".into(), chain(&err))
            }
            _ => (ErrorClass::Transient, "Unknown".into(), chain(&err)),
        };
        StoreError::Sdk {
            operation,
            class,
            code,
            message,
            source: err.into_source().ok(),
        }
    }

    /// How this error should be handled.
    pub fn class(&self) -> ErrorClass {
        match self {
            StoreError::Sdk { class, .. } => *class,
            StoreError::Marshal(_) => ErrorClass::InvalidRequest,
            StoreError::Inconsistent(_) => ErrorClass::Fatal,
            StoreError::Unprocessed { .. } | StoreError::Contention { .. } => ErrorClass::Transient,
            StoreError::ReservedAttribute(_) | StoreError::InvalidKey(_) => {
                ErrorClass::InvalidRequest
            }
        }
    }

    /// Whether retrying the same request later may succeed.
    pub fn is_retryable(&self) -> bool {
        self.class() == ErrorClass::Transient
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_chain_is_logged_bounded_never_as_a_dump() {
        let body = "response body ".repeat(10_000);
        let err = std::io::Error::other(body);
        let text = chain(&err);
        assert!(
            text.chars().count() <= MAX_MESSAGE_CHARS + 20,
            "{}",
            text.len()
        );
        assert!(text.starts_with("response body"));
    }

    #[test]
    fn an_sdk_error_is_kept_as_the_source_behind_the_bounded_line() {
        use aws_sdk_dynamodb::error::ErrorMetadata;
        use aws_sdk_dynamodb::operation::put_item::PutItemError;
        use std::error::Error as _;

        // The raw response is dropped: `()` stands for it.
        type PutError = SdkError<PutItemError, ()>;

        let message = "slow down ".repeat(100);
        let service = PutItemError::generic(
            ErrorMetadata::builder()
                .code("ThrottlingException")
                .message(message.clone())
                .build(),
        );
        let err = StoreError::from_sdk("PutItem", PutError::service_error(service, ()));

        assert_eq!(err.class(), ErrorClass::Transient);
        assert!(err.is_retryable());
        assert_eq!(
            err.to_string(),
            format!(
                "DynamoDB PutItem failed (Transient, ThrottlingException): {}",
                bounded(&message, MAX_MESSAGE_CHARS)
            )
        );
        let source = err.source().expect("the SDK error is the source");
        let service = source
            .downcast_ref::<PutItemError>()
            .expect("the operation's service error");
        assert_eq!(service.code(), Some("ThrottlingException"));

        let timeout = PutError::timeout_error("no answer");
        let err = StoreError::from_sdk("PutItem", timeout);
        assert!(err.to_string().contains("(Transient, Timeout)"), "{err}");
        assert_eq!(
            err.source().map(|e| e.to_string()),
            Some("no answer".into())
        );
    }

    #[test]
    fn bounded_cuts_on_a_character_boundary_and_says_so() {
        assert_eq!(bounded("short", 10), "short");
        let long = "é".repeat(400);
        let cut = bounded(&long, 5);
        assert!(cut.starts_with("ééééé…"));
        assert!(cut.ends_with("(800 bytes)"));
    }
}
