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
//! Validation (a failure is a [`Rejection`], dead-lettered): the table is in the allow-list,
//! no reserved protocol attribute (prefix [`RESERVED_PREFIX`]) is named anywhere, no
//! placeholder uses the protocol's prefix ([`PLACEHOLDER_PREFIX`]), `ConditionCheck` has a
//! condition, `Update` has an update expression, `Put` has an item.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Map, Value};

use crate::rejection::{Rejection, RejectionCode};
use crate::ddb::item::{canonical_json, Item};

/// Attribute names starting with this are the protocol's (locks, images, versions).
pub const RESERVED_PREFIX: &str = "_tx";
/// Expression placeholders of the protocol start with `#` or `:` followed by this; requests
/// keep their own names/values maps and may not use it.
pub const PLACEHOLDER_PREFIX: &str = "txp";
/// Longest accepted transaction id.
pub const MAX_TX_ID_LEN: usize = 200;

/// The four request kinds of `TransactWriteItems`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// Replace (or create) the whole item.
    Put,
    /// Apply an update expression.
    Update,
    /// Delete the item.
    Delete,
    /// Only check a condition (and hold the item still until the decision).
    ConditionCheck,
}

impl RequestKind {
    /// The JSON tag.
    pub fn tag(self) -> &'static str {
        match self {
            RequestKind::Put => "Put",
            RequestKind::Update => "Update",
            RequestKind::Delete => "Delete",
            RequestKind::ConditionCheck => "ConditionCheck",
        }
    }
}

/// One validated request.
#[derive(Debug, Clone, PartialEq)]
pub struct TxRequest {
    /// What it does.
    pub kind: RequestKind,
    /// The table (in the allow-list).
    pub table: String,
    /// `Key` (Update, Delete, ConditionCheck).
    pub key: Option<Map<String, Value>>,
    /// `Item` (Put).
    pub item: Option<Map<String, Value>>,
    /// `UpdateExpression` (Update).
    pub update_expression: Option<String>,
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
            .map(|(k, v)| Ok((k.clone(), serde_dynamo::to_attribute_value(v)?)))
            .collect()
    }

    /// The Put item as attribute values.
    pub fn put_item(&self) -> Result<Item, serde_dynamo::Error> {
        serde_dynamo::to_item(self.item.clone().unwrap_or_default())
    }

    /// The item key given the table's key attribute names (from `Key`, or from the Put item).
    pub fn key_json(&self, key_names: &[String]) -> Result<Map<String, Value>, String> {
        let source = match self.kind {
            RequestKind::Put => self.item.as_ref(),
            _ => self.key.as_ref(),
        };
        let source = source.ok_or("the request has no key")?;
        let mut key = Map::new();
        for name in key_names {
            let v = source
                .get(name)
                .ok_or_else(|| format!("key attribute `{name}` is missing"))?;
            key.insert(name.clone(), v.clone());
        }
        if self.kind != RequestKind::Put && source.len() != key.len() {
            return Err(format!(
                "`Key` must hold exactly the key attributes {key_names:?}"
            ));
        }
        Ok(key)
    }
}

/// A parsed transaction message.
#[derive(Debug, Clone, PartialEq)]
pub struct TxMessage {
    /// The idempotency id.
    pub tx_id: String,
    /// The requests, in message order (indices name them in outcomes).
    pub requests: Vec<TxRequest>,
    /// The requests as received (stored in the TX record).
    pub raw_requests: Vec<Value>,
}

impl TxMessage {
    /// The requests as the canonical JSON stored in the TX record.
    pub fn requests_json(&self) -> String {
        canonical_json(&Value::Array(self.raw_requests.clone()))
    }
}

fn reject(code: RejectionCode, message: impl Into<String>) -> Rejection {
    Rejection::new(code, message)
}

