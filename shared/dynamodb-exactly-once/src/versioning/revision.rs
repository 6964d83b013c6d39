//! A change to a versioned item, validated when it is built: nothing invalid reaches DynamoDB.
//!
//! A [`Revision`] carries its **write id** (random, or the caller's) and the time it was made, so
//! applying the same `Revision` value again (after an error) sends the same request: same content,
//! same request token, and the landed check recognises its own history row.

use crate::ddb::clock::epoch_millis;
use crate::ddb::item::{canonical_json, item_size, json_to_item, Item, ItemKey, MAX_ITEM_BYTES};
use crate::rejection::{Rejection, RejectionCode};
use crate::versioning::format::{
    ATTR_DELETED, ATTR_ITEM, ATTR_OP, ATTR_RESTORED_FROM, ATTR_VERSION, ATTR_WRITE_ID,
    ATTR_WRITTEN_AT, HISTORY_KEY, HISTORY_VERSION, RESERVED_ATTRIBUTES,
};
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// Longest accepted write id (characters).
pub(super) const MAX_WRITE_ID_CHARS: usize = 256;
/// `ClientRequestToken`'s maximum length.
const TOKEN_CHARS: usize = 36;

/// What a change does. Every operation writes version `n + 1`.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum RevisionOp {
    /// Create the item: it never existed (`deleted_at: None`, version 1), or its tombstone is
    /// at version `deleted_at` (version `deleted_at + 1`).
    Create {
        /// The tombstone's version when the item was deleted.
        deleted_at: Option<u64>,
        /// The item's attributes (the key attributes are added).
        item: Map<String, Value>,
    },
    /// Replace the live item at version `expected`.
    Update {
        /// The version the caller read.
        expected: u64,
        /// The new attributes (the whole item; the key attributes are added).
        item: Map<String, Value>,
    },
    /// Delete the live item at version `expected` (a tombstone keeps the version number).
    Delete {
        /// The version the caller read.
        expected: u64,
    },
    /// Write version `from`'s content as a new version over the item at `expected` (live or
    /// deleted).
    Restore {
        /// The version the caller read.
        expected: u64,
        /// The version whose content is restored.
        from: u64,
    },
}

impl RevisionOp {
    /// `create`, `update`, `delete` or `restore` (the history row's `_op`).
    pub fn name(&self) -> &'static str {
        match self {
            RevisionOp::Create { .. } => "create",
            RevisionOp::Update { .. } => "update",
            RevisionOp::Delete { .. } => "delete",
            RevisionOp::Restore { .. } => "restore",
        }
    }
}

/// A validated change of one item.
#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    key: ItemKey,
    op: RevisionOp,
    write_id: String,
    written_at_ms: u64,
}

impl Revision {
    /// Create an item that never existed (version 1).
    pub fn create(key: &ItemKey, item: Value) -> Result<Revision, Rejection> {
        let item = stored_item(key, item)?;
        let deleted_at = None;
        Ok(Revision::new(key, RevisionOp::Create { deleted_at, item }))
    }

    /// Create a deleted item again over its tombstone at version `deleted_at` (the version
    /// sequence continues: the new version is `deleted_at + 1`).
    pub fn recreate(key: &ItemKey, deleted_at: u64, item: Value) -> Result<Revision, Rejection> {
        let item = stored_item(key, item)?;
        let deleted_at = Some(deleted_at);
        Ok(Revision::new(key, RevisionOp::Create { deleted_at, item }))
    }

    /// Replace the item at version `expected` with `item`.
    pub fn update(key: &ItemKey, expected: u64, item: Value) -> Result<Revision, Rejection> {
        let item = stored_item(key, item)?;
        Ok(Revision::new(key, RevisionOp::Update { expected, item }))
    }

    /// Delete the item at version `expected`.
    pub fn delete(key: &ItemKey, expected: u64) -> Revision {
        Revision::new(key, RevisionOp::Delete { expected })
    }

    /// Write version `from`'s content as the version after `expected`.
    pub fn restore(key: &ItemKey, expected: u64, from: u64) -> Revision {
        Revision::new(key, RevisionOp::Restore { expected, from })
    }

    fn new(key: &ItemKey, op: RevisionOp) -> Revision {
        Revision {
            key: key.clone(),
            op,
            write_id: format!("{:032x}", rand::random::<u128>()),
            written_at_ms: epoch_millis(),
        }
    }

