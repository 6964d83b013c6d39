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
//! The body is decoded into a `RawRecord` (every field optional, so that each missing or
//! malformed field gets its own [`RejectionCode`]), then validated into a [`DocumentRecord`];
//! the typed constructors ([`Document::list_append_record`], …) fill the same `RawRecord` and
//! pass the same checks.

use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::config::DocumentConfig;
use super::path::AttrPath;
use super::values::{set_values, single_value, to_attribute, SetValues};
use super::Document;
use crate::ddb::item::{item_size, Item, ItemKey, MAX_ITEM_BYTES};
use crate::rejection::{Rejection, RejectionCode};

/// What a record asks for.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
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

/// A validated document record, built by [`Document::parse_record`] or a typed constructor
/// ([`Document::list_append_record`], [`Document::list_remove_record`],
/// [`Document::set_add_record`], [`Document::set_remove_record`],
/// [`Document::replace_record`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentRecord {
    pub(crate) key: ItemKey,
    pub(crate) op: DocumentOp,
    /// The op token of every try of this record; `None`: a fresh one per write call.
    pub(crate) token: Option<String>,
}

impl DocumentRecord {
    /// The item key.
    pub fn key(&self) -> &ItemKey {
        &self.key
    }

    /// What to do.
    pub fn op(&self) -> &DocumentOp {
        &self.op
    }

    /// The same record, its op token derived from `delivery` (a stable identity of the
    /// record in its source): every delivery of the record writes the same token, so one
    /// that finds it in the item's op slots knows its write already landed.
    pub fn delivered_as(mut self, delivery: &str) -> Self {
        self.token = Some(super::token::delivery_token(delivery));
        self
    }

    /// The op token every try of this record writes (32 hex digits), when it is fixed (see
    /// [`DocumentRecord::delivered_as`]); `None`: each write call draws a fresh one.
    pub fn op_token(&self) -> Option<&str> {
        self.token.as_deref()
    }
}

/// A record body as decoded, before validation.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawRecord {
    op: Option<Value>,
    key: Option<Value>,
    path: Option<Value>,
    values: Option<Value>,
    value: Option<Value>,
    unique: Option<Value>,
    document: Option<Value>,
    expected_version: Option<Value>,
}

impl RawRecord {
    /// Decode a body: `bad_json` or `not_an_object` when it is not a JSON object.
    pub(crate) fn decode(body: &[u8]) -> Result<RawRecord, Rejection> {
        crate::rejection::decode_object(body)
    }

    /// A typed constructor's fields: `op` on `key`.
    fn typed(op: &str, key: &ItemKey) -> RawRecord {
        RawRecord {
            op: Some(Value::from(op)),
            key: Some(Value::Object(key.json().clone())),
            ..RawRecord::default()
        }
    }
}

/// A value for a record field, or `invalid_values` when it cannot be serialized.
fn json_of<T: Serialize + ?Sized>(value: &T) -> Result<Value, Rejection> {
    serde_json::to_value(value).map_err(|e| {
        reject(
            RejectionCode::InvalidValues,
            format!("a value cannot be serialized: {e}"),
        )
    })
}

impl Document {
    /// Append `values` (a sequence) to the list at `path`; with `unique`, only those the list
    /// does not hold yet.
    pub fn list_append_record<T: Serialize + ?Sized>(
        &self,
        key: &ItemKey,
        path: &str,
        values: &T,
        unique: bool,
    ) -> Result<DocumentRecord, Rejection> {
        let mut raw = RawRecord::typed("list_append", key);
        raw.path = Some(Value::from(path));
        raw.values = Some(json_of(values)?);
        raw.unique = Some(Value::Bool(unique));
        validate(raw, &self.config)
    }

    /// Remove one occurrence of `value` from the list at `path`.
    pub fn list_remove_record<T: Serialize + ?Sized>(
        &self,
        key: &ItemKey,
        path: &str,
        value: &T,
    ) -> Result<DocumentRecord, Rejection> {
        let mut raw = RawRecord::typed("list_remove", key);
        raw.path = Some(Value::from(path));
        raw.value = Some(json_of(value)?);
        validate(raw, &self.config)
    }

    /// Add `values` (strings or numbers) to the set at `path`.
    pub fn set_add_record<T: Serialize + ?Sized>(
        &self,
        key: &ItemKey,
        path: &str,
        values: &T,
    ) -> Result<DocumentRecord, Rejection> {
        self.set_record("set_add", key, path, values)
    }

    /// Remove `values` from the set at `path`.
    pub fn set_remove_record<T: Serialize + ?Sized>(
        &self,
        key: &ItemKey,
        path: &str,
        values: &T,
    ) -> Result<DocumentRecord, Rejection> {
        self.set_record("set_remove", key, path, values)
    }

    fn set_record<T: Serialize + ?Sized>(
        &self,
        op: &str,
        key: &ItemKey,
        path: &str,
        values: &T,
    ) -> Result<DocumentRecord, Rejection> {
        let mut raw = RawRecord::typed(op, key);
        raw.path = Some(Value::from(path));
        raw.values = Some(json_of(values)?);
        validate(raw, &self.config)
    }

    /// Replace the whole document with `document` (a map or struct), only over
    /// `expected_version` when given (`Some(0)`: no document yet).
    pub fn replace_record<T: Serialize + ?Sized>(
        &self,
        key: &ItemKey,
        document: &T,
        expected_version: Option<u64>,
    ) -> Result<DocumentRecord, Rejection> {
        let mut raw = RawRecord::typed("replace", key);
        raw.document = Some(json_of(document)?);
        raw.expected_version = expected_version.map(Value::from);
        validate(raw, &self.config)
    }
}

fn reject(code: RejectionCode, message: impl Into<String>) -> Rejection {
    Rejection::new(code, message)
}

/// Validate a decoded record under `config`.
pub(crate) fn validate(
    raw: RawRecord,
    config: &DocumentConfig,
) -> Result<DocumentRecord, Rejection> {
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
    Ok(DocumentRecord {
        key,
        op,
        token: None,
    })
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
    let item: Item = crate::ddb::item::json_to_item(&stored)
        .map_err(|e| reject(RejectionCode::InvalidNumber, e.to_string()))?;
    let size = item_size(&item) + config.protocol_bytes();
    if size > MAX_ITEM_BYTES {
        return Err(reject(
            RejectionCode::ItemTooLarge,
            format!(
                "the stored item would be {size} bytes with the protocol's attributes; \
                 DynamoDB's limit is {MAX_ITEM_BYTES}"
            ),
        ));
    }
    Ok(item)
}

#[cfg(test)]
mod tests;
