//! Why a call has no usable key ([`KeySourceError`]), and a key as the protocol reads it.

use std::error::Error;

use serde_json::Value;

use crate::ddb::item::canonical_json;

/// Why a record has no usable key. The function did not run.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum KeySourceError {
    /// Nothing usable where the key was to be read: no value at the pointer, a `null`, a
    /// field this source's records do not have.
    #[error("no idempotency key at `{expression}`: {reason}")]
    Unreadable {
        /// The key source (`/orderId`, `$sequenceNumber`, ...).
        expression: String,
        /// What was found instead.
        reason: String,
    },
    /// The key read is the empty string.
    #[error("the idempotency key at `{expression}` is empty")]
    Empty {
        /// The key source.
        expression: String,
    },
    /// The body is not JSON, so an expression cannot read it.
    #[error("the body is not JSON, so `{expression}` cannot read an idempotency key: {source}")]
    NotJson {
        /// The key source.
        expression: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The operation given is not usable (1 to 128 bytes, no `#`).
    #[error("the idempotency operation {operation:?} is not 1 to 128 bytes without `#`")]
    Operation {
        /// The operation given.
        operation: String,
    },
    /// A key function refused the record.
    #[error("the key function found no idempotency key: {0}")]
    Function(#[source] Box<dyn Error + Send + Sync>),
}

impl KeySourceError {
    /// A key function's refusal, for `reason` (an error or a text).
    pub fn function(reason: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        KeySourceError::Function(reason.into())
    }
}

/// A key read from a record: its text, and the JSON value it was read from (what
/// Powertools' format hashes).
#[derive(Debug, Clone, PartialEq)]
#[doc(hidden)]
pub struct RecordKey {
    /// The key's text.
    pub text: String,
    /// The JSON value it was read from.
    pub json: Value,
}

impl RecordKey {
    /// The key of a JSON value already checked (its text: a string as it is, anything else as its canonical JSON).
    pub fn of(json: Value) -> Self {
        let text = match &json {
            Value::String(s) => s.clone(),
            other => canonical_json(other),
        };
        RecordKey { text, json }
    }
}
