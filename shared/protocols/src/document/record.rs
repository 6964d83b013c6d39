//! Document records: parsing and validation of a record body.
//!
//! ```text
//! {"op":"list_append","key":{"PK":"user#1"},"path":"friends","values":["bob"],"unique":true}
//! {"op":"list_remove","key":{"PK":"user#1"},"path":"friends","value":"bob"}
//! {"op":"set_add","key":{"PK":"user#1"},"path":"profile.tags","values":["rust","aws"]}
//! {"op":"set_remove","key":{"PK":"user#1"},"path":"profile.tags","values":["aws"]}
//! {"op":"replace","key":{"PK":"user#1"},"document":{"name":"Ann"},"expectedVersion":3}
//! ```
//!
//! The body is decoded into a [`RawRecord`] (every field optional, so that each missing or
//! malformed field gets its own [`RejectionCode`]), then validated into a [`DocumentRecord`].

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Deserialize;
use serde_json::{Map, Number, Value};

use super::config::DocumentConfig;
use super::path::AttrPath;
use crate::ddb::item::{item_size, Item, ItemKey, MAX_ITEM_BYTES};
use crate::rejection::{Rejection, RejectionCode};

/// What a record asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum DocumentOp {
    /// Append `values` to the list at `path` (created when absent). With `unique`, only the
    /// values the list does not hold yet are appended (idempotent).
    ListAppend {
        /// The list.
        path: AttrPath,
        /// The values, in order (may be empty: nothing is written).
        values: Vec<AttributeValue>,
        /// Append only values not already in the list.
        unique: bool,
    },
    /// Remove one occurrence of `value` from the list at `path`.
    ListRemove {
        /// The list.
        path: AttrPath,
        /// The value to remove.
        value: AttributeValue,
    },
    /// Add elements to the string or number set at `path` (created when absent).
    SetAdd {
        /// The set.
        path: AttrPath,
        /// The elements (may be empty: nothing is written).
        values: SetValues,
    },
    /// Remove elements from the set at `path` (the attribute disappears with its last one).
    SetRemove {
        /// The set.
        path: AttrPath,
        /// The elements (may be empty: nothing is written).
        values: SetValues,
    },
    /// Replace the whole document (every attribute but the key and the protocol's).
    Replace {
        /// The new item: the document's attributes plus the key.
        document: Item,
        /// Apply only if the stored version is this one (`0`: no document yet).
        expected_version: Option<u64>,
    },
}

impl DocumentOp {
    /// The stable snake_case name of the operation.
    pub fn name(&self) -> &'static str {
        match self {
            DocumentOp::ListAppend { .. } => "list_append",
            DocumentOp::ListRemove { .. } => "list_remove",
            DocumentOp::SetAdd { .. } => "set_add",
            DocumentOp::SetRemove { .. } => "set_remove",
            DocumentOp::Replace { .. } => "replace",
        }
    }
}

/// The elements of a set operation: distinct, all strings or all numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetValues {
    /// A string set (`SS`).
    Strings(Vec<String>),
    /// A number set (`NS`), each number in one canonical spelling.
    Numbers(Vec<String>),
}

impl SetValues {
    /// The set as an attribute value; `None` when empty (DynamoDB has no empty sets).
    pub fn to_attribute(&self) -> Option<AttributeValue> {
        match self {
            SetValues::Strings(v) if !v.is_empty() => Some(AttributeValue::Ss(v.clone())),
            SetValues::Numbers(v) if !v.is_empty() => Some(AttributeValue::Ns(v.clone())),
            _ => None,
        }
    }
}

/// A parsed, validated document record.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentRecord {
    /// The item key.
    pub key: ItemKey,
    /// What to do.
    pub op: DocumentOp,
}

/// A record body as decoded, before validation.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawRecord {
    /// The operation name.
    pub op: Option<Value>,
    /// The item key (an object of string or number values).
    pub key: Option<Value>,
    /// The attribute path of a list or set operation.
    pub path: Option<Value>,
    /// The values of `list_append`, `set_add`, `set_remove`.
    pub values: Option<Value>,
    /// The value of `list_remove`.
    pub value: Option<Value>,
    /// `list_append`: only values not in the list yet.
    pub unique: Option<Value>,
    /// The document of `replace`.
    pub document: Option<Value>,
    /// `replace`: the version the document must have.
    pub expected_version: Option<Value>,
}

