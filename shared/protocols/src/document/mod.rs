//! Safe in-place updates of lists and sets inside documents, and version-guarded replaces.
//!
//! A record names an item, an operation and an attribute path (`friends`, `profile.tags`,
//! `lists[2]`): `list_append`, `list_remove` (by value), `set_add`, `set_remove` (string or
//! number sets) or `replace` (the whole document).
//!
//! # Invariant
//!
//! Every applied write changes the document exactly as its record says, **on the state it was
//! decided against**, and the document's version (`doc_version`) grows by exactly one with
//! every applied write:
//!
//! * `set_add` / `set_remove` are idempotent by value (`ADD` / `DELETE`): retries,
//!   redeliveries and concurrent writers converge to the same set. A set is never stored
//!   empty: an operation without elements writes nothing (outcome `unchanged`), and DynamoDB
//!   drops the attribute with its last element. `set_remove` on a missing item writes nothing
//!   (`absent`) instead of creating an empty item.
//! * `list_remove` removes **one element equal to the value, the one it read**: it reads the
//!   list, finds the first index `i` holding the value, and removes `path[i]` guarded by
//!   [`CONDITION_VERSION_IS`] `AND path[i] = :v` (the version it read, and the element). Concurrent removers can never
//!   remove one element twice, and a remover never removes an element it did not see: a lost
//!   race fails the guard, and the item returned by `ALL_OLD` is the fresh read for the next
//!   try (bounded by [`DocumentConfig::backoff`]). A value not in the list is the outcome
//!   `absent`.
//! * `list_append` appends the values in record order, atomically
//!   (`SET p = list_append(if_not_exists(p, :empty), :v)`). With `"unique": true` only values
//!   the list does not hold yet are appended (guard `NOT contains(p, :v)`; on a lost race the
//!   `ALL_OLD` list says which values are still missing), which makes the append idempotent.
//! * `replace` writes the whole document with `PutItem` only over the version it read
//!   ([`CONDITION_VERSION_IS`]); with `expectedVersion` only over that version, otherwise
//!   it is the outcome `conflict`. Without `expectedVersion` a lost race is re-read (from
//!   `ALL_OLD`) and retried, bounded; still losing, it is `conflict`. A replace never
//!   overwrites a change it did not see, and every list or set change bumps the version, so a
//!   replace computed from an old read cannot erase it.
//!
//! # Paths
//!
//! A path is parsed into segments ([`AttrPath`]) and every name is emitted through a
//! placeholder (`#d0.#d1[2]`); record text never enters an expression. A path whose top-level
//! attribute is a key attribute (`key_path`) or starts with the protocol prefix `doc_`
//! (`reserved_path`) is rejected and kept as a dead letter, as is a malformed one
//! (`invalid_path`).
//!
//! # Write cost
//!
//! | operation | reads | write requests |
//! |---|---|---|
//! | `set_add`, `set_remove` | 0 | 1 |
//! | `list_append` | 0 | 1 (unique: + 1 per lost race) |
//! | `list_remove` | 1 consistent `GetItem` (projected on the list and the version) | 1 + 1 per lost race |
//! | `replace` | 1 consistent `GetItem` | 1 + 1 per lost race |
//! | no values, value absent | as above | 0 |
//!
//! A lost race costs one write and no read: the failed write's `ALL_OLD` item is the new read.
//! Each write is billed by the size of the whole item (1 WCU per KB), so keep documents small.
//!
//! # Failure modes
//!
//! * **Lost response** (DynamoDB applied the write, the SDK saw an error and sends it again):
//!   `ADD`/`DELETE` are idempotent. A guarded write (`list_remove`, `replace`) fails its
//!   version guard on the retry — its own write moved the version — so it cannot remove a
//!   second element. To tell its own applied write from another writer's, every guarded write
//!   stores a random token in the slot `doc_op<v mod 4>` of the version `v` it creates (the
//!   other three slots keep the tokens of the three guarded writes before); a failed retry
//!   that finds its token reports `applied`. The answer is exact unless four other guarded
//!   writes of the same item land between the lost response and the retry; then the write is
//!   treated as not applied (at-least-once, like a redelivery).
//! * **Redelivery** (Lambda or SQS delivers an applied record again): set operations and
//!   unique appends are idempotent; `list_remove` finds the value absent when the list held it
//!   once; a replace with `expectedVersion` finds the stored document equal to its own
//!   (`duplicate`) or a newer version (`conflict`). A plain `list_append` appends again, and a
//!   `list_remove` of a value the list holds several times removes another copy: use unique
//!   appends or sets where that matters.
//! * **DynamoDB refuses the update** (`ValidationException`: a path through a missing map or
//!   a non-map, a set operation on a list, a number set element added to a string set):
//!   the record is rejected (`rejected_by_dynamodb`) and kept as a dead letter.
//! * **Contention** beyond the retry bound: `list_remove` and unique appends fail with
//!   [`StoreError::Contention`] (transient: the record is delivered again), `replace` ends in
//!   `conflict`.
//! * **Order**: records of one item are applied in batch order by one task (list operations
//!   do not commute); when one fails transiently, the item's later records are not attempted
//!   and are reported failed with it, so a redelivery replays them in order.
//! * **Deadline**: records not started before the deadline are `Deferred`.
//!
//! # Why a function of its own, not part of the ratchet writer
//!
//! The ratchet replaces whole items and orders them by the producer's timestamp: the newest
//! *version* wins, so it coalesces a batch to one `PutItem` per key. Document operations
//! change parts of an item in place, do not commute (an append then a remove is not a remove
//! then an append) and carry no timestamp: they must be applied one by one in delivery order,
//! several need a read, and their guard is the document's own version. Mixing both on one
//! item would break both invariants (a ratchet put erases list changes; an in-place change
//! moves no timestamp). So the document writer has its own table, its own record format and
//! a role with `GetItem`/`UpdateItem`/`PutItem` on that table only, while the ratchet writer
//! keeps its `PutItem`-only role.
//!
//! # Layout
//!
//! * `config`: settings and the protocol's attribute names.
//! * `path`: attribute paths, parsed and emitted through placeholders.
//! * `record`: parsing and validating a record body.
//! * `values`: list values and set elements (distinct, one spelling per number).
//! * `write`: the unguarded operations (`set_add`, `set_remove`, `list_append`).
//! * `guarded`: the read-guarded operations (`list_remove`, `replace`) and the op slots.
//! * `apply`: the `Protocol` implementation (per-item order, items concurrently).

