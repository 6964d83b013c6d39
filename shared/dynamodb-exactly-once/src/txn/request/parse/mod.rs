//! Parsing and validation of transaction messages: the body is read into `serde` raw structs
//! ([`RawMessage`], [`RawRequest`], [`RawBody`]), then validated into a [`TxMessage`] in the
//! order [`parse_message`] documents.
//!
//! A field that is present with the wrong shape does not fail deserialization: it is kept as
//! [`Field::Invalid`] and refused when its check comes, so that the allow-list is checked
//! before the other fields' shapes (as before the raw structs), and a `null` is refused
//! rather than read as absent. A request body refuses unknown fields (`deny_unknown_fields`),
//! a message ignores them, as before.

use crate::txn::format::RESERVED_PREFIX;
use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::{
    expression_tokens, Operation, TxMessage, TxRequest, MAX_TX_ID_LEN, PLACEHOLDER_PREFIX,
};
use crate::rejection::{Rejection, RejectionCode};
use crate::txn::record::MAX_REQUESTS;

/// A field as it was in the JSON.
#[derive(Debug, Default)]
enum Field<T> {
    /// Not in the object.
    #[default]
    Absent,
    /// Present with the expected shape.
    Valid(T),
    /// Present with another shape (`null` included).
    Invalid,
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Ok(T::deserialize(&value).map_or(Field::Invalid, Field::Valid))
    }
}

impl Field<String> {
    /// A string field that, when present, must hold more than whitespace.
    fn text(self, name: &str) -> Result<Option<String>, Rejection> {
        match self {
            Field::Absent => Ok(None),
            Field::Valid(s) if !s.trim().is_empty() => Ok(Some(s)),
            _ => Err(invalid(format!("`{name}` must be a non-empty string"))),
        }
    }
}

impl Field<Map<String, Value>> {
    /// An object field.
    fn object(self, name: &str) -> Result<Option<Map<String, Value>>, Rejection> {
        match self {
            Field::Absent => Ok(None),
            Field::Valid(map) => Ok(Some(map)),
            Field::Invalid => Err(invalid(format!("`{name}` must be an object"))),
        }
    }
}

/// A message body as received (other top-level fields are ignored).
#[derive(Debug, Deserialize)]
struct RawMessage {
    #[serde(rename = "txId", default)]
    tx_id: Field<String>,
    #[serde(default)]
    requests: Field<Vec<Value>>,
    #[serde(rename = "issuedAt", default)]
    issued_at: Field<u64>,
}

/// One request as received: exactly one kind, whose body is an object. (The body is read as
/// a map first: a `serde` struct would also accept an array, field by field.)
#[derive(Debug, Deserialize)]
enum RawRequest {
    Put(Map<String, Value>),
    Update(Map<String, Value>),
    Delete(Map<String, Value>),
    ConditionCheck(Map<String, Value>),
}

/// The kind of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Put,
    Update,
    Delete,
    ConditionCheck,
}

impl RawRequest {
    fn into_parts(self) -> (Kind, Map<String, Value>) {
        match self {
            RawRequest::Put(body) => (Kind::Put, body),
            RawRequest::Update(body) => (Kind::Update, body),
            RawRequest::Delete(body) => (Kind::Delete, body),
            RawRequest::ConditionCheck(body) => (Kind::ConditionCheck, body),
        }
    }
}

/// A request's body as received.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct RawBody {
    table_name: Field<String>,
    key: Field<Map<String, Value>>,
    item: Field<Map<String, Value>>,
    update_expression: Field<String>,
    condition_expression: Field<String>,
    expression_attribute_names: Field<Map<String, Value>>,
    expression_attribute_values: Field<Map<String, Value>>,
}

fn reject(code: RejectionCode, message: impl Into<String>) -> Rejection {
    Rejection::new(code, message)
}

fn invalid(message: impl Into<String>) -> Rejection {
    reject(RejectionCode::InvalidRequest, message)
}

