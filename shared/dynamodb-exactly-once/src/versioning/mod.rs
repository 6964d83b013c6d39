#![doc = include_str!("../../docs/versioning.md")]

mod builder;
mod config;
mod read;
mod revision;
mod write;

use aws_sdk_dynamodb::Client;

pub use builder::VersioningConfigBuilder;
pub use config::VersioningConfig;
pub use read::{HistoryEntry, HistoryOp, HistoryPage, Latest, VersionedItem};
pub use revision::{Revision, RevisionOp};
pub use write::{RmwOutcome, VersionOutcome};

/// Latest table: the item's version number (N).
pub(crate) const ATTR_VERSION: &str = "_version";
/// Latest table: `true` on the tombstone of a deleted item (BOOL).
pub(crate) const ATTR_DELETED: &str = "_deleted";
/// Both tables: the write id of the change that made this version (S).
pub(crate) const ATTR_WRITE_ID: &str = "_writeId";
/// Both tables: when the change was made, epoch milliseconds (N).
pub(crate) const ATTR_WRITTEN_AT: &str = "_writtenAt";
/// History table: the operation (`create`, `update`, `delete`, `restore`) (S).
pub(crate) const ATTR_OP: &str = "_op";
/// History table: the item's attributes, key included (M); absent for a delete.
pub(crate) const ATTR_ITEM: &str = "_item";
/// History table: the version a restore copied (N).
pub(crate) const ATTR_RESTORED_FROM: &str = "_restoredFrom";
/// History table: partition key, the item's canonical key, e.g. `{"PK":"doc#1"}` (S).
pub const HISTORY_KEY: &str = "ItemKey";
/// History table: sort key, the version number (N).
pub const HISTORY_VERSION: &str = "Version";

/// Attributes of the latest table that callers cannot write.
pub const RESERVED_ATTRIBUTES: [&str; 4] =
    [ATTR_VERSION, ATTR_DELETED, ATTR_WRITE_ID, ATTR_WRITTEN_AT];

/// Guard of a create: the item has never existed.
const CONDITION_ABSENT: &str = "attribute_not_exists(#ver)";
/// Guard of an update or delete: the item is live at the expected version.
const CONDITION_LIVE_AT: &str = "#ver = :expected AND attribute_not_exists(#del)";
/// Guard of a create over a tombstone: the item is deleted at the expected version.
const CONDITION_DELETED_AT: &str = "#ver = :expected AND #del = :true";
/// Guard of a restore: the item (live or deleted) is at the expected version.
const CONDITION_AT: &str = "#ver = :expected";
/// Condition of the history row: this version was never written.
const CONDITION_NEW_VERSION: &str = "attribute_not_exists(#hv)";
/// Key condition of a history page (all versions, or those before `:before`).
const KEY_CONDITION_ALL: &str = "#hk = :hk";
/// Key condition of a history page after the first.
const KEY_CONDITION_BEFORE: &str = "#hk = :hk AND #hv < :before";

/// The versioning protocol on a latest table and its history table.
#[doc(alias = "optimistic locking")]
#[doc(alias = "optimistic concurrency")]
#[derive(Debug, Clone)]
pub struct Versioning {
    client: Client,
    config: VersioningConfig,
}

impl Versioning {
    /// The protocol on `config`'s tables (a built config is valid: its builder checked it).
    pub fn new(client: Client, config: VersioningConfig) -> Self {
        Versioning {
            client: crate::ddb::conflict::retrying_conflicts(client),
            config,
        }
    }

    /// The settings.
    pub fn config(&self) -> &VersioningConfig {
        &self.config
    }
}
