#![doc = include_str!("../../docs/versioning.md")]

mod builder;
mod config;
mod format;
mod read;
mod revision;
mod write;

use aws_sdk_dynamodb::Client;

pub use builder::VersioningConfigBuilder;
pub use config::VersioningConfig;
pub use format::{HISTORY_KEY, HISTORY_VERSION, RESERVED_ATTRIBUTES};
pub use read::{HistoryEntry, HistoryOp, HistoryPage, Latest, VersionedItem};
pub use revision::{Revision, RevisionOp};
pub use write::{RmwOutcome, VersionOutcome};

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