/// Parse a message body `{"txId":…,"requests":[…]}`.
///
/// Checks run in this order, and the first that fails names the rejection code:
///
/// 1. the body is JSON (`bad_json`) and an object (`not_an_object`);
/// 2. `txId` is present (`missing_tx_id`), a non-empty string of at most [`MAX_TX_ID_LEN`]
///    bytes without `#` (`invalid_tx_id`);
/// 3. `requests` is a non-empty array (`no_requests`) of at most [`MAX_REQUESTS`]
///    (`too_many_requests`);
/// 4. per request, in order: exactly one known kind whose value is an object, no unknown
///    field, a non-empty `TableName` (`invalid_request`); the table is allowed
///    (`table_not_allowed`); every other field has its shape and the kind has its parts
///    (`invalid_request`); no reserved attribute in the key or item, then per entry of the
///    names map the attribute and the placeholder, then the values map's placeholders, then
///    the expressions' tokens (`reserved_attribute`, `reserved_placeholder`); then the
///    expressions are well-formed on their own (`malformed_expression`). A request's
///    rejection message starts with `request <index>: `.
pub(crate) fn parse_message(
    body: &[u8],
    allowed: &BTreeSet<String>,
) -> Result<TxMessage, Rejection> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| reject(RejectionCode::BadJson, format!("the body is not JSON: {e}")))?;
    let not_an_object = || reject(RejectionCode::NotAnObject, "the body must be a JSON object");
    if !value.is_object() {
        return Err(not_an_object());
    }
    // Every number from its text: one DynamoDB refuses, or one the parsed value cannot carry
    // exactly (it would be rounded through f64 into another amount or another key), is refused.
    crate::ddb::number::check_json_numbers(body)
        .map_err(|e| reject(RejectionCode::InvalidNumber, e.to_string()))?;
    let raw = RawMessage::deserialize(value).map_err(|_| not_an_object())?;
    let tx_id = tx_id(raw.tx_id)?;
    let Field::Valid(raw_requests) = raw.requests else {
        return Err(reject(
            RejectionCode::NoRequests,
            "`requests` must be an array",
        ));
    };
    if raw_requests.is_empty() {
        return Err(reject(RejectionCode::NoRequests, "`requests` is empty"));
    }
    if raw_requests.len() > MAX_REQUESTS {
        return Err(reject(
            RejectionCode::TooManyRequests,
            format!(
                "{} requests; a transaction takes at most {MAX_REQUESTS}",
                raw_requests.len()
            ),
        ));
    }
    let issued_at_ms = match raw.issued_at {
        Field::Absent => None,
        Field::Valid(at) => Some(at),
        Field::Invalid => {
            return Err(reject(
                RejectionCode::InvalidTimestamp,
                "`issuedAt` must be epoch milliseconds (a non-negative integer)",
            ))
        }
    };
    let requests = parse_with(&raw_requests, allowed, Rules::New)?;
    Ok(TxMessage {
        issued_at_ms,
        tx_id,
        requests,
        raw_requests,
    })
}

/// Check the `txId`.
fn tx_id(field: Field<String>) -> Result<String, Rejection> {
    let tx_id = match field {
        Field::Valid(s) if !s.is_empty() && s.len() <= MAX_TX_ID_LEN => s,
        Field::Absent => return Err(reject(RejectionCode::MissingTxId, "`txId` is missing")),
        _ => {
            return Err(reject(
                RejectionCode::InvalidTxId,
                format!("`txId` must be a non-empty string of at most {MAX_TX_ID_LEN} bytes"),
            ))
        }
    };
    if tx_id.contains('#') {
        return Err(reject(
            RejectionCode::InvalidTxId,
            "`txId` must not contain `#`",
        ));
    }
    Ok(tx_id)
}

