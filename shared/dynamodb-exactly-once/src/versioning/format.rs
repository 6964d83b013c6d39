//! Versioning's stored format: the names of the attributes its latest and history tables carry
//! (what an operator's query or a user's item shows).

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
