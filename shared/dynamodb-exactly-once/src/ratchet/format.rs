//! The ratchet's stored format: the names of the attributes and the values its items carry
//! (what an operator's query or a user's item shows). The user's attribute names are
//! configurable ([`RatchetConfig`](super::RatchetConfig)); these are their defaults and the
//! names that are not.

/// Default name of the timestamp attribute.
pub(crate) const DEFAULT_TS_ATTRIBUTE: &str = "Timestamp";
/// Default name of the tombstone flag.
pub(crate) const DEFAULT_DELETED_ATTRIBUTE: &str = "Deleted";
/// Default name of the TTL attribute (epoch seconds; enable TTL on it in the table).
pub(crate) const DEFAULT_TTL_ATTRIBUTE: &str = "TTL";
/// Default name of the tie-break attribute.
pub(crate) const DEFAULT_TIE_BREAK_ATTRIBUTE: &str = "TieBreak";
/// The layout marker attribute (S): a digest of the protocol attribute names an item was
/// written under; absent under the default names.
pub(crate) const LAYOUT_ATTRIBUTE: &str = "_rtL";
/// History table: partition key, the item's canonical key, e.g. `{"PK":"u1","SK":"a"}` (S).
pub const HISTORY_KEY_ATTRIBUTE: &str = "ItemKey";
/// History table: sort key, [`history_sort_key`](super::history_sort_key) of the record's `(ts, tie-break)` (S).
pub const HISTORY_SORT_ATTRIBUTE: &str = "RecordVersion";
/// History row: the record's `ts` (N, or S above `u64`: see [`super::Ts`]).
pub(crate) const HISTORY_TS_ATTRIBUTE: &str = "Timestamp";
/// History row: the record's tie-break token (S).
pub(crate) const HISTORY_TIE_BREAK_ATTRIBUTE: &str = "TieBreak";
/// History row: `put` or `delete` (S).
pub(crate) const HISTORY_OP_ATTRIBUTE: &str = "Op";
/// History row: the put's item as the latest table stores it (M); absent for a delete.
pub(crate) const HISTORY_ITEM_ATTRIBUTE: &str = "Item";
/// Token of a delete: greater than every put token.
pub(crate) const DELETE_TOKEN: &str = "1";
/// Prefix of a put token.
pub(crate) const PUT_TOKEN_PREFIX: &str = "0";
/// The ledger item's version attribute.
pub(crate) const VERSION_ATTRIBUTE: &str = "LedgerVersion";
/// Prefix of a lifetime's promise attribute (`Lifetime_<seconds>`: epoch s).
pub(crate) const LIFETIME_PREFIX: &str = "Lifetime_";