/// Which checks a request list gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rules {
    /// A new message: every check.
    New,
    /// Requests already recorded in a TX record (accepted when it was created, maybe by an
    /// older version): their shape only. A check tightened since (as the expression parser
    /// was) must not make a recorded transaction impossible to finish or undo.
    Recorded,
}

/// Parse and validate a request list under `rules`.
fn parse_with(
    raw: &[Value],
    allowed: &BTreeSet<String>,
    rules: Rules,
) -> Result<Vec<TxRequest>, Rejection> {
    raw.iter()
        .enumerate()
        .map(|(i, r)| {
            parse_request(r, allowed, rules).map_err(|mut e| {
                e.message = format!("request {i}: {}", e.message);
                e
            })
        })
        .collect()
}

/// The requests of a TX record, allowing the tables they name (they were allowed when the
/// record was created) and checking their shape only ([`Rules::Recorded`]).
pub(crate) fn recorded_requests(raw: &[Value]) -> Result<Vec<TxRequest>, Rejection> {
    let tables: BTreeSet<String> = raw
        .iter()
        .filter_map(|r| r.as_object()?.values().next()?.get("TableName")?.as_str())
        .map(String::from)
        .collect();
    parse_with(raw, &tables, Rules::Recorded)
}

fn parse_request(
    value: &Value,
    allowed: &BTreeSet<String>,
    rules: Rules,
) -> Result<TxRequest, Rejection> {
    let (kind, body) = RawRequest::deserialize(value)
        .map_err(|e| {
            invalid(format!(
                "a request is an object with exactly one of Put, Update, Delete, \
                 ConditionCheck, whose value is an object ({e})"
            ))
        })?
        .into_parts();
    let body = RawBody::deserialize(Value::Object(body)).map_err(|e| invalid(e.to_string()))?;
    validate(kind, body, allowed, rules)
}

/// Validate a request's fields (check 4 of [`parse_message`], after the envelope).
fn validate(
    kind: Kind,
    body: RawBody,
    allowed: &BTreeSet<String>,
    rules: Rules,
) -> Result<TxRequest, Rejection> {
    let table = body
        .table_name
        .text("TableName")?
        .ok_or_else(|| invalid("`TableName` is missing"))?;
    if !allowed.contains(&table) {
        return Err(reject(
            RejectionCode::TableNotAllowed,
            format!("table `{table}` is not in the allow-list"),
        ));
    }
    let key = body.key.object("Key")?;
    let item = body.item.object("Item")?;
    let update_expression = body.update_expression.text("UpdateExpression")?;
    let condition_expression = body.condition_expression.text("ConditionExpression")?;
    let names = string_map(body.expression_attribute_names)?;
    let values = body
        .expression_attribute_values
        .object("ExpressionAttributeValues")?
        .unwrap_or_default();
    let has_condition = condition_expression.is_some();
    let request = TxRequest {
        table,
        op: operation(kind, key, item, update_expression, has_condition)?,
        condition_expression,
        names,
        values,
    };
    if rules == Rules::New {
        check_reserved(&request)?;
        check_well_formed(&request)?;
    }
    Ok(request)
}

/// Each expression well-formed on its own (see [`super::expr`]).
fn check_well_formed(request: &TxRequest) -> Result<(), Rejection> {
    if let Some(condition) = &request.condition_expression {
        super::expr::check_condition(condition)?;
    }
    if let Some(update) = request.op.update_expression() {
        super::expr::check_update(update)?;
    }
    Ok(())
}

/// `ExpressionAttributeNames`: an object of strings.
fn string_map(field: Field<Map<String, Value>>) -> Result<BTreeMap<String, String>, Rejection> {
    let mut names = BTreeMap::new();
    for (placeholder, name) in field
        .object("ExpressionAttributeNames")?
        .unwrap_or_default()
    {
        let Value::String(name) = name else {
            return Err(invalid("`ExpressionAttributeNames` values must be strings"));
        };
        names.insert(placeholder, name);
    }
    Ok(names)
}