mod apply;
mod config;
mod guarded;
mod path;
mod record;
mod values;
mod write;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use serde_json::{Map, Value};

use crate::batch::Outcome;
use crate::ddb::item::item_to_json;
use crate::ddb::{Cost, Item, ItemKey, StoreError};
use crate::rejection::Rejection;

pub use config::{
    DocumentConfig, DEFAULT_ATTRIBUTE_PREFIX, DEFAULT_CONCURRENCY, DEFAULT_MAX_RETRIES, OP_SLOTS,
};
pub use path::{AttrPath, Segment, MAX_DEPTH, MAX_INDEX, MAX_PATH_BYTES};
use record::RawRecord;
pub use record::{DocumentOp, DocumentRecord};
pub use values::SetValues;

/// A guarded write over a version (placeholders `#ver`, `:ver`).
pub const CONDITION_VERSION_IS: &str = "#ver = :ver";
/// A guarded write over a document that has no version yet.
pub const CONDITION_NO_VERSION: &str = "attribute_not_exists(#ver)";
/// `set_remove` never creates an item (placeholder `#key`: a key attribute).
pub const CONDITION_ITEM_EXISTS: &str = "attribute_exists(#key)";

/// The outcome of one document record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentOutcome {
    /// Written.
    Applied,
    /// Nothing to write (no values).
    Unchanged,
    /// `list_remove`: the value is not in the list (or there is no list, or no item);
    /// `set_remove`: there is no item.
    Absent,
    /// Unique `list_append`: every value is already in the list; `replace`: the stored
    /// document already is this one.
    Duplicate,
    /// `replace`: the document is at another version than expected (or kept changing).
    Conflict {
        /// The stored version when the replace gave up (`0`: no document).
        current: u64,
    },
}