/// Parse a message body `{"txId":…,"requests":[…]}`.
pub fn parse_message(body: &[u8], allowed: &BTreeSet<String>) -> Result<TxMessage, Rejection> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| reject(RejectionCode::BadJson, format!("the body is not JSON: {e}")))?;
    let Some(obj) = value.as_object() else {
        return Err(reject(RejectionCode::NotAnObject, "the body must be a JSON object"));
    };
    let tx_id = match obj.get("txId") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_TX_ID_LEN => s.clone(),
        Some(_) => {
            return Err(reject(RejectionCode::InvalidTxId,
                format!("`txId` must be a non-empty string of at most {MAX_TX_ID_LEN} bytes"),
            ))
        }
        None => return Err(reject(RejectionCode::MissingTxId, "`txId` is missing")),
    };
    if tx_id.contains('#') {
        return Err(reject(RejectionCode::InvalidTxId, "`txId` must not contain `#`"));
    }
    let Some(Value::Array(raw)) = obj.get("requests") else {
        return Err(reject(RejectionCode::NoRequests, "`requests` must be an array"));
    };
    if raw.is_empty() {
        return Err(reject(RejectionCode::NoRequests, "`requests` is empty"));
    }
    if raw.len() > super::record::MAX_REQUESTS {
        return Err(reject(RejectionCode::TooManyRequests,
            format!(
                "{} requests; a transaction takes at most {}",
                raw.len(),
                super::record::MAX_REQUESTS
            ),
        ));
    }
    let requests = parse_requests(raw, allowed)?;
    Ok(TxMessage {
        tx_id,
        requests,
        raw_requests: raw.clone(),
    })
}

/// Parse and validate the request list (also used when resuming from a TX record).
pub fn parse_requests(
    raw: &[Value],
    allowed: &BTreeSet<String>,
) -> Result<Vec<TxRequest>, Rejection> {
    raw.iter()
        .enumerate()
        .map(|(i, r)| {
            parse_request(r, allowed).map_err(|mut e| {
                e.message = format!("request {i}: {}", e.message);
                e
            })
        })
        .collect()
}

fn parse_request(value: &Value, allowed: &BTreeSet<String>) -> Result<TxRequest, Rejection> {
    let obj = value.as_object().filter(|o| o.len() == 1).ok_or_else(|| {
        reject(RejectionCode::InvalidRequest,
            "a request is an object with exactly one of Put, Update, Delete, ConditionCheck",
        )
    })?;
    let (tag, body) = obj
        .iter()
        .next()
        .ok_or_else(|| reject(RejectionCode::InvalidRequest, "empty request"))?;
    let kind = match tag.as_str() {
        "Put" => RequestKind::Put,
        "Update" => RequestKind::Update,
        "Delete" => RequestKind::Delete,
        "ConditionCheck" => RequestKind::ConditionCheck,
        other => {
            return Err(reject(RejectionCode::InvalidRequest,
                format!("unknown request kind {other:?}"),
            ))
        }
    };
    let body = body
        .as_object()
        .ok_or_else(|| reject(RejectionCode::InvalidRequest, format!("`{tag}` must be an object")))?;
    let known = [
        "TableName",
        "Key",
        "Item",
        "UpdateExpression",
        "ConditionExpression",
        "ExpressionAttributeNames",
        "ExpressionAttributeValues",
    ];
    if let Some(unknown) = body.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(reject(RejectionCode::InvalidRequest,
            format!("unknown field `{unknown}`"),
        ));
    }
    let text = |name: &str| -> Result<Option<String>, Rejection> {
        match body.get(name) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(_) => Err(reject(RejectionCode::InvalidRequest,
                format!("`{name}` must be a non-empty string"),
            )),
        }
    };
    let table =
        text("TableName")?.ok_or_else(|| reject(RejectionCode::InvalidRequest, "`TableName` is missing"))?;
    if !allowed.contains(&table) {
        return Err(reject(RejectionCode::TableNotAllowed,
            format!("table `{table}` is not in the allow-list"),
        ));
    }
    let object = |name: &str| -> Result<Option<Map<String, Value>>, Rejection> {
        match body.get(name) {
            None => Ok(None),
            Some(Value::Object(o)) => Ok(Some(o.clone())),
            Some(_) => Err(reject(RejectionCode::InvalidRequest,
                format!("`{name}` must be an object"),
            )),
        }
    };
    let key = object("Key")?;
    let item = object("Item")?;
    let update_expression = text("UpdateExpression")?;
    let condition_expression = text("ConditionExpression")?;
    let mut names = BTreeMap::new();
    for (placeholder, name) in object("ExpressionAttributeNames")?.unwrap_or_default() {
        let Value::String(name) = name else {
            return Err(reject(RejectionCode::InvalidRequest,
                "`ExpressionAttributeNames` values must be strings",
            ));
        };
        names.insert(placeholder, name);
    }
    let values = object("ExpressionAttributeValues")?.unwrap_or_default();

    match kind {
        RequestKind::Put => {
            if item.is_none() || key.is_some() || update_expression.is_some() {
                return Err(reject(RejectionCode::InvalidRequest,
                    "Put needs `Item` and takes no `Key` or `UpdateExpression`",
                ));
            }
        }
        RequestKind::Update => {
            if key.is_none() || update_expression.is_none() || item.is_some() {
                return Err(reject(RejectionCode::InvalidRequest,
                    "Update needs `Key` and `UpdateExpression` and takes no `Item`",
                ));
            }
        }
        RequestKind::Delete | RequestKind::ConditionCheck => {
            if key.is_none() || item.is_some() || update_expression.is_some() {
                return Err(reject(RejectionCode::InvalidRequest,
                    format!("{tag} needs `Key` and takes no `Item` or `UpdateExpression`"),
                ));
            }
            if kind == RequestKind::ConditionCheck && condition_expression.is_none() {
                return Err(reject(RejectionCode::InvalidRequest,
                    "ConditionCheck needs a `ConditionExpression`",
                ));
            }
        }
    }

    // Reserved attributes and placeholders.
    let reserved = |name: &str| name.starts_with(RESERVED_PREFIX);
    for attr in key.iter().chain(item.iter()).flat_map(|m| m.keys()) {
        if reserved(attr) {
            return Err(reject(RejectionCode::ReservedAttribute,
                format!("attribute `{attr}` is reserved by the transaction protocol"),
            ));
        }
    }
    for (placeholder, name) in &names {
        if reserved(name) {
            return Err(reject(RejectionCode::ReservedAttribute,
                format!("attribute `{name}` is reserved by the transaction protocol"),
            ));
        }
        if !placeholder.starts_with('#') || placeholder[1..].starts_with(PLACEHOLDER_PREFIX) {
            return Err(reject(RejectionCode::ReservedPlaceholder,
                format!("name placeholder `{placeholder}` must start with `#` and not `#{PLACEHOLDER_PREFIX}`"),
            ));
        }
    }
    for placeholder in values.keys() {
        if !placeholder.starts_with(':') || placeholder[1..].starts_with(PLACEHOLDER_PREFIX) {
            return Err(reject(RejectionCode::ReservedPlaceholder,
                format!("value placeholder `{placeholder}` must start with `:` and not `:{PLACEHOLDER_PREFIX}`"),
            ));
        }
    }
    for expr in update_expression.iter().chain(condition_expression.iter()) {
        for token in expression_tokens(expr) {
            if reserved(token) {
                return Err(reject(RejectionCode::ReservedAttribute,
                    format!("attribute `{token}` is reserved by the transaction protocol"),
                ));
            }
            if let Some(rest) = token.strip_prefix('#').or_else(|| token.strip_prefix(':')) {
                if rest.starts_with(PLACEHOLDER_PREFIX) {
                    return Err(reject(RejectionCode::ReservedPlaceholder,
                        format!("placeholder `{token}` uses the protocol's prefix"),
                    ));
                }
            }
        }
    }
    Ok(TxRequest {
        kind,
        table,
        key,
        item,
        update_expression,
        condition_expression,
        names,
        values,
    })
}

