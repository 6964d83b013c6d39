//! [`TxMessageBuilder`]: a transaction built in Rust, request by request, in the shape of
//! `TransactWriteItems`. It assembles the message format's JSON and validates it with
//! [`parse_message`], so a built message is exactly the message the parser gives for the
//! same transaction, refused by the same checks with the same rejection codes.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::{Map, Value};

use super::parse::parse_message;
use super::TxMessage;
use crate::rejection::{Rejection, RejectionCode};

/// Builds a [`TxMessage`]: [`TxMessage::builder`], then one call per request
/// ([`put`](Self::put), [`update`](Self::update), [`delete`](Self::delete),
/// [`check`](Self::check)), each followed by its [`condition`](Self::condition),
/// [`name`](Self::name) and [`value`](Self::value) placeholders, then [`build`](Self::build).
///
/// Attribute names and values reach the expressions through placeholders (`#name`,
/// `:value`), as in the JSON format. The checks run at `build` (the allow-list, which the
/// builder does not know, is checked by [`Coordinator::run`](super::super::Coordinator::run)).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct TxMessageBuilder {
    tx_id: String,
    issued_at_ms: Option<u64>,
    requests: Vec<(&'static str, Map<String, Value>)>,
    /// The first misuse (a value that does not serialize, a part before any request): refused
    /// by `build`.
    error: Option<String>,
}

impl TxMessageBuilder {
    pub(super) fn new(tx_id: impl Into<String>) -> Self {
        TxMessageBuilder {
            tx_id: tx_id.into(),
            issued_at_ms: None,
            requests: Vec::new(),
            error: None,
        }
    }

    /// When the producer issued the transaction (`issuedAt`, epoch milliseconds).
    pub fn issued_at(mut self, epoch_ms: u64) -> Self {
        self.issued_at_ms = Some(epoch_ms);
        self
    }

    /// A `Put` of the whole `item` (its key attributes name the item).
    pub fn put(self, table: impl Into<String>, item: impl Serialize) -> Self {
        self.request("Put", table, "Item", item)
    }

    /// An `Update` of the item `key` by `update_expression`.
    pub fn update(
        self,
        table: impl Into<String>,
        key: impl Serialize,
        update_expression: impl Into<String>,
    ) -> Self {
        let mut b = self.request("Update", table, "Key", key);
        b.set("UpdateExpression", Value::String(update_expression.into()));
        b
    }

    /// A `Delete` of the item `key`.
    pub fn delete(self, table: impl Into<String>, key: impl Serialize) -> Self {
        self.request("Delete", table, "Key", key)
    }

    /// A `ConditionCheck` of the item `key` against `condition_expression`.
    pub fn check(
        self,
        table: impl Into<String>,
        key: impl Serialize,
        condition_expression: impl Into<String>,
    ) -> Self {
        self.request("ConditionCheck", table, "Key", key)
            .condition(condition_expression)
    }

    /// The last request's `ConditionExpression` (honoured: if it fails, the transaction
    /// rolls back).
    pub fn condition(mut self, condition_expression: impl Into<String>) -> Self {
        self.set(
            "ConditionExpression",
            Value::String(condition_expression.into()),
        );
        self
    }

    /// A name placeholder of the last request (`ExpressionAttributeNames`): `#b` → `balance`.
    pub fn name(mut self, placeholder: impl Into<String>, attribute: impl Into<String>) -> Self {
        let attribute = Value::String(attribute.into());
        self.insert("ExpressionAttributeNames", placeholder.into(), attribute);
        self
    }

    /// A value placeholder of the last request (`ExpressionAttributeValues`): `:a` → `30`.
    pub fn value(mut self, placeholder: impl Into<String>, value: impl Serialize) -> Self {
        match serde_json::to_value(value) {
            Ok(value) => self.insert("ExpressionAttributeValues", placeholder.into(), value),
            Err(e) => self.fail(format!("a value does not serialize: {e}")),
        }
        self
    }

    /// The message, validated as
    /// [`Coordinator::parse_message`](super::super::Coordinator::parse_message) validates a
    /// body (every check but the allow-list; the first failed check's rejection).
    pub fn build(self) -> Result<TxMessage, Rejection> {
        if let Some(message) = self.error {
            return Err(Rejection::new(RejectionCode::InvalidRequest, message));
        }
        let tables: BTreeSet<String> = self
            .requests
            .iter()
            .filter_map(|(_, body)| body.get("TableName")?.as_str().map(String::from))
            .collect();
        let mut body = Map::new();
        body.insert("txId".into(), Value::String(self.tx_id));
        if let Some(at) = self.issued_at_ms {
            body.insert("issuedAt".into(), Value::from(at));
        }
        let requests = self
            .requests
            .into_iter()
            .map(|(kind, request)| {
                let mut entry = Map::new();
                entry.insert(kind.into(), Value::Object(request));
                Value::Object(entry)
            })
            .collect();
        body.insert("requests".into(), Value::Array(requests));
        let bytes = serde_json::to_vec(&Value::Object(body))
            .map_err(|e| Rejection::new(RejectionCode::InvalidRequest, format!("message: {e}")))?;
        parse_message(&bytes, &tables)
    }

    /// Start a request of `kind` naming its item by `field` (`Item` or `Key`).
    fn request(
        mut self,
        kind: &'static str,
        table: impl Into<String>,
        field: &str,
        attributes: impl Serialize,
    ) -> Self {
        let mut body = Map::new();
        body.insert("TableName".into(), Value::String(table.into()));
        match serde_json::to_value(attributes) {
            Ok(attributes) => {
                body.insert(field.into(), attributes);
            }
            Err(e) => self.fail(format!(
                "request {}: `{field}` does not serialize: {e}",
                self.requests.len()
            )),
        }
        self.requests.push((kind, body));
        self
    }

    /// Set a field of the last request.
    fn set(&mut self, field: &str, value: Value) {
        match self.requests.last_mut() {
            Some((_, body)) => {
                body.insert(field.into(), value);
            }
            None => self.fail(format!("`{field}` given before any request")),
        }
    }

    /// Add an entry to a map field of the last request.
    fn insert(&mut self, field: &str, key: String, value: Value) {
        match self.requests.last_mut() {
            Some((_, body)) => {
                let map = body
                    .entry(field)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = map {
                    map.insert(key, value);
                }
            }
            None => self.fail(format!("`{field}` given before any request")),
        }
    }

    fn fail(&mut self, message: String) {
        self.error.get_or_insert(message);
    }
}
