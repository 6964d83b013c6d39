//! Where a processor record's idempotency key comes from: [`KeySource`].
//!
//! | source | the key |
//! |---|---|
//! | [`KeySource::Id`] | the SQS message id, or the Kinesis / DynamoDB Streams sequence number (`<seq>:<sub>` for a KPL user record) |
//! | [`KeySource::SequenceNumber`] | the Kinesis / DynamoDB Streams sequence number (as `Id`), or the SQS FIFO `SequenceNumber` |
//! | [`KeySource::DeliveryId`] | the record's whole identity in its source (`<kind>\|<arn>\|<shard>\|<id>[:<sub>]`) |
//! | [`KeySource::pointer`]`("/orderId")` | the body's value at a JSON pointer (a string as it is, a number in its canonical spelling, an object or array as its canonical JSON) |
//! | [`KeySource::expression`]`("=order#{/orderId}")` | any form of a [record mapping](crate::mapping)'s leaf: a pointer, a `$field`, a `=text` with values put in |
//! | [`KeySource::from_fn`] | your function of the record |
//!
//! The source's own ids are the same on every redelivery of a record: they make a
//! *redelivery* run once. A body field makes a *producer's resend* (the same event sent twice,
//! two records) run once too. Pointers and expressions are checked when built
//! ([`ConfigError`]); a record they find nothing in is a [`KeySourceError`] (the processor rejects
//! it: `missing_idempotency_key`).

use std::fmt;
use std::sync::Arc;

use dynamodb_exactly_once::__private::canonical_json;
use dynamodb_exactly_once::idempotency::{KeySourceError, RecordKey};
use dynamodb_exactly_once::ConfigError;
use serde_json::Value;

use crate::mapping::{Field, Node};
use crate::processor::Record;

/// The setting [`KeySource::pointer`] and [`KeySource::expression`] errors name.
pub(crate) const KEY_SETTING: &str = "idempotency_key";

/// A key function: the key of a record, or why it has none.
pub type KeyFn<T> = dyn Fn(&Record<T>) -> Result<String, KeySourceError> + Send + Sync;

/// Where the idempotency key of a processor [`Record`] comes from (see the module
/// documentation).
#[non_exhaustive]
pub enum KeySource<T> {
    /// The record's id in its source: the SQS message id, or the Kinesis / DynamoDB Streams
    /// sequence number (`<seq>:<sub>` for a KPL user record, so each user record has its own).
    Id,
    /// The sequence number: Kinesis and DynamoDB Streams as [`KeySource::Id`], SQS FIFO its
    /// `SequenceNumber` (an SQS standard record has none: [`KeySourceError::Unreadable`]).
    SequenceNumber,
    /// [`Record::delivery_id`]: unique across queues, streams and shards.
    DeliveryId,
    /// A validated expression ([`KeySource::pointer`], [`KeySource::expression`]).
    Expression(KeyExpression),
    /// Your function ([`KeySource::from_fn`]).
    Function(Arc<KeyFn<T>>),
}

/// A key expression checked when built: a record mapping's leaf form (`/pointer`, `$field`,
/// `=text`).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyExpression {
    text: String,
    node: Node,
    reads_body: bool,
}