/// The identifier-like tokens of an expression (names, placeholders, keywords, functions).
pub fn expression_tokens(expr: &str) -> impl Iterator<Item = &str> {
    expr.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '#' || c == ':'))
        .filter(|t| !t.is_empty())
}

/// Merge the protocol's `SET` assignments into an update expression (DynamoDB allows each
/// clause once): into its `SET` clause when it has one, as a new clause otherwise.
pub fn merge_set_clause(expression: &str, assignments: &str) -> String {
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
    use serde_json::json;

    fn allowed() -> BTreeSet<String> {
        BTreeSet::from(["Accounts".to_string()])
    }

    fn code(body: Value) -> String {
        match parse_message(body.to_string().as_bytes(), &allowed()) {
            Ok(_) => "ok".into(),
            Err(r) => r.code.to_string(),
        }
    }

    fn update(extra: Value) -> Value {
        let mut u = json!({"TableName":"Accounts","Key":{"PK":"a"},"UpdateExpression":"SET b = :v","ExpressionAttributeValues":{":v":1}});
        if let (Some(u), Some(extra)) = (u.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                u.insert(k.clone(), v.clone());
            }
        }
        json!({"txId":"t","requests":[{"Update":u}]})
    }

    #[test]
    fn each_invalid_message_has_its_code() {
        assert_eq!(code(update(json!({}))), "ok");
        assert_eq!(code(json!([1])), "not_an_object");
        assert_eq!(code(json!({"requests":[]})), "missing_tx_id");
        assert_eq!(code(json!({"txId":"t","requests":[]})), "no_requests");
        assert_eq!(
            code(update(json!({"TableName":"Other"}))),
            "table_not_allowed"
        );
        assert_eq!(
            code(update(json!({"UpdateExpression":"SET _txLock = :v"}))),
            "reserved_attribute"
        );
        assert_eq!(
            code(update(
                json!({"UpdateExpression":"SET #n = :v","ExpressionAttributeNames":{"#n":"_txVer"}})
            )),
            "reserved_attribute"
        );
        assert_eq!(
            code(update(
                json!({"UpdateExpression":"SET b = :txpv","ExpressionAttributeValues":{":txpv":1}})
            )),
            "reserved_placeholder"
        );
        assert_eq!(
            code(
                json!({"txId":"t","requests":[{"ConditionCheck":{"TableName":"Accounts","Key":{"PK":"a"}}}]})
            ),
            "invalid_request"
        );
        assert_eq!(
            code(
                json!({"txId":"t","requests":[{"Put":{"TableName":"Accounts","Item":{"PK":"a","_txLock":"x"}}}]})
            ),
            "reserved_attribute"
        );
    }

    /// Which code each malformed input gets, including which check wins when an input fails
    /// several (pinned before the parser moved to `serde` raw structs).
    #[test]
    fn rejection_codes_and_their_precedence() {
        let upd = |extra: Value| update(extra);
        let one = |r: Value| json!({"txId":"t","requests":[r]});
        let cases: Vec<(Value, &str)> = vec![
            (json!({"txId":5,"requests":[]}), "invalid_tx_id"),
            (json!({"txId":null,"requests":[]}), "invalid_tx_id"),
            (json!({"txId":"","requests":[]}), "invalid_tx_id"),
            (json!({"txId":"a#b","requests":[]}), "invalid_tx_id"),
            (json!({"txId":"x".repeat(MAX_TX_ID_LEN + 1),"requests":[]}), "invalid_tx_id"),
            (json!({"txId":"x".repeat(MAX_TX_ID_LEN),"requests":[]}), "no_requests"),
            (json!({"txId":"t"}), "no_requests"),
            (json!({"txId":"t","requests":{}}), "no_requests"),
            (json!({"txId":"t","requests":null}), "no_requests"),
            (json!({"txId":"t","requests":vec![1; super::super::record::MAX_REQUESTS + 1]}), "too_many_requests"),
            (one(json!(1)), "invalid_request"),
            (one(json!({})), "invalid_request"),
            (one(json!("Put")), "invalid_request"),
            (one(json!({"Upsert":{"TableName":"Accounts"}})), "invalid_request"),
            (one(json!({"Put":["Accounts"]})), "invalid_request"),
            (one(json!({"Put":"Accounts"})), "invalid_request"),
            (one(json!({"Put":{"TableName":"Accounts","Item":{"PK":"a"}},
                        "Delete":{"TableName":"Accounts","Key":{"PK":"a"}}})), "invalid_request"),
            (upd(json!({"Foo":1})), "invalid_request"),
            (upd(json!({"Foo":1,"TableName":"Other"})), "invalid_request"),
            (upd(json!({"TableName":"Other","Key":"x"})), "table_not_allowed"),
            (upd(json!({"TableName":"Other","Key":{"_txLock":"a"}})), "table_not_allowed"),
            (upd(json!({"TableName":"Other","ExpressionAttributeValues":[1]})), "table_not_allowed"),
            (upd(json!({"TableName":5})), "invalid_request"),
            (upd(json!({"TableName":"  "})), "invalid_request"),
            (upd(json!({"TableName":null})), "invalid_request"),
            (upd(json!({"Key":null})), "invalid_request"),
            (upd(json!({"Key":[1]})), "invalid_request"),
            (upd(json!({"ConditionExpression":null})), "invalid_request"),
            (upd(json!({"ConditionExpression":""})), "invalid_request"),
            (upd(json!({"UpdateExpression":5})), "invalid_request"),
            (upd(json!({"ExpressionAttributeNames":{"#b":1}})), "invalid_request"),
            (upd(json!({"ExpressionAttributeNames":["#b"]})), "invalid_request"),
            (upd(json!({"ExpressionAttributeValues":[1]})), "invalid_request"),
            (upd(json!({"ExpressionAttributeValues":null})), "invalid_request"),
            (upd(json!({"Item":{"PK":"a"}})), "invalid_request"),
            (upd(json!({"Item":{"_txLock":"a"}})), "invalid_request"),
            (one(json!({"Update":{"TableName":"Accounts","Key":{"PK":"a"}}})), "invalid_request"),
            (one(json!({"Put":{"TableName":"Accounts","Item":{"PK":"a"},"Key":null}})), "invalid_request"),
            (one(json!({"Put":{"TableName":"Accounts","Item":{"PK":"a"},"Key":{"PK":"a"}}})), "invalid_request"),
            (one(json!({"Put":{"TableName":"Accounts","Item":{"PK":"a"},"UpdateExpression":"SET a = :a"}})), "invalid_request"),
            (one(json!({"Put":{"TableName":"Accounts"}})), "invalid_request"),
            (one(json!({"Put":{"TableName":"Accounts","Item":null}})), "invalid_request"),
            (one(json!({"Delete":{"TableName":"Accounts","Key":null}})), "invalid_request"),
            (one(json!({"Delete":{"TableName":"Accounts","Key":{"PK":"a"},"Item":{"PK":"a"}}})), "invalid_request"),
            (one(json!({"Delete":{"TableName":"Accounts","Key":{"PK":"a"},"UpdateExpression":"SET a = :a"}})), "invalid_request"),
            (one(json!({"ConditionCheck":{"TableName":"Accounts","Key":{"PK":"a"},"ConditionExpression":"   "}})), "invalid_request"),
            (one(json!({"Delete":{"TableName":"Accounts","Key":{"_txLock":"a"}}})), "reserved_attribute"),
            (one(json!({"Delete":{"TableName":"Accounts","Key":{"PK":"a"},
                "ExpressionAttributeNames":{"#a":"ok","#txpb":"x"}}})), "reserved_placeholder"),
            (upd(json!({"ExpressionAttributeNames":{"b":"x"}})), "reserved_placeholder"),
            (upd(json!({"ExpressionAttributeNames":{"#a":"_txX","#txp":"y"}})), "reserved_attribute"),
            (upd(json!({"ExpressionAttributeNames":{"#a":"x","#txp":"_tx"}})), "reserved_attribute"),
            (upd(json!({"ExpressionAttributeNames":{"#a":"x","#txp":"y"}})), "reserved_placeholder"),
            (upd(json!({"ExpressionAttributeValues":{"v":1}})), "reserved_placeholder"),
            (upd(json!({"UpdateExpression":"SET #txpz = :v"})), "reserved_placeholder"),
            (upd(json!({"UpdateExpression":"SET b = :v","ConditionExpression":"attribute_exists(_txVer)"})), "reserved_attribute"),
            (upd(json!({"UpdateExpression":"SET _txVer = :txpv","ExpressionAttributeValues":{":txpv":1}})), "reserved_placeholder"),
            (json!({"txId":"t","requests":[
                {"Delete":{"TableName":"Accounts","Key":{"PK":"a"}}},
                {"Delete":{"TableName":"Other","Key":{"PK":"b"}}}]}), "table_not_allowed"),
            (one(json!({"Put":{"TableName":"Accounts","Item":{"PK":"a"},"ConditionExpression":"attribute_not_exists(PK)"}})), "ok"),
            (one(json!({"Delete":{"TableName":"Accounts","Key":{"PK":"a"}}})), "ok"),
            (one(json!({"ConditionCheck":{"TableName":"Accounts","Key":{"PK":"a"},"ConditionExpression":"attribute_exists(PK)"}})), "ok"),
            (json!({"txId":"t","extra":1,"requests":[{"Delete":{"TableName":"Accounts","Key":{"PK":"a"}}}]}), "ok"),
        ];
        for (body, expected) in cases {
            assert_eq!(code(body.clone()), expected, "{body}");
        }
        assert_eq!(
            parse_message(b"{not json", &allowed()).map_err(|r| r.code.to_string()),
            Err("bad_json".to_string())
        );
        let second = json!({"txId":"t","requests":[
            {"Delete":{"TableName":"Accounts","Key":{"PK":"a"}}}, {"Delete":{"TableName":"Accounts"}}]});
        let r = parse_message(second.to_string().as_bytes(), &allowed()).expect_err("refused");
        assert!(r.message.starts_with("request 1: "), "{r}");
    }

    /// The requests are stored as canonical JSON: the same text for the same message (the
    /// `txId` idempotency check compares it).
    #[test]
    fn requests_json_is_canonical() {
        let body = r#"{"txId":"t","requests":[{"Update":{"UpdateExpression":"SET b = :v","TableName":"Accounts","Key":{"SK":2,"PK":"a"},"ExpressionAttributeValues":{":v":{"y":[1,2.5,"x"],"a":null}}}}]}"#;
        let message = parse_message(body.as_bytes(), &allowed()).expect("valid");
        assert_eq!(
            message.requests_json(),
            r#"[{"Update":{"ExpressionAttributeValues":{":v":{"a":null,"y":[1,2.5,"x"]}},"Key":{"PK":"a","SK":2},"TableName":"Accounts","UpdateExpression":"SET b = :v"}}]"#
        );
    }

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
