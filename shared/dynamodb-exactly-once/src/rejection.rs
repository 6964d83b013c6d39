//! Why a record can never succeed: a stable [`RejectionCode`] and a message for humans.
//!
//! A rejected record is not retried: the Lambda edge keeps it as a dead letter (payload,
//! code, message, source position) and acknowledges it, so it never blocks a shard. Codes are
//! stable snake_case strings in dead letters, logs and metrics.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The stable reason code of a rejection.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectionCode {
    /// The body is not JSON.
    BadJson,
    /// The body is JSON but not an object.
    NotAnObject,
    /// The item key is missing or unusable.
    InvalidKey,
    /// Ratchet: `ts` is missing.
    MissingTimestamp,
    /// Ratchet: `ts` is not an integer.
    InvalidTimestamp,
    /// Ratchet: `op` is not `put` or `delete`.
    UnknownOp,
    /// Ratchet: the put has no usable `item`.
    InvalidItem,
    /// Ratchet: an item attribute disagrees with the key.
    KeyMismatch,
    /// The payload names an attribute the protocol owns.
    ReservedAttribute,
    /// The stored item would exceed DynamoDB's 400 KB limit.
    ItemTooLarge,
    /// DynamoDB refused the write as invalid (`ValidationException`).
    RejectedByDynamodb,
    /// Counter: `idempotencyKey` is missing.
    MissingIdempotencyKey,
    /// Counter: `idempotencyKey` is not a usable string.
    InvalidIdempotencyKey,
    /// Counter: `add` is missing, empty or too large.
    InvalidAdd,
    /// Counter: a delta is not an integer.
    InvalidDelta,
    /// Counter: a counter name is a key attribute.
    KeyAttribute,
    /// Counter: the item has no room for another idempotency key.
    ItemFull,
    /// Transaction: `txId` is missing.
    MissingTxId,
    /// Transaction: `txId` is not a usable string.
    InvalidTxId,
    /// Transaction: `requests` is missing or empty.
    NoRequests,
    /// Transaction: more requests than one TX record can hold.
    TooManyRequests,
    /// Transaction: a request is malformed.
    InvalidRequest,
    /// Transaction: a request names a table outside the allow-list.
    TableNotAllowed,
    /// Transaction: a request uses the protocol's placeholder prefix.
    ReservedPlaceholder,
    /// Transaction: two requests name the same item.
    DuplicateItem,
    /// Transaction: the `txId` is already recorded with other requests.
    TxIdReused,
    /// The record is older than its protocol applies safely (see `Protocol::max_record_age`).
    TooOld,
    /// Document: `path` is missing or not a valid attribute path.
    InvalidPath,
    /// Document: `path` names a key attribute.
    KeyPath,
    /// Document: `path` names an attribute the protocol owns (its version, its op slots).
    ReservedPath,
    /// Document: `values` / `value` is missing or unusable (a set of mixed types, ...).
    InvalidValues,
    /// Document: `document` of a replace is missing or not an object.
    InvalidDocument,
    /// Document: `expectedVersion` is not a non-negative integer.
    InvalidVersion,
    /// Versioning: a write id is empty or too long.
    InvalidWriteId,
    /// Transaction: a request's `ConditionExpression` is not one complete condition, or its
    /// `UpdateExpression` has unbalanced parentheses (it could change how the protocol's
    /// guard is combined with it).
    MalformedExpression,
    /// An item change (DynamoDB stream record) arrived at a function with no mapping for it.
    NoChangeMapping,
    /// An item change is unusable under the mapping (an image the stream does not carry, an
    /// unknown event name, a sequence number that is not digits, a group value missing).
    InvalidChange,
    /// A Kinesis record in the KPL aggregation format that cannot be expanded (checksum
    /// mismatch, broken protobuf, a key index out of its table, no sub-records): kept whole.
    BadAggregate,
    /// A number DynamoDB refuses (more than 38 significant digits, outside its range) or
    /// that the writer cannot carry exactly (it is never rounded into another value or key).
    InvalidNumber,
    /// A record handler's body does not deserialize into the handler's record type (the Lambda
    /// edge's batch processor).
    InvalidBody,
    /// A record handler rejected the record: it can never succeed (the Lambda edge's batch
    /// processor).
    RejectedByHandler,
    /// The stored item was written under other protocol attribute names or another prefix
    /// (a setting renamed after data exists): refused rather than overwritten or misread.
    LayoutMismatch,
    /// The record's body does not fit the function's record mapping (not JSON, or a field
    /// the mapping reads is absent or of the wrong type): the Lambda edge's field mappings.
    MappingFailed,
    /// A Kafka record that cannot be read (its value, key or headers not what Lambda's Kafka
    /// events carry, or more key and header bytes than a position keeps): kept whole, as
    /// delivered (the Lambda edge's Kafka source).
    BadKafkaRecord,
    /// A Kafka value that does not decode under the function's value format (schema-registry
    /// framing, Avro or Protobuf bytes that do not fit the schema given in the settings).
    UndecodableValue,
    /// A code this version does not know (read from an older or newer dead letter). Stays
    /// last: serde's fallback variant must be (new codes go just before it).
    #[serde(other)]
    Other,
}