impl RawRecord {
    /// Decode a body: `bad_json` or `not_an_object` when it is not a JSON object.
    pub fn decode(body: &[u8]) -> Result<RawRecord, Rejection> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            Rejection::new(RejectionCode::BadJson, format!("the body is not JSON: {e}"))
        })?;
        if !value.is_object() {
            return Err(Rejection::new(
                RejectionCode::NotAnObject,
                "the body must be a JSON object",
            ));
        }
        serde_json::from_value(value).map_err(|e| {
            Rejection::new(
                RejectionCode::NotAnObject,
                format!("unreadable object: {e}"),
            )
        })
    }
}

fn reject(code: RejectionCode, message: impl Into<String>) -> Rejection {
    Rejection::new(code, message)
}

/// Validate a decoded record under `config`.
pub fn validate(raw: RawRecord, config: &DocumentConfig) -> Result<DocumentRecord, Rejection> {
    let key_json = raw
        .key
        .as_ref()
        .ok_or_else(|| reject(RejectionCode::InvalidKey, "`key` is missing"))?;
    let key = ItemKey::from_json(key_json).map_err(|m| reject(RejectionCode::InvalidKey, m))?;
    if let Some(name) = key.json().keys().find(|n| config.is_protocol_attribute(n)) {
        return Err(reject(
            RejectionCode::ReservedAttribute,
            format!("key attribute `{name}` uses the protocol prefix"),
        ));
    }
    let op = match raw.op.as_ref().and_then(Value::as_str) {
        Some("list_append") => list_append(&raw, &key, config)?,
        Some("list_remove") => DocumentOp::ListRemove {
            path: path(&raw, &key, config)?,
            value: single_value(raw.value.as_ref())?,
        },
        Some("set_add") => DocumentOp::SetAdd {
            path: path(&raw, &key, config)?,
            values: set_values(raw.values.as_ref())?,
        },
        Some("set_remove") => DocumentOp::SetRemove {
            path: path(&raw, &key, config)?,
            values: set_values(raw.values.as_ref())?,
        },
        Some("replace") => replace(&raw, &key, config)?,
        Some(other) => {
            return Err(reject(
                RejectionCode::UnknownOp,
                format!("`op` must be list_append, list_remove, set_add, set_remove or replace, got {other:?}"),
            ))
        }
        None => return Err(reject(RejectionCode::UnknownOp, "`op` is missing or not a string")),
    };
    Ok(DocumentRecord { key, op })
}

/// The record's path: parsed, and neither a key nor a protocol attribute.
fn path(raw: &RawRecord, key: &ItemKey, config: &DocumentConfig) -> Result<AttrPath, Rejection> {
    let text = raw.path.as_ref().and_then(Value::as_str).ok_or_else(|| {
        reject(
            RejectionCode::InvalidPath,
            "`path` is missing or not a string",
        )
    })?;
    let path = AttrPath::parse(text)
        .map_err(|m| reject(RejectionCode::InvalidPath, format!("`{text}`: {m}")))?;
    let top = path.top();
    if key.json().contains_key(top) {
        return Err(reject(
            RejectionCode::KeyPath,
            format!("`{text}` names the key attribute `{top}`, which an update cannot change"),
        ));
    }
    if config.is_protocol_attribute(top) {
        return Err(reject(
            RejectionCode::ReservedPath,
            format!(
                "`{text}` names `{top}`: attributes starting with `{}` belong to the protocol",
                config.attribute_prefix
            ),
        ));
    }
    Ok(path)
}

fn list_append(
    raw: &RawRecord,
    key: &ItemKey,
    config: &DocumentConfig,
) -> Result<DocumentOp, Rejection> {
    let path = path(raw, key, config)?;
    let Some(Value::Array(items)) = &raw.values else {
        return Err(reject(
            RejectionCode::InvalidValues,
            "`values` must be an array",
        ));
    };
    let values = items
        .iter()
        .map(to_attribute)
        .collect::<Result<Vec<_>, _>>()?;
    let size = item_size(&Item::from([(
        String::new(),
        AttributeValue::L(values.clone()),
    )]));
    if size > MAX_ITEM_BYTES {
        return Err(reject(
            RejectionCode::ItemTooLarge,
            format!("the values take {size} bytes; an item holds at most {MAX_ITEM_BYTES}"),
        ));
    }
    let unique = match &raw.unique {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(reject(
                RejectionCode::InvalidValues,
                "`unique` must be a boolean",
            ))
        }
    };
    Ok(DocumentOp::ListAppend {
        path,
        values,
        unique,
    })
}

