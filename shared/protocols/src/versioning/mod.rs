//! Versioned writes: the latest version of each item in one table, every version in a history
//! table, both always in agreement.
//!
//! # Invariant
//!
//! For every item key, the history table holds exactly the versions `1..=n` (partition key
//! [`HISTORY_KEY`] = the item's canonical key, sort key [`HISTORY_VERSION`] = the version
//! number), each written once and never changed, and the latest table holds version `n`: the
//! same content as history row `n` (a *tombstone* when `n` is a delete). This holds after every
//! crash schedule, lost response, SDK retry and race between writers: a version number is never
//! skipped, never used twice and never lost.
//!
//! Every change (create, update, delete, restore of version `v` as a new version) moves an item
//! from version `n` to `n + 1`, conditioned on the version the caller read (optimistic
//! concurrency): a lost race is the outcome [`VersionOutcome::Conflict`] with the current
//! version, never an error and never a silent overwrite. Every change names the version it
//! expects (a create: none, or the tombstone's for [`Change::recreate`]), so the version it
//! writes is known before it is sent: that is what makes the landed check below exact.
//!
//! # One transaction per change
//!
//! Each change is **one `TransactWriteItems`** with two `Put`s:
//!
//! ```text
//! Put latest   item + _version = n+1   if  _version = n   (the guard of the operation, ALL_OLD)
//! Put history  (key, n+1) row          if  attribute_not_exists(Version)
//! ```
//!
//! Why not two ordered writes? History first, then latest: a crash in between leaves history
//! one version ahead of latest; the next writer of version `n + 1` fails on the history row
//! forever unless a repair protocol rolls it forward, and readers see a version that never
//! became current. Latest first, then history: a crash leaves a current version that history
//! never records. Either order needs repair and lets readers see the two tables disagree; the
//! transaction is all-or-nothing and serialised against every other write of both rows, so
//! there is nothing to repair and no window.
//!
//! # Lost responses
//!
//! A response lost after DynamoDB applied the transaction must not turn into a second version:
//!
//! * The request carries a `ClientRequestToken` derived deterministically from (latest table,
//!   history table, key, new version, SHA-256 of the history row's content, which includes the
//!   write id): the SDK's retry of the same request is recognised by DynamoDB as the same
//!   transaction (within its 10-minute idempotency window) and answered with success without
//!   being applied twice.
//! * When a retry still finds the version moved (the window expired, or a redelivered message
//!   was turned into a new [`Change`] with the same write id, hence another token), the history
//!   row of the version this change would have written is read: if its `_writeId` is this change's, the
//!   write landed and the outcome is [`VersionOutcome::Written`]; otherwise someone else's did
//!   and the outcome is a conflict. The write id is random per [`Change`] unless the caller sets
//!   one ([`Change::with_write_id`], e.g. a message id), which makes redeliveries idempotent too.
//!
//! # Write cost
//!
//! Transactional writes cost twice the units of plain writes: a change costs
//! `2 × (⌈latest item / 1 KB⌉ + ⌈history row / 1 KB⌉)` write units, i.e. **4 WCU** for an item
//! under 1 KB (a plain `PutItem` would cost 1), in one request. A conflict whose version moved
//! past the expected one adds one strongly consistent `GetItem` of a history row (the landed
//! check); a restore adds one `GetItem` of the restored version. Reads of the latest table and
//! of history are plain `GetItem` / `Query`.
//!
//! # Failure modes
//!
//! * Refused or failed call (throttling, network, 5xx): nothing was applied, or (lost response)
//!   everything was; [`StoreError`](crate::StoreError) says whether a retry helps, and retrying
//!   the same [`Change`] is safe.
//! * `TransactionConflict` (another transaction on the same rows) and
//!   `TransactionInProgress`: retried with jittered backoff, then
//!   [`StoreError::Contention`](crate::StoreError::Contention) (transient).
//! * Invalid input (a reserved attribute such as `_version`, an item attribute that disagrees
//!   with the key, an item too large for its history row): refused when the [`Change`] is built,
//!   as a [`Rejection`](crate::Rejection), before any call.
//! * A history row exists for a version the latest table never reached (only possible if
//!   something outside this protocol wrote history):
//!   [`StoreError::Inconsistent`](crate::StoreError::Inconsistent) (fatal).
//!
//! Deleted items keep a tombstone in the latest table (key, `_version`, `_deleted = true`, no
//! TTL) so that a later [`Change::recreate`] or restore continues the same version sequence
//! instead of reusing numbers.
//!
//! ```no_run
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use dynamodb_exactly_once::ddb::ItemKey;
//! use dynamodb_exactly_once::versioning::{Change, VersionOutcome, Versioning, VersioningConfig};
//! use serde_json::json;
//!
//! let docs = Versioning::try_new(client, VersioningConfig::new("Docs", "DocsHistory"))?;
//! let key = ItemKey::from_json(&json!({"PK": "doc#1"}))?;
//! docs.apply(&Change::create(&key, json!({"title": "draft"}))?).await?; // version 1
//! docs.apply(&Change::update(&key, 1, json!({"title": "final"}))?).await?; // version 2
//! let stale = Change::update(&key, 1, json!({"title": "lost race"}))?;
//! assert_eq!(docs.apply(&stale).await?, VersionOutcome::Conflict { current: Some(2) });
//! docs.apply(&Change::restore(&key, 2, 1)).await?; // version 3 = version 1's content
//! let page = docs.history(&key, 10, None).await?; // versions 3, 2, 1
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! * `change`: a change, validated when built (reserved names, key, sizes); its write id,
//!   content hash and request token.
//! * `write`: the transaction, its cancellation reasons, the landed check ([`Versioning::apply`]).
//! * `read`: the latest version, one version, history pages newest first.