impl RejectionCode {
    /// The stable snake_case string.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectionCode::BadJson => "bad_json",
            RejectionCode::NotAnObject => "not_an_object",
            RejectionCode::InvalidKey => "invalid_key",
            RejectionCode::MissingTimestamp => "missing_timestamp",
            RejectionCode::InvalidTimestamp => "invalid_timestamp",
            RejectionCode::UnknownOp => "unknown_op",
            RejectionCode::InvalidItem => "invalid_item",
            RejectionCode::KeyMismatch => "key_mismatch",
            RejectionCode::ReservedAttribute => "reserved_attribute",
            RejectionCode::ItemTooLarge => "item_too_large",
            RejectionCode::RejectedByDynamodb => "rejected_by_dynamodb",
            RejectionCode::MissingIdempotencyKey => "missing_idempotency_key",
            RejectionCode::InvalidIdempotencyKey => "invalid_idempotency_key",
            RejectionCode::InvalidAdd => "invalid_add",
            RejectionCode::InvalidDelta => "invalid_delta",
            RejectionCode::KeyAttribute => "key_attribute",
            RejectionCode::ItemFull => "item_full",
            RejectionCode::MissingTxId => "missing_tx_id",
            RejectionCode::InvalidTxId => "invalid_tx_id",
            RejectionCode::NoRequests => "no_requests",
            RejectionCode::TooManyRequests => "too_many_requests",
            RejectionCode::InvalidRequest => "invalid_request",
            RejectionCode::TableNotAllowed => "table_not_allowed",
            RejectionCode::ReservedPlaceholder => "reserved_placeholder",
            RejectionCode::DuplicateItem => "duplicate_item",
            RejectionCode::TxIdReused => "tx_id_reused",
            RejectionCode::TooOld => "too_old",
            RejectionCode::InvalidPath => "invalid_path",
            RejectionCode::KeyPath => "key_path",
            RejectionCode::ReservedPath => "reserved_path",
            RejectionCode::InvalidValues => "invalid_values",
            RejectionCode::InvalidDocument => "invalid_document",
            RejectionCode::InvalidVersion => "invalid_version",
            RejectionCode::InvalidWriteId => "invalid_write_id",
            RejectionCode::Other => "other",
            RejectionCode::MalformedExpression => "malformed_expression",
            RejectionCode::NoChangeMapping => "no_change_mapping",
            RejectionCode::InvalidChange => "invalid_change",
            RejectionCode::BadAggregate => "bad_aggregate",
            RejectionCode::InvalidNumber => "invalid_number",
            RejectionCode::InvalidBody => "invalid_body",
            RejectionCode::RejectedByHandler => "rejected_by_handler",
            RejectionCode::LayoutMismatch => "layout_mismatch",
            RejectionCode::MappingFailed => "mapping_failed",
            RejectionCode::BadKafkaRecord => "bad_kafka_record",
            RejectionCode::UndecodableValue => "undecodable_value",
        }
    }
}

impl fmt::Display for RejectionCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for RejectionCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for RejectionCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

/// Longest rejection message kept (characters). Messages describe what is wrong without
/// repeating the payload: an offending value is quoted by [`quote`] or described by
/// [`describe`]; this bound is the backstop that keeps every dead letter and log line small.
pub const MAX_MESSAGE_CHARS: usize = 300;

pub use crate::text::quote;

/// A JSON value from a payload described by its type (and a short quote of scalars), never
/// repeated whole.
pub fn describe(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => quote(&n.to_string()),
        Value::String(s) => format!("the string {}", quote(s)),
        Value::Array(a) => format!("an array of {} element(s)", a.len()),
        Value::Object(o) => format!("an object of {} field(s)", o.len()),
    }
}

/// Decode a record body into its raw struct (every field optional, so that each missing or
/// malformed field gets its own code later): `bad_json` when the body is not JSON,
/// `not_an_object` when it is not an object, `invalid_number` when one of its numbers is
/// refused by DynamoDB (see [`Number`](crate::Number)).
pub(crate) fn decode_object<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Rejection> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        Rejection::new(
            RejectionCode::BadJson,
            format!("the body ({} bytes) is not JSON: {e}", body.len()),
        )
    })?;
    if !value.is_object() {
        return Err(Rejection::new(
            RejectionCode::NotAnObject,
            "the body must be a JSON object",
        ));
    }
    crate::ddb::number::check_json_numbers(body)
        .map_err(|e| Rejection::new(RejectionCode::InvalidNumber, e.to_string()))?;
    serde_json::from_value(value).map_err(|e| {
        Rejection::new(
            RejectionCode::NotAnObject,
            format!("unreadable object: {e}"),
        )
    })
}

/// A structured per-record error: a stable code and a message for humans.
///
/// ```
/// use dynamodb_exactly_once::{Rejection, RejectionCode};
/// let r = Rejection::new(RejectionCode::UnknownOp, "`op` must be \"put\" or \"delete\"");
/// assert_eq!(r.code, "unknown_op");
/// assert_eq!(r.to_string(), "unknown_op: `op` must be \"put\" or \"delete\"");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Rejection {
    /// Stable code.
    pub code: RejectionCode,
    /// What is wrong, for a human.
    pub message: String,
}

impl Rejection {
    /// A rejection with the given code and message (cut to [`MAX_MESSAGE_CHARS`]).
    pub fn new(code: RejectionCode, message: impl Into<String>) -> Self {
        let message = message.into();
        Rejection {
            code,
            message: crate::text::bounded(&message, MAX_MESSAGE_CHARS),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Rejection {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_as_their_stable_strings() {
        for code in [
            RejectionCode::BadJson,
            RejectionCode::RejectedByDynamodb,
            RejectionCode::TxIdReused,
        ] {
            let json = serde_json::to_value(code).expect("serializes");
            assert_eq!(json, serde_json::json!(code.as_str()));
        }
        let unknown: RejectionCode = serde_json::from_str("\"from_the_future\"").expect("other");
        assert_eq!(unknown, RejectionCode::Other);
    }
}