fn single_value(value: Option<&Value>) -> Result<AttributeValue, Rejection> {
    value
        .map(to_attribute)
        .unwrap_or_else(|| Err(reject(RejectionCode::InvalidValues, "`value` is missing")))
}

fn to_attribute(value: &Value) -> Result<AttributeValue, Rejection> {
    serde_dynamo::to_attribute_value(value).map_err(|e| {
        reject(
            RejectionCode::InvalidValues,
            format!("a value cannot be marshalled: {e}"),
        )
    })
}

/// Distinct strings or distinct numbers (numbers spelled canonically: `1`, `1.0` and `1e0`
/// are one element, as DynamoDB sees them).
fn set_values(values: Option<&Value>) -> Result<SetValues, Rejection> {
    let Some(Value::Array(items)) = values else {
        return Err(reject(
            RejectionCode::InvalidValues,
            "`values` must be an array",
        ));
    };
    let mixed = || {
        reject(
            RejectionCode::InvalidValues,
            "set elements must be all strings or all numbers",
        )
    };
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    let numbers = matches!(items.first(), Some(Value::Number(_)));
    for item in items {
        let element = match (item, numbers) {
            (Value::String(s), false) => s.clone(),
            (Value::Number(n), true) => canonical_number(n),
            _ => return Err(mixed()),
        };
        if !out.contains(&element) {
            out.push(element);
        }
    }
    Ok(if numbers {
        SetValues::Numbers(out)
    } else {
        SetValues::Strings(out)
    })
}

/// One spelling per number value: integers without a fraction or exponent.
fn canonical_number(n: &Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    match n.as_f64() {
        Some(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e15 => {
            #[allow(clippy::cast_possible_truncation)]
            let i = f as i64;
            i.to_string()
        }
        _ => n.to_string(),
    }
}

fn replace(
    raw: &RawRecord,
    key: &ItemKey,
    config: &DocumentConfig,
) -> Result<DocumentOp, Rejection> {
    let Some(Value::Object(fields)) = &raw.document else {
        return Err(reject(
            RejectionCode::InvalidDocument,
            "`document` must be an object",
        ));
    };
    let expected_version = match &raw.expected_version {
        None => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            reject(
                RejectionCode::InvalidVersion,
                "`expectedVersion` must be a non-negative integer",
            )
        })?),
    };
    let document = document_item(fields, key, config)?;
    Ok(DocumentOp::Replace {
        document,
        expected_version,
    })
}