    /// Use the caller's write id (e.g. a message id) so that applying a redelivered change is
    /// recognised as the same write.
    pub fn with_write_id(mut self, write_id: impl Into<String>) -> Result<Revision, Rejection> {
        let write_id = write_id.into();
        if write_id.is_empty() || write_id.chars().count() > MAX_WRITE_ID_CHARS {
            return Err(Rejection::new(
                RejectionCode::InvalidWriteId,
                format!("a write id must have 1 to {MAX_WRITE_ID_CHARS} characters"),
            ));
        }
        self.write_id = write_id;
        Ok(self)
    }

    /// Record another time for the change (epoch ms; tests, replays).
    pub fn with_written_at(mut self, written_at_ms: u64) -> Revision {
        self.written_at_ms = written_at_ms;
        self
    }

    /// The item key.
    pub fn key(&self) -> &ItemKey {
        &self.key
    }

    /// What the change does.
    pub fn op(&self) -> &RevisionOp {
        &self.op
    }

    /// The write id stored with the version this change writes.
    pub fn write_id(&self) -> &str {
        &self.write_id
    }

    /// When the change was made (epoch ms).
    pub fn written_at_ms(&self) -> u64 {
        self.written_at_ms
    }

    /// The latest table's item of version `version` (`item`: `None` for a tombstone).
    pub(crate) fn latest_item(
        &self,
        version: u64,
        item: Option<&Map<String, Value>>,
    ) -> Result<Item, serde_dynamo::Error> {
        let mut out: Item = match item {
            Some(item) => json_to_item(item).map_err(serde::ser::Error::custom)?,
            None => {
                let mut tombstone = self.key.to_item()?;
                tombstone.insert(ATTR_DELETED.into(), AttributeValue::Bool(true));
                tombstone
            }
        };
        out.insert(ATTR_VERSION.into(), number(version));
        out.insert(
            ATTR_WRITE_ID.into(),
            AttributeValue::S(self.write_id.clone()),
        );
        out.insert(ATTR_WRITTEN_AT.into(), number(self.written_at_ms));
        Ok(out)
    }

    /// The history row of version `version` (`item`: `None` for a delete).
    pub(crate) fn history_row(
        &self,
        version: u64,
        item: Option<&Map<String, Value>>,
    ) -> Result<Item, serde_dynamo::Error> {
        let mut row = Item::new();
        row.insert(HISTORY_KEY.into(), self.history_key());
        row.insert(HISTORY_VERSION.into(), number(version));
        row.insert(ATTR_OP.into(), AttributeValue::S(self.op.name().into()));
        if let Some(item) = item {
            row.insert(
                ATTR_ITEM.into(),
                AttributeValue::M(json_to_item(item).map_err(serde::ser::Error::custom)?),
            );
        }
        if let RevisionOp::Restore { from, .. } = self.op {
            row.insert(ATTR_RESTORED_FROM.into(), number(from));
        }
        row.insert(
            ATTR_WRITE_ID.into(),
            AttributeValue::S(self.write_id.clone()),
        );
        row.insert(ATTR_WRITTEN_AT.into(), number(self.written_at_ms));
        Ok(row)
    }

    /// The history table's partition key value: the canonical key.
    pub(crate) fn history_key(&self) -> AttributeValue {
        AttributeValue::S(self.key.canonical().to_string())
    }

    /// SHA-256 (hex) of everything the history row of this change holds except its key.
    pub(crate) fn content_hash(&self, item: Option<&Map<String, Value>>) -> String {
        let restored_from = match self.op {
            RevisionOp::Restore { from, .. } => Some(from),
            _ => None,
        };
        let content = json!({
            "op": self.op.name(),
            "item": item,
            "restoredFrom": restored_from,
            "writeId": self.write_id,
            "writtenAt": self.written_at_ms,
        });
        hex::encode(Sha256::digest(canonical_json(&content).as_bytes()))
    }

    /// The `ClientRequestToken` of the transaction writing `version`: deterministic in (tables,
    /// key, version, content hash); `attempt` > 0 after a cancelled try (a new request).
    pub(crate) fn request_token(
        &self,
        tables: (&str, &str),
        version: u64,
        content_hash: &str,
        attempt: usize,
    ) -> String {
        let mut hasher = Sha256::new();
        for part in [tables.0, tables.1, self.key.canonical(), content_hash] {
            hasher.update(part.as_bytes());
            hasher.update([0u8]);
        }
        hasher.update(version.to_be_bytes());
        if attempt > 0 {
            hasher.update(attempt.to_be_bytes());
        }
        let mut token = hex::encode(hasher.finalize());
        token.truncate(TOKEN_CHARS);
        token
    }
}

fn number(n: u64) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

