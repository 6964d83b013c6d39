//! Reads: the latest version ([`Versioning::get`]), one version ([`Versioning::get_version`])
//! and history pages, newest first ([`Versioning::history`]). All strongly consistent: a reader
//! that saw version `n` never reads an older one afterwards.

use crate::versioning::format::{
    ATTR_DELETED, ATTR_ITEM, ATTR_OP, ATTR_RESTORED_FROM, ATTR_VERSION, ATTR_WRITE_ID,
    ATTR_WRITTEN_AT, HISTORY_KEY, HISTORY_VERSION,
};
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Map, Value};

use super::{Versioning, KEY_CONDITION_ALL, KEY_CONDITION_BEFORE};
use crate::ddb::item::item_to_json;
use crate::ddb::{Item, ItemKey, Placeholders, StoreError};

/// The latest state of an item.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum Latest {
    /// The item was never created.
    Absent,
    /// The item exists.
    Live(VersionedItem),
    /// The item was deleted by version `version` (create or restore continue from it).
    Deleted {
        /// The tombstone's version.
        version: u64,
    },
}

impl Latest {
    /// The current version number (`None`: never created).
    pub fn version(&self) -> Option<u64> {
        match self {
            Latest::Absent => None,
            Latest::Live(item) => Some(item.version),
            Latest::Deleted { version } => Some(*version),
        }
    }

    /// The live item, if any.
    pub fn live(&self) -> Option<&VersionedItem> {
        match self {
            Latest::Live(item) => Some(item),
            _ => None,
        }
    }

    /// Decode a latest-table item (`None`: absent).
    pub(crate) fn from_item(item: Option<Item>) -> Result<Latest, StoreError> {
        let Some(item) = item else {
            return Ok(Latest::Absent);
        };
        let mut json = item_to_json(item)?;
        let version = take_u64(&mut json, ATTR_VERSION)?;
        let write_id = take_string(&mut json, ATTR_WRITE_ID)?;
        let written_at_ms = take_u64(&mut json, ATTR_WRITTEN_AT)?;
        if json.remove(ATTR_DELETED) == Some(Value::Bool(true)) {
            return Ok(Latest::Deleted { version });
        }
        Ok(Latest::Live(VersionedItem {
            version,
            item: json,
            write_id,
            written_at_ms,
        }))
    }
}

/// A live item at its version.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct VersionedItem {
    /// The version number.
    pub version: u64,
    /// The item's attributes (key included; without the protocol's attributes).
    pub item: Map<String, Value>,
    /// The write id of the change that made this version.
    pub write_id: String,
    /// When that change was made (epoch ms).
    pub written_at_ms: u64,
}

impl VersionedItem {
    /// The item's attributes as `T` (an item that does not decode is
    /// [`StoreError::Inconsistent`]).
    pub fn item_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, StoreError> {
        serde_json::from_value(Value::Object(self.item.clone()))
            .map_err(|e| StoreError::Inconsistent(format!("the item does not decode: {e}")))
    }
}

/// What made a version.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryOp {
    /// The item was created.
    Create,
    /// The item was replaced.
    Update,
    /// The item was deleted.
    Delete,
    /// An earlier version's content was written again.
    Restore,
}

impl HistoryOp {
    fn parse(name: &str) -> Option<HistoryOp> {
        match name {
            "create" => Some(HistoryOp::Create),
            "update" => Some(HistoryOp::Update),
            "delete" => Some(HistoryOp::Delete),
            "restore" => Some(HistoryOp::Restore),
            _ => None,
        }
    }
}

/// One row of the history table.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    /// The version number.
    pub version: u64,
    /// What made it.
    pub op: HistoryOp,
    /// The item's attributes at this version (`None` for a delete).
    pub item: Option<Map<String, Value>>,
    /// The write id of the change.
    pub write_id: String,
    /// When the change was made (epoch ms).
    pub written_at_ms: u64,
    /// For a restore: the version whose content it copied.
    pub restored_from: Option<u64>,
}

