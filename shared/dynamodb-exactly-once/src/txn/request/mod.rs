//! Transaction messages and their requests, shaped like `TransactWriteItems` entries with plain
//! JSON values:
//!
//! ```json
//! {"txId":"t-1","requests":[
//!   {"Update":{"TableName":"AccountsTable","Key":{"PK":"alice"},
//!              "UpdateExpression":"SET #b = #b - :a","ConditionExpression":"#b >= :a",
//!              "ExpressionAttributeNames":{"#b":"balance"},"ExpressionAttributeValues":{":a":30}}},
//!   {"Update":{"TableName":"AccountsTable","Key":{"PK":"bob"},
//!              "UpdateExpression":"SET #b = #b + :a",
//!              "ExpressionAttributeNames":{"#b":"balance"},"ExpressionAttributeValues":{":a":30}}}]}
//! ```
//!
//! Validation (a failure is a [`Rejection`](crate::Rejection), dead-lettered): the table is
//! in the allow-list, no reserved protocol attribute (prefix [`RESERVED_PREFIX`]) is named
//! anywhere, no placeholder uses the protocol's prefix ([`PLACEHOLDER_PREFIX`]),
//! `ConditionCheck` has a condition, `Update` has an update expression, `Put` has an item.
//! Each expression must be well-formed on its own (`malformed_expression`): a
//! `ConditionExpression` is parsed as one complete condition, so that no request can change
//! how the lock guard is `AND`ed with it.
//! [`parse_message`] reads the body through `serde` raw structs and validates them in a fixed
//! order; the rejection code is the first failed check's.
//!
//! # Shape of a request
//!
//! A [`TxRequest`] is a struct holding what every `TransactWriteItems` entry has (table,
//! `ConditionExpression`, the names and values maps) and an [`Operation`] enum holding what
//! only one kind has (`Put`: the item; `Update`: key and update expression; `Delete` and
//! `ConditionCheck`: the key). The shared part is handled identically for every kind (the
//! condition is `AND`ed with the lock guard, the maps are merged with the protocol's), so it
//! is written once rather than four times; what differs by kind is matched on the enum, and a
//! request without its kind's parts cannot be built.

mod build;
mod expr;
mod parse;

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Map, Value};

use crate::ddb::item::canonical_json;

pub use build::TxMessageBuilder;
pub(crate) use parse::parse_message;
pub(crate) use parse::recorded_requests;

/// Expression placeholders of the protocol start with `#` or `:` followed by this; requests
/// keep their own names/values maps and may not use it.
pub(crate) const PLACEHOLDER_PREFIX: &str = "txp";
/// Longest accepted transaction id.
pub(crate) const MAX_TX_ID_LEN: usize = 200;

/// What a request does: the parts of a `TransactWriteItems` entry that depend on its kind.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// Replace (or create) the whole item.
    Put {
        /// `Item`: the new item (its key attributes name the item).
        item: Map<String, Value>,
    },
    /// Apply an update expression.
    Update {
        /// `Key`.
        key: Map<String, Value>,
        /// `UpdateExpression`.
        update_expression: String,
    },
    /// Delete the item.
    Delete {
        /// `Key`.
        key: Map<String, Value>,
    },
    /// Only check a condition (and hold the item still until the decision); its request
    /// always has a `ConditionExpression`.
    ConditionCheck {
        /// `Key`.
        key: Map<String, Value>,
    },
}

impl Operation {
    /// Whether its lock leaves the item's values as they are until the decision (a
    /// `ConditionCheck`; a `Delete`, which deletes only when finalized): such a lock saves no
    /// image.
    pub fn keeps_values(&self) -> bool {
        matches!(
            self,
            Operation::Delete { .. } | Operation::ConditionCheck { .. }
        )
    }

    /// The JSON tag: `Put`, `Update`, `Delete` or `ConditionCheck`.
    pub fn tag(&self) -> &'static str {
        match self {
            Operation::Put { .. } => "Put",
            Operation::Update { .. } => "Update",
            Operation::Delete { .. } => "Delete",
            Operation::ConditionCheck { .. } => "ConditionCheck",
        }
    }

    /// The attributes the request names the item by: the `Item` of a `Put`, else the `Key`.
    pub fn attributes(&self) -> &Map<String, Value> {
        match self {
            Operation::Put { item } => item,
            Operation::Update { key, .. }
            | Operation::Delete { key }
            | Operation::ConditionCheck { key } => key,
        }
    }

    /// The `UpdateExpression` of an `Update`.
    pub fn update_expression(&self) -> Option<&str> {
        match self {
            Operation::Update {
                update_expression, ..
            } => Some(update_expression),
            _ => None,
        }
    }
}

