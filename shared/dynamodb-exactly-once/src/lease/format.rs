//! The lease's stored format: the names of the lock item's attributes (what an operator's query
//! shows).

/// The lock item's key attribute.
pub const ATTR_LOCK_ID: &str = "LockId";
/// The holder's name.
pub(crate) const ATTR_OWNER: &str = "Owner";
/// Random record version, new with every acquisition, heartbeat and release.
pub(crate) const ATTR_RECORD_VERSION: &str = "RecordVersion";
/// The fencing token of the latest acquisition (a number that only grows).
pub(crate) const ATTR_FENCING_TOKEN: &str = "FencingToken";
/// The holder's lease duration in milliseconds.
pub(crate) const ATTR_LEASE_MS: &str = "LeaseMs";
/// `true` once the holder released the lock.
pub(crate) const ATTR_RELEASED: &str = "Released";