impl TryFrom<Item> for HistoryEntry {
    type Error = StoreError;

    fn try_from(row: Item) -> Result<Self, StoreError> {
        let mut json = item_to_json(row)?;
        let op_name = take_string(&mut json, ATTR_OP)?;
        let op = HistoryOp::parse(&op_name)
            .ok_or_else(|| StoreError::Inconsistent(format!("unknown history op {op_name:?}")))?;
        let item = match json.remove(ATTR_ITEM) {
            Some(Value::Object(item)) => Some(item),
            None => None,
            Some(other) => {
                return Err(StoreError::Inconsistent(format!(
                    "history `{ATTR_ITEM}` is not a map: {other}"
                )))
            }
        };
        let restored_from = match json.contains_key(ATTR_RESTORED_FROM) {
            true => Some(take_u64(&mut json, ATTR_RESTORED_FROM)?),
            false => None,
        };
        Ok(HistoryEntry {
            version: take_u64(&mut json, HISTORY_VERSION)?,
            op,
            item,
            write_id: take_string(&mut json, ATTR_WRITE_ID)?,
            written_at_ms: take_u64(&mut json, ATTR_WRITTEN_AT)?,
            restored_from,
        })
    }
}

/// One page of an item's history, newest first.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryPage {
    /// Versions, newest first.
    pub entries: Vec<HistoryEntry>,
    /// Pass as `before` for the next (older) page; `None` on the last page.
    pub next: Option<u64>,
}

fn take_u64(json: &mut Map<String, Value>, name: &str) -> Result<u64, StoreError> {
    json.remove(name)
        .and_then(|v| v.as_u64())
        .ok_or_else(|| StoreError::Inconsistent(format!("`{name}` is missing or not a version")))
}

fn take_string(json: &mut Map<String, Value>, name: &str) -> Result<String, StoreError> {
    match json.remove(name) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(StoreError::Inconsistent(format!(
            "`{name}` is missing or not a string"
        ))),
    }
}

impl Versioning {
    /// The latest state of `key` (strongly consistent).
    pub async fn get(&self, key: &ItemKey) -> Result<Latest, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(key.to_item()?))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        Latest::from_item(out.item)
    }

    /// Version `version` of `key` from the history table (strongly consistent).
    pub async fn get_version(
        &self,
        key: &ItemKey,
        version: u64,
    ) -> Result<Option<HistoryEntry>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.config.history_table)
            .key(HISTORY_KEY, AttributeValue::S(key.canonical().to_string()))
            .key(HISTORY_VERSION, AttributeValue::N(version.to_string()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        out.item.map(HistoryEntry::try_from).transpose()
    }

    /// Up to `limit` versions of `key`, newest first, older than `before` when given (the
    /// previous page's [`HistoryPage::next`]).
    pub async fn history(
        &self,
        key: &ItemKey,
        limit: usize,
        before: Option<u64>,
    ) -> Result<HistoryPage, StoreError> {
        let mut p = Placeholders::new("h");
        p.set_name("#hk", HISTORY_KEY)
            .set_value(":hk", AttributeValue::S(key.canonical().to_string()));
        let condition = match before {
            Some(before) => {
                p.set_name("#hv", HISTORY_VERSION)
                    .set_value(":before", AttributeValue::N(before.to_string()));
                KEY_CONDITION_BEFORE
            }
            None => KEY_CONDITION_ALL,
        };
        let (names, values) = p.into_maps();
        let out = self
            .client
            .query()
            .table_name(&self.config.history_table)
            .key_condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .scan_index_forward(false)
            .limit(i32::try_from(limit.max(1)).unwrap_or(i32::MAX))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("Query", e))?;
        let entries = out
            .items
            .unwrap_or_default()
            .into_iter()
            .map(HistoryEntry::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let next = match out.last_evaluated_key {
            Some(_) => entries.last().map(|e| e.version),
            None => None,
        };
        Ok(HistoryPage { entries, next })
    }
}