impl Outcome for DocumentOutcome {
    fn label(&self) -> &'static str {
        match self {
            DocumentOutcome::Applied => "applied",
            DocumentOutcome::Unchanged => "unchanged",
            DocumentOutcome::Absent => "absent",
            DocumentOutcome::Duplicate => "duplicate",
            DocumentOutcome::Conflict { .. } => "conflict",
        }
    }
}

/// The document protocol on one table.
///
/// ```no_run
/// # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use dynamodb_exactly_once::document::{Document, DocumentConfig, DocumentOutcome};
///
/// let docs = Document::try_new(client, DocumentConfig::new("Documents"))?;
/// let add = docs.parse_record(br#"{"op":"list_append","key":{"PK":"u1"},"path":"friends","values":["bob","ann"]}"#)?;
/// let remove = docs.parse_record(br#"{"op":"list_remove","key":{"PK":"u1"},"path":"friends","value":"bob"}"#)?;
/// assert_eq!(docs.write(&add).await?, DocumentOutcome::Applied);
/// assert_eq!(docs.write(&remove).await?, DocumentOutcome::Applied);
/// assert_eq!(docs.write(&remove).await?, DocumentOutcome::Absent); // a redelivery
/// # Ok(())
/// # }
/// ```
#[doc(alias = "optimistic locking")]
#[doc(alias = "list_append")]
#[derive(Debug, Clone)]
pub struct Document {
    client: Client,
    config: DocumentConfig,
}

impl Document {
    /// The protocol on `config.table`.
    pub fn try_new(client: Client, config: DocumentConfig) -> Result<Self, crate::ConfigError> {
        config.validate()?;
        Ok(Document { client, config })
    }

    /// The settings.
    pub fn config(&self) -> &DocumentConfig {
        &self.config
    }

    /// Parse a record body (see the module docs for the format).
    pub fn parse_record(&self, body: &[u8]) -> Result<DocumentRecord, Rejection> {
        record::validate(RawRecord::decode(body)?, &self.config)
    }

    /// Apply one record (no batch): one write, or a read and one write per try.
    pub async fn write(&self, record: &DocumentRecord) -> Result<DocumentOutcome, StoreError> {
        self.write_counted(record, &Cost::default()).await
    }

    async fn write_counted(
        &self,
        record: &DocumentRecord,
        cost: &Cost,
    ) -> Result<DocumentOutcome, StoreError> {
        let key = &record.key;
        match &record.op {
            DocumentOp::ListAppend {
                path,
                values,
                unique: false,
            } => self.list_append(key, path, values, cost).await,
            DocumentOp::ListAppend { path, values, .. } => {
                self.list_append_unique(key, path, values, cost).await
            }
            DocumentOp::SetAdd { path, values } => self.set_add(key, path, values, cost).await,
            DocumentOp::SetRemove { path, values } => {
                self.set_remove(key, path, values, cost).await
            }
            DocumentOp::ListRemove { path, value } => {
                self.list_remove(key, path, value, cost).await
            }
            DocumentOp::Replace {
                document,
                expected_version,
            } => self.replace(key, document, *expected_version, cost).await,
        }
    }

    /// Read a document (consistent) as `T`; `None` when absent. The protocol's own attributes
    /// are in the item too: `T` ignores them unless it names them.
    pub async fn get<T: serde::de::DeserializeOwned>(
        &self,
        key: &ItemKey,
    ) -> Result<Option<T>, StoreError> {
        self.read(key, None)
            .await?
            .map(crate::ddb::read::decode)
            .transpose()
    }

    /// Read a document (consistent) as JSON, protocol attributes included; `None` when absent.
    pub async fn get_json(&self, key: &ItemKey) -> Result<Option<Map<String, Value>>, StoreError> {
        Ok(self.read(key, None).await?.map(item_to_json).transpose()?)
    }

    /// The version of a stored item (`0`: none).
    fn version_of(&self, item: &Item) -> u64 {
        item.get(&self.config.version_attribute())
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// Whether `item` holds `token` in one of its op slots.
    fn holds_token(&self, item: &Item, token: &str) -> bool {
        self.config
            .op_slots()
            .any(|slot| matches!(item.get(&slot), Some(AttributeValue::S(t)) if t == token))
    }
}