/// One validated request (the [`TxMessage::requests`] of a parsed message).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct TxRequest {
    /// The table (in the allow-list).
    pub table: String,
    /// What it does.
    pub op: Operation,
    /// `ConditionExpression`, honoured: if it fails, the transaction rolls back.
    pub condition_expression: Option<String>,
    /// `ExpressionAttributeNames`.
    pub names: BTreeMap<String, String>,
    /// `ExpressionAttributeValues` (plain JSON).
    pub values: Map<String, Value>,
}

impl TxRequest {
    /// The values as attribute values.
    pub fn attribute_values(
        &self,
    ) -> Result<BTreeMap<String, AttributeValue>, serde_dynamo::Error> {
        self.values
            .iter()
            .map(|(k, v)| {
                let value = crate::ddb::item::to_attribute_value(v)
                    .map_err(<serde_dynamo::Error as serde::ser::Error>::custom)?;
                Ok((k.clone(), value))
            })
            .collect()
    }

    /// The item key given the table's key attribute names (from `Key`, or from the Put item).
    pub fn key_json(&self, key_names: &[String]) -> Result<Map<String, Value>, String> {
        let source = self.op.attributes();
        let mut key = Map::new();
        for name in key_names {
            let v = source
                .get(name)
                .ok_or_else(|| format!("key attribute `{name}` is missing"))?;
            key.insert(name.clone(), v.clone());
        }
        let is_put = matches!(self.op, Operation::Put { .. });
        if !is_put && source.len() != key.len() {
            return Err(format!(
                "`Key` must hold exactly the key attributes {key_names:?}"
            ));
        }
        Ok(key)
    }
}

/// A parsed transaction message.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct TxMessage {
    /// The idempotency id.
    pub tx_id: String,
    /// The requests, in message order (indices name them in outcomes).
    pub requests: Vec<TxRequest>,
    /// The requests as received (stored in the TX record).
    pub raw_requests: Vec<Value>,
    /// When the producer issued the transaction (`issuedAt`, epoch ms), if the message says:
    /// part of the transaction (its hash), and what its age is measured from.
    pub issued_at_ms: Option<u64>,
}

impl TxMessage {
    /// A message built in Rust, request by request (see [`TxMessageBuilder`]): the same
    /// message, validated by the same checks, as the JSON format parsed.
    pub fn builder(tx_id: impl Into<String>) -> TxMessageBuilder {
        TxMessageBuilder::new(tx_id)
    }

    /// The requests as the canonical JSON stored in the TX record.
    pub fn requests_json(&self) -> String {
        canonical_json(&Value::Array(self.raw_requests.clone()))
    }

    /// The hash its TX record keeps (`RequestsHash`) of `requests_json` (this message's).
    pub fn transaction_hash(&self, requests_json: &str) -> String {
        super::record::transaction_hash(requests_json, self.issued_at_ms)
    }
}

/// The identifier-like tokens of an expression (names, placeholders, keywords, functions).
pub(crate) fn expression_tokens(expr: &str) -> impl Iterator<Item = &str> {
    expr.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '#' || c == ':'))
        .filter(|t| !t.is_empty())
}

/// Merge the protocol's `SET` assignments into an update expression (DynamoDB allows each
/// clause once): into its `SET` clause when it has one, as a new clause otherwise.
pub(crate) fn merge_set_clause(expression: &str, assignments: &str) -> String {
    // Expressions hold no string literals (values are placeholders), so a token `SET` at a word
    // boundary is the clause keyword.
    let bytes = expression.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'#' || b == b':';
    let mut i = 0;
    while i + 3 <= bytes.len() {
        let before_ok = i == 0 || !is_word(bytes[i - 1]);
        let after_ok = i + 3 == bytes.len() || !is_word(bytes[i + 3]);
        if before_ok && after_ok && expression[i..i + 3].eq_ignore_ascii_case("SET") {
            return format!(
                "{}SET {}, {}",
                &expression[..i],
                assignments,
                expression[i + 3..].trim_start()
            );
        }
        i += 1;
    }
    format!("SET {assignments} {expression}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_clause_is_merged_once() {
        assert_eq!(
            merge_set_clause("SET a = :a REMOVE c", "#txpl = :txpl"),
            "SET #txpl = :txpl, a = :a REMOVE c"
        );
        assert_eq!(
            merge_set_clause("ADD n :one", "#txpl = :txpl"),
            "SET #txpl = :txpl ADD n :one"
        );
        assert_eq!(
            merge_set_clause("REMOVE settings set a = :a", "#x = :y"),
            "REMOVE settings SET #x = :y, a = :a"
        );
    }
}