impl KeyExpression {
    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl<T> KeySource<T> {
    /// The body's value at a JSON pointer (RFC 6901: `~1` is `/`, `~0` is `~`), e.g.
    /// `/orderId` or `/order/id`; refused unless it is one.
    pub fn pointer(pointer: &str) -> Result<Self, ConfigError> {
        if !pointer.starts_with('/') {
            return Err(ConfigError::new(
                KEY_SETTING,
                format!("{pointer:?} is not a JSON pointer: it starts with `/` (`/orderId`)"),
            ));
        }
        Self::expression(pointer)
    }

    /// A record mapping's leaf form (`docs/mapping.md`): `/pointer`, `$id`,
    /// `$messageGroupId`, ..., or `=text` with `{/pointer}` and `{$field}` put in
    /// (`=order#{/orderId}`); refused unless it is one.
    pub fn expression(expression: &str) -> Result<Self, ConfigError> {
        let node = Node::compile(&Value::String(expression.to_string()), "")
            .map_err(|(_, why)| ConfigError::new(KEY_SETTING, why))?;
        let reads_body = node.reads_body();
        Ok(KeySource::Expression(KeyExpression {
            text: expression.to_string(),
            node,
            reads_body,
        }))
    }

    /// The key your function gives a record.
    pub fn from_fn(
        function: impl Fn(&Record<T>) -> Result<String, KeySourceError> + Send + Sync + 'static,
    ) -> Self {
        KeySource::Function(Arc::new(function))
    }

    /// The key of `record`.
    pub fn key_of(&self, record: &Record<T>) -> Result<String, KeySourceError> {
        let body = match self {
            KeySource::Expression(e) if e.reads_body => serde_json::from_slice(&record.raw).ok(),
            _ => None,
        };
        self.key_with(record, body.as_ref()).map(|key| key.text)
    }

    /// The key of `record` as the JSON value read (a string for the source's ids): what
    /// Powertools' format hashes.
    pub fn key_json_of(&self, record: &Record<T>) -> Result<Value, KeySourceError> {
        let body = match self {
            KeySource::Expression(e) if e.reads_body => serde_json::from_slice(&record.raw).ok(),
            _ => None,
        };
        self.key_with(record, body.as_ref()).map(|key| key.json)
    }

    /// The key of `record` whose raw body was parsed into `body` (`None`: not JSON).
    pub(super) fn key_with(
        &self,
        record: &Record<T>,
        body: Option<&Value>,
    ) -> Result<RecordKey, KeySourceError> {
        let field = match self {
            KeySource::Id => Field::Id,
            KeySource::SequenceNumber => Field::SequenceNumber,
            KeySource::DeliveryId => Field::DeliveryId,
            KeySource::Function(function) => {
                return function(record).map(|text| RecordKey {
                    json: Value::String(text.clone()),
                    text,
                })
            }
            KeySource::Expression(e) => return e.read(record, body),
        };
        let expression = format!("${}", field.name());
        match field.value(&Value::Null, &record.position) {
            Some(value) => key_text(expression, value),
            None => Err(KeySourceError::Unreadable {
                reason: format!("a {} record has no `{expression}`", record.kind().as_str()),
                expression,
            }),
        }
    }
}

impl KeyExpression {
    fn read<T>(
        &self,
        record: &Record<T>,
        body: Option<&Value>,
    ) -> Result<RecordKey, KeySourceError> {
        let value = match body {
            Some(body) => self.node.fill(body, &record.position),
            None if self.reads_body => {
                return Err(match serde_json::from_slice::<Value>(&record.raw) {
                    Err(source) => KeySourceError::NotJson {
                        expression: self.text.clone(),
                        source,
                    },
                    Ok(_) => KeySourceError::Unreadable {
                        expression: self.text.clone(),
                        reason: "the body was not given".into(),
                    },
                });
            }
            None => self.node.fill(&Value::Null, &record.position),
        };
        match value {
            Ok(value) => key_text(self.text.clone(), value),
            Err(reason) => Err(KeySourceError::Unreadable {
                expression: self.text.clone(),
                reason,
            }),
        }
    }
}

/// The key a value read stands for: a string as it is, `null` refused, anything else as its
/// canonical JSON (numbers in their one DynamoDB spelling, `1.0` as `1`; objects with sorted
/// keys, whatever serde_json's `preserve_order`).
fn key_text(expression: String, value: Value) -> Result<RecordKey, KeySourceError> {
    let text = match &value {
        Value::String(s) => s.clone(),
        Value::Null => {
            return Err(KeySourceError::Unreadable {
                expression,
                reason: "the value is null".into(),
            })
        }
        other if is_empty_value(other) => {
            return Err(KeySourceError::Unreadable {
                expression,
                reason: format!(
                    "the value {} is empty (as Powertools, which runs such a record without \
                     idempotency, reads it)",
                    canonical_json(other)
                ),
            })
        }
        other => canonical_json(other),
    };
    if text.is_empty() {
        return Err(KeySourceError::Empty { expression });
    }
    Ok(RecordKey { text, json: value })
}

/// An array or object that is empty or holds only `null`s: Powertools' "no key".
fn is_empty_value(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().all(Value::is_null),
        Value::Object(map) => map.values().all(Value::is_null),
        _ => false,
    }
}

impl<T> Clone for KeySource<T> {
    fn clone(&self) -> Self {
        match self {
            KeySource::Id => KeySource::Id,
            KeySource::SequenceNumber => KeySource::SequenceNumber,
            KeySource::DeliveryId => KeySource::DeliveryId,
            KeySource::Expression(e) => KeySource::Expression(e.clone()),
            KeySource::Function(f) => KeySource::Function(Arc::clone(f)),
        }
    }
}

impl<T> fmt::Debug for KeySource<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Id => f.write_str("Id"),
            KeySource::SequenceNumber => f.write_str("SequenceNumber"),
            KeySource::DeliveryId => f.write_str("DeliveryId"),
            KeySource::Expression(e) => f.debug_tuple("Expression").field(&e.text).finish(),
            KeySource::Function(_) => f.write_str("Function(..)"),
        }
    }
}

#[cfg(test)]
#[path = "key_tests.rs"]
mod tests;