/// The stored item of a replace: the document plus the key, checked.
fn document_item(
    fields: &Map<String, Value>,
    key: &ItemKey,
    config: &DocumentConfig,
) -> Result<Item, Rejection> {
    for (name, value) in fields {
        if config.is_protocol_attribute(name) {
            return Err(reject(
                RejectionCode::ReservedAttribute,
                format!("`{name}` belongs to the document protocol and cannot be set by a payload"),
            ));
        }
        if key.json().get(name).is_some_and(|k| k != value) {
            return Err(reject(
                RejectionCode::KeyMismatch,
                format!("document attribute `{name}` disagrees with the key"),
            ));
        }
    }
    let mut stored = fields.clone();
    stored.extend(key.json().iter().map(|(k, v)| (k.clone(), v.clone())));
    let item: Item = serde_dynamo::to_item(&stored).map_err(|e| {
        reject(
            RejectionCode::InvalidDocument,
            format!("the document cannot be marshalled: {e}"),
        )
    })?;
    let size = item_size(&item);
    if size > MAX_ITEM_BYTES {
        return Err(reject(
            RejectionCode::ItemTooLarge,
            format!("the stored item would be {size} bytes; DynamoDB's limit is {MAX_ITEM_BYTES}"),
        ));
    }
    Ok(item)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<DocumentRecord, Rejection> {
        validate(
            RawRecord::decode(body.as_bytes())?,
            &DocumentConfig::new("t"),
        )
    }

    fn code(body: &str) -> String {
        parse(body).map_or_else(|r| r.code.to_string(), |_| "ok".into())
    }

    #[test]
    fn each_malformed_kind_has_its_code() {
        let k = r#""key":{"PK":"u","SK":"d"}"#;
        for (body, expected) in [
            (
                format!(r#"{{"op":"list_append",{k},"path":"l","values":[1,"a",{{"x":null}}]}}"#),
                "ok",
            ),
            (
                format!(r#"{{"op":"list_remove",{k},"path":"a.b[2]","value":{{"m":1}}}}"#),
                "ok",
            ),
            (
                format!(r#"{{"op":"set_add",{k},"path":"s","values":[]}}"#),
                "ok",
            ),
            (
                format!(
                    r#"{{"op":"replace",{k},"document":{{"PK":"u","x":1}},"expectedVersion":0}}"#
                ),
                "ok",
            ),
            ("{oops".into(), "bad_json"),
            ("[]".into(), "not_an_object"),
            (
                r#"{"op":"set_add","path":"s","values":["a"]}"#.into(),
                "invalid_key",
            ),
            (format!(r#"{{"op":"pop",{k},"path":"l"}}"#), "unknown_op"),
            (
                format!(r#"{{"op":"set_add",{k},"values":["a"]}}"#),
                "invalid_path",
            ),
            (
                format!(r#"{{"op":"set_add",{k},"path":"a..b","values":["a"]}}"#),
                "invalid_path",
            ),
            (
                format!(r#"{{"op":"set_add",{k},"path":"SK","values":["a"]}}"#),
                "key_path",
            ),
            (
                format!(r#"{{"op":"list_remove",{k},"path":"doc_version","value":1}}"#),
                "reserved_path",
            ),
            (
                format!(r#"{{"op":"list_append",{k},"path":"doc_op1[0]","values":[1]}}"#),
                "reserved_path",
            ),
            (
                format!(r#"{{"op":"set_add",{k},"path":"s","values":["a",1]}}"#),
                "invalid_values",
            ),
            (
                format!(r#"{{"op":"set_add",{k},"path":"s","values":[true]}}"#),
                "invalid_values",
            ),
            (
                format!(r#"{{"op":"set_remove",{k},"path":"s"}}"#),
                "invalid_values",
            ),
            (
                format!(r#"{{"op":"list_remove",{k},"path":"l"}}"#),
                "invalid_values",
            ),
            (
                format!(r#"{{"op":"list_append",{k},"path":"l","values":[1],"unique":"yes"}}"#),
                "invalid_values",
            ),
            (
                format!(r#"{{"op":"replace",{k},"document":[1]}}"#),
                "invalid_document",
            ),
            (
                format!(r#"{{"op":"replace",{k},"document":{{}},"expectedVersion":-1}}"#),
                "invalid_version",
            ),
            (
                format!(r#"{{"op":"replace",{k},"document":{{"doc_version":9}}}}"#),
                "reserved_attribute",
            ),
            (
                format!(r#"{{"op":"replace",{k},"document":{{"PK":"other"}}}}"#),
                "key_mismatch",
            ),
        ] {
            assert_eq!(code(&body), expected, "{body}");
        }
    }

    #[test]
    fn set_values_are_deduplicated_in_canonical_spelling() {
        let r =
            parse(r#"{"op":"set_add","key":{"PK":"u"},"path":"n","values":[1,1.0,1e0,2.5,2.50]}"#)
                .expect("valid");
        let DocumentOp::SetAdd { values, .. } = r.op else {
            panic!("set_add expected");
        };
        assert_eq!(values, SetValues::Numbers(vec!["1".into(), "2.5".into()]));
        assert_eq!(SetValues::Strings(vec![]).to_attribute(), None);
    }

    #[test]
    fn replace_keeps_the_key_in_the_document() {
        let r =
            parse(r#"{"op":"replace","key":{"PK":"u"},"document":{"name":"Ann"}}"#).expect("valid");
        let DocumentOp::Replace {
            document,
            expected_version,
        } = r.op
        else {
            panic!("replace expected");
        };
        assert_eq!(expected_version, None);
        assert_eq!(document["PK"], AttributeValue::S("u".into()));
        assert_eq!(document["name"], AttributeValue::S("Ann".into()));
    }
}
