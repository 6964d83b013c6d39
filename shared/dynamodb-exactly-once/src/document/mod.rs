#![doc = include_str!("../../docs/document.md")]

mod apply;
mod builder;
mod config;
mod format;
mod guarded;
mod layout;
mod path;
mod record;
mod settings;
mod token;
mod values;
mod write;

use aws_sdk_dynamodb::Client;
use serde_json::{Map, Value};

use crate::batch::Outcome;
use crate::ddb::item::item_to_json;
use crate::ddb::{Cost, Item, ItemKey, StoreError};
use crate::rejection::Rejection;

pub use builder::DocumentConfigBuilder;
pub use config::{DocumentConfig, TOKEN_EPOCH};
pub(crate) use format::PREFIX_MARKER_ATTRIBUTE;
pub use path::{AttrPath, Segment};
use record::RawRecord;
pub use record::{DocumentOp, DocumentRecord};
pub use values::SetValues;

/// A guarded write over a version (placeholders `#ver`, `:ver`).
pub(crate) const CONDITION_VERSION_IS: &str = "#ver = :ver";
/// A guarded write over a document that has no version yet.
pub(crate) const CONDITION_NO_VERSION: &str = "attribute_not_exists(#ver)";
/// `set_remove` never creates an item (placeholder `#key`: a key attribute).
pub(crate) const CONDITION_ITEM_EXISTS: &str = "attribute_exists(#key)";

/// The outcome of one document record.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an outcome such as a conflict or a stale record is not an error: handle it"]
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
/// let docs = Document::new(client, DocumentConfig::builder("Documents").build()?);
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
    /// The attribute prefix's marker on every item written.
    marker: layout::PrefixMarker,
    /// The clock of the token epochs.
    clock: crate::ddb::Clock,
    /// The token epoch of the items this writer wrote lately (its first guess of a shape).
    epochs: std::sync::Arc<token::EpochCache>,
}

impl Document {
    /// The protocol on `config`'s table (a built config is valid: its builder checked it).
    pub fn new(client: Client, config: DocumentConfig) -> Self {
        Document {
            client: crate::ddb::conflict::retrying_conflicts(client),
            marker: layout::PrefixMarker::of(&config),
            config,
            clock: crate::ddb::Clock::system(),
            epochs: std::sync::Arc::default(),
        }
    }

    /// The same protocol with another clock for its token epochs (tests move time with it).
    pub fn with_clock(mut self, clock: crate::ddb::Clock) -> Self {
        self.clock = clock;
        self
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
        // One token for every try of this record (and every delivery, when it came from a
        // source): a try whose response was lost is found in the op slots by the next.
        let token = &record.token.clone().unwrap_or_else(token::new_token);
        match &record.op {
            DocumentOp::ListAppend {
                path,
                values,
                unique: false,
            } => self.list_append(key, path, values, token, cost).await,
            DocumentOp::ListAppend { path, values, .. } => {
                self.list_append_unique(key, path, values, token, cost)
                    .await
            }
            DocumentOp::SetAdd { path, values } => {
                self.set_add(key, path, values, token, cost).await
            }
            DocumentOp::SetRemove { path, values } => {
                self.set_remove(key, path, values, token, cost).await
            }
            DocumentOp::ListRemove { path, value } => {
                self.list_remove(key, path, value, token, cost).await
            }
            DocumentOp::Replace {
                document,
                expected_version,
            } => {
                self.replace(key, document, *expected_version, token, cost)
                    .await
            }
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
}