mod change;
mod read;
mod write;

use aws_sdk_dynamodb::Client;

use crate::config::ConfigError;

pub use change::{Change, ChangeOp};
pub use read::{HistoryEntry, HistoryOp, HistoryPage, Latest, VersionedItem};
pub use write::VersionOutcome;

/// Latest table: the item's version number (N).
pub const ATTR_VERSION: &str = "_version";
/// Latest table: `true` on the tombstone of a deleted item (BOOL).
pub const ATTR_DELETED: &str = "_deleted";
/// Both tables: the write id of the change that made this version (S).
pub const ATTR_WRITE_ID: &str = "_writeId";
/// Both tables: when the change was made, epoch milliseconds (N).
pub const ATTR_WRITTEN_AT: &str = "_writtenAt";
/// History table: the operation (`create`, `update`, `delete`, `restore`) (S).
pub const ATTR_OP: &str = "_op";
/// History table: the item's attributes, key included (M); absent for a delete.
pub const ATTR_ITEM: &str = "_item";
/// History table: the version a restore copied (N).
pub const ATTR_RESTORED_FROM: &str = "_restoredFrom";
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

/// The tables of the versioning protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersioningConfig {
    /// The latest table (the item's own key schema).
    pub table: String,
    /// The history table ([`HISTORY_KEY`] (S) + [`HISTORY_VERSION`] (N)).
    pub history_table: String,
}

impl VersioningConfig {
    /// The two tables.
    pub fn new(table: impl Into<String>, history_table: impl Into<String>) -> Self {
        VersioningConfig {
            table: table.into(),
            history_table: history_table.into(),
        }
    }

    /// Both tables named, and distinct.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.table.is_empty() {
            return Err(ConfigError::new("table", "must not be empty"));
        }
        if self.history_table.is_empty() {
            return Err(ConfigError::new("history_table", "must not be empty"));
        }
        if self.table == self.history_table {
            return Err(ConfigError::new(
                "history_table",
                "the latest and the history table must be distinct",
            ));
        }
        Ok(())
    }
}

/// The versioning protocol on a latest table and its history table.
#[doc(alias = "optimistic locking")]
#[doc(alias = "optimistic concurrency")]
#[derive(Debug, Clone)]
pub struct Versioning {
    client: Client,
    config: VersioningConfig,
}

impl Versioning {
    /// The protocol on `config`'s tables, once they are valid ([`VersioningConfig::validate`]).
    pub fn try_new(client: Client, config: VersioningConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Versioning { client, config })
    }

    /// The settings.
    pub fn config(&self) -> &VersioningConfig {
        &self.config
    }
}