/// The caller's item plus the key attributes, checked: an object, no protocol attribute, key
/// attributes that agree with the key, and both stored forms within DynamoDB's item size.
fn stored_item(key: &ItemKey, item: Value) -> Result<Map<String, Value>, Rejection> {
    key.check_canonical_fits_partition_key()
        .map_err(|m| Rejection::new(RejectionCode::InvalidKey, m))?;
    let Value::Object(mut fields) = item else {
        return Err(Rejection::new(
            RejectionCode::InvalidItem,
            "a versioned item must be a JSON object",
        ));
    };
    for (name, value) in fields.iter().chain(key.json()) {
        if RESERVED_ATTRIBUTES.contains(&name.as_str()) {
            return Err(Rejection::new(
                RejectionCode::ReservedAttribute,
                format!(
                    "`{name}` is written by the versioning protocol and cannot be set by a caller"
                ),
            ));
        }
        if key.json().get(name).is_some_and(|k| k != value) {
            return Err(Rejection::new(
                RejectionCode::KeyMismatch,
                format!("item attribute `{name}` disagrees with the key"),
            ));
        }
    }
    for (name, value) in key.json() {
        fields.insert(name.clone(), value.clone());
    }
    check_size(key, &fields)?;
    Ok(fields)
}

/// Both stored forms (latest item, history row) must fit in one item, at the largest version.
fn check_size(key: &ItemKey, item: &Map<String, Value>) -> Result<(), Rejection> {
    let probe = Revision {
        key: key.clone(),
        op: RevisionOp::Restore {
            expected: u64::MAX,
            from: u64::MAX,
        },
        write_id: "w".repeat(MAX_WRITE_ID_CHARS),
        written_at_ms: u64::MAX,
    };
    let invalid = |e: serde_dynamo::Error| {
        Rejection::new(
            RejectionCode::InvalidItem,
            format!("the item cannot be marshalled: {e}"),
        )
    };
    let latest = probe.latest_item(u64::MAX, Some(item)).map_err(invalid)?;
    let row = probe.history_row(u64::MAX, Some(item)).map_err(invalid)?;
    let size = item_size(&latest).max(item_size(&row));
    if size > MAX_ITEM_BYTES {
        return Err(Rejection::new(
            RejectionCode::ItemTooLarge,
            format!(
                "the stored item or its history row would be {size} bytes; DynamoDB's limit is {MAX_ITEM_BYTES}"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ItemKey {
        ItemKey::from_json(&json!({"PK": "doc#1"})).expect("key")
    }

    fn code(result: Result<Revision, Rejection>) -> String {
        match result {
            Ok(_) => "ok".into(),
            Err(r) => r.code.to_string(),
        }
    }

    #[test]
    fn invalid_items_are_refused_with_their_code() {
        assert_eq!(code(Revision::create(&key(), json!({"title": "a"}))), "ok");
        assert_eq!(code(Revision::create(&key(), json!([1]))), "invalid_item");
        assert_eq!(
            code(Revision::update(&key(), 1, json!({"_version": 7}))),
            "reserved_attribute"
        );
        assert_eq!(
            code(Revision::create(&key(), json!({"PK": "doc#2"}))),
            "key_mismatch"
        );
        let big = json!({"blob": "x".repeat(MAX_ITEM_BYTES)});
        assert_eq!(code(Revision::create(&key(), big)), "item_too_large");
        assert_eq!(
            code(Revision::delete(&key(), 1).with_write_id("")),
            "invalid_write_id"
        );
    }

    #[test]
    fn a_reserved_name_is_named_in_the_message() {
        let err = Revision::create(&key(), json!({"_deleted": false})).expect_err("reserved");
        assert!(err.message.contains("`_deleted`"), "{err}");
    }

    #[test]
    fn the_token_is_deterministic_and_covers_the_content() {
        let a = Revision::update(&key(), 1, json!({"v": 1}))
            .and_then(|c| c.with_write_id("w1"))
            .expect("valid")
            .with_written_at(5);
        let item = match a.op() {
            RevisionOp::Update { item, .. } => item.clone(),
            _ => Map::new(),
        };
        let hash = a.content_hash(Some(&item));
        let token = a.request_token(("T", "H"), 2, &hash, 0);
        assert_eq!(token, a.clone().request_token(("T", "H"), 2, &hash, 0));
        assert_eq!(token.len(), 36);
        assert_ne!(token, a.request_token(("T", "H"), 3, &hash, 0));
        assert_ne!(token, a.request_token(("T", "H"), 2, &hash, 1));
        let other_writer = a.clone().with_write_id("w2").expect("valid");
        assert_ne!(hash, other_writer.content_hash(Some(&item)));
    }
}