/// The kind's parts: each kind needs its own and takes no other kind's.
fn operation(
    kind: Kind,
    key: Option<Map<String, Value>>,
    item: Option<Map<String, Value>>,
    update_expression: Option<String>,
    has_condition: bool,
) -> Result<Operation, Rejection> {
    match (kind, key, item, update_expression) {
        (Kind::Put, None, Some(item), None) => Ok(Operation::Put { item }),
        (Kind::Put, ..) => Err(invalid(
            "Put needs `Item` and takes no `Key` or `UpdateExpression`",
        )),
        (Kind::Update, Some(key), None, Some(update_expression)) => Ok(Operation::Update {
            key,
            update_expression,
        }),
        (Kind::Update, ..) => Err(invalid(
            "Update needs `Key` and `UpdateExpression` and takes no `Item`",
        )),
        (Kind::Delete, Some(key), None, None) => Ok(Operation::Delete { key }),
        (Kind::ConditionCheck, Some(key), None, None) if has_condition => {
            Ok(Operation::ConditionCheck { key })
        }
        (Kind::ConditionCheck, Some(_), None, None) => {
            Err(invalid("ConditionCheck needs a `ConditionExpression`"))
        }
        (Kind::Delete, ..) => Err(invalid(
            "Delete needs `Key` and takes no `Item` or `UpdateExpression`",
        )),
        (Kind::ConditionCheck, ..) => Err(invalid(
            "ConditionCheck needs `Key` and takes no `Item` or `UpdateExpression`",
        )),
    }
}

fn reserved(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
}

fn reserved_attribute(name: &str) -> Rejection {
    reject(
        RejectionCode::ReservedAttribute,
        format!("attribute `{name}` is reserved by the transaction protocol"),
    )
}

/// No reserved attribute or placeholder in the key or item, the maps or the expressions.
fn check_reserved(request: &TxRequest) -> Result<(), Rejection> {
    if let Some(attr) = request.op.attributes().keys().find(|a| reserved(a)) {
        return Err(reserved_attribute(attr));
    }
    check_maps(request)?;
    let expressions = request
        .op
        .update_expression()
        .into_iter()
        .chain(request.condition_expression.as_deref());
    for expr in expressions {
        check_expression(expr)?;
    }
    Ok(())
}

/// The names map (per entry: the attribute, then the placeholder), then the values map.
fn check_maps(request: &TxRequest) -> Result<(), Rejection> {
    for (placeholder, name) in &request.names {
        if reserved(name) {
            return Err(reserved_attribute(name));
        }
        if !placeholder.starts_with('#') || placeholder[1..].starts_with(PLACEHOLDER_PREFIX) {
            return Err(reject(
                RejectionCode::ReservedPlaceholder,
                format!(
                    "name placeholder `{placeholder}` must start with `#` and not `#{PLACEHOLDER_PREFIX}`"
                ),
            ));
        }
    }
    for placeholder in request.values.keys() {
        if !placeholder.starts_with(':') || placeholder[1..].starts_with(PLACEHOLDER_PREFIX) {
            return Err(reject(
                RejectionCode::ReservedPlaceholder,
                format!(
                    "value placeholder `{placeholder}` must start with `:` and not `:{PLACEHOLDER_PREFIX}`"
                ),
            ));
        }
    }
    Ok(())
}

/// An expression's tokens: no reserved attribute, no placeholder with the protocol's prefix.
fn check_expression(expr: &str) -> Result<(), Rejection> {
    for token in expression_tokens(expr) {
        if reserved(token) {
            return Err(reserved_attribute(token));
        }
        if let Some(rest) = token.strip_prefix('#').or_else(|| token.strip_prefix(':')) {
            if rest.starts_with(PLACEHOLDER_PREFIX) {
                return Err(reject(
                    RejectionCode::ReservedPlaceholder,
                    format!("placeholder `{token}` uses the protocol's prefix"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
