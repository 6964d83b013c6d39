//! The counter's stored format: the default prefix of its attributes, its layout marker, and
//! the names and key values of the journal's items (what an operator's query or a user's item
//! shows).

/// Default prefix of the protocol's own attributes (payloads cannot write names with it).
pub(crate) const DEFAULT_ATTRIBUTE_PREFIX: &str = "ctr_";
/// The prefix marker attribute (S): a digest of the attribute prefix the item's counter state
/// was written under; absent under the default prefix.
pub(crate) const PREFIX_MARKER_ATTRIBUTE: &str = "_ctrL";
/// Default partition key attribute of aggregate items.
pub(crate) const DEFAULT_AGGREGATE_KEY_ATTRIBUTE: &str = "PK";
/// The journal table's partition key (S): the counter item's tag (all keys of one counter
/// item share it, so they land in one stream shard lineage), or a reserved `~` name.
pub const JOURNAL_KEY_ATTRIBUTE: &str = "pk";
/// The journal table's sort key (S): the idempotency key's hash, or a shard id for a
/// checkpoint.
pub const JOURNAL_SORT_ATTRIBUTE: &str = "sk";
/// The journal items' TTL attribute (N, epoch seconds): the table's TTL must be on it.
pub const TTL_ATTRIBUTE: &str = "ttl";
/// The counter item's key (M).
pub(crate) const ITEM_ATTRIBUTE: &str = "k";
/// Counter name → delta (M of N).
pub(crate) const ADD_ATTRIBUTE: &str = "add";
/// Epoch milliseconds of the key's first put (N): a put again leaves it (and the TTL) as it is.
pub(crate) const AT_ATTRIBUTE: &str = "at";
/// Epoch seconds when the record's source received it (N), when known: the roll-up refuses a
/// key that arrived before its counter item forgot inline keys (see `migrate`).
pub(crate) const ARRIVED_ATTRIBUTE: &str = "arr";
/// Partition keys starting with this are the roll-up's own items, never journal keys (those
/// are base64url).
#[cfg(feature = "journal")]
pub(crate) const RESERVED_PREFIX: &str = "~";
/// The partition of the roll-up's dead letters (sort key: `<shard>#<sequence number>`).
#[cfg(feature = "journal")]
pub(crate) const DEAD_PARTITION: &str = "~dead";
