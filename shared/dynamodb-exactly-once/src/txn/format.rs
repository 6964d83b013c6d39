//! The transaction protocol's stored format: the attributes it leaves on a user's items, and
//! the names and key values of its TX table (what an operator's query or a user's item shows).

/// The lock: `txId#attempt` of the transaction holding the item.
pub(crate) const ATTR_LOCK: &str = "_txLock";
/// The item's version token (fresh random value per protocol write).
pub(crate) const ATTR_VERSION_TOKEN: &str = "_txVer";
/// The saved previous image (absent: the item did not exist).
pub(crate) const ATTR_IMAGE: &str = "_txImage";
/// Completion deletes the item.
pub(crate) const ATTR_DELETE: &str = "_txDelete";
/// The item was inserted only to be locked.
pub(crate) const ATTR_TRANSIENT: &str = "_txTransient";
/// Every protocol attribute of an item.
pub const ITEM_PROTOCOL_ATTRIBUTES: [&str; 5] = [
    ATTR_LOCK,
    ATTR_VERSION_TOKEN,
    ATTR_IMAGE,
    ATTR_DELETE,
    ATTR_TRANSIENT,
];
/// Attribute names starting with this are the protocol's (locks, images, versions).
pub(crate) const RESERVED_PREFIX: &str = "_tx";
/// Partition key of the TX table.
pub(crate) const ATTR_TX_ID: &str = "TxId";
/// Sort key of the TX table.
pub(crate) const ATTR_PART: &str = "Part";
/// Sort key value of the header item.
pub(crate) const HEADER_PART: &str = "#";
/// Sort key prefix of request part items.
pub(crate) const REQUEST_PART_PREFIX: &str = "p#";
/// `pending` | `committed` | `rolled_back` | `completed`.
pub(crate) const ATTR_STATE: &str = "State";
/// Incremented by every header write; every header write is conditioned on it.
pub(crate) const ATTR_VERSION: &str = "Version";
/// Restart counter: an attempt aborted by contention or by the sweeper is retried under the
/// same `txId` with the next attempt; locks name `txId#attempt`.
pub(crate) const ATTR_ATTEMPT: &str = "Attempt";
/// The requests (canonical JSON) when they fit in the header.
pub(crate) const ATTR_REQUESTS: &str = "Requests";
/// A fresh random value per creation: names the parts of this record and tells the creator
/// its own header apart from another delivery's.
pub(crate) const ATTR_NONCE: &str = "Nonce";
/// The run that wrote the decision (a random id per coordinator run): a run whose decision
/// write was applied but answered with an error (then retried and refused) still knows it
/// decided, and reports `committed` rather than `duplicate`.
pub(crate) const ATTR_DECIDER: &str = "DecidedBy";
/// SHA-256 (hex) of the canonical requests JSON.
pub(crate) const ATTR_REQUESTS_HASH: &str = "RequestsHash";
/// The message's `issuedAt` (epoch ms), when it had one: tells a record hashed with it from
/// one written before `issuedAt` existed (hashed without it).
pub(crate) const ATTR_ISSUED_AT: &str = "IssuedAt";
/// Number of part items holding the requests when they do not fit.
pub(crate) const ATTR_PARTS: &str = "Parts";
/// A part's chunk of the requests JSON.
pub(crate) const ATTR_CHUNK: &str = "Chunk";
/// At commit: request index → version token its item got from this attempt's lock write.
pub(crate) const ATTR_TOKENS: &str = "Tokens";
/// Why a transaction rolled back: a [`RollbackReason`](super::RollbackReason) (`condition_failed`,
/// `invalid_request`, `conflict`, `abandoned`, `read`).
pub(crate) const ATTR_REASON: &str = "Reason";
/// A final reason the previous release does not know, stored beside `Reason =
/// invalid_request` (a final reason to every release): `item_too_large`. A release that reads
/// only `Reason` sees a final rollback and never restarts the transaction.
pub(crate) const ATTR_REASON_DETAIL: &str = "ReasonDetail";
/// The request whose condition failed (or that DynamoDB rejected).
pub(crate) const ATTR_FAILED_REQUEST: &str = "FailedRequest";
/// Once completed: `committed` or `rolled_back`.
pub(crate) const ATTR_DECISION: &str = "Decision";
/// Sparse GSI hash key, only while the transaction is not completed: `open#<shard>`
/// (`sweep_key`). Completion removes it, so the index holds open transactions only.
pub(crate) const ATTR_SWEEP_KEY: &str = "SweepKey";
/// GSI range key: epoch milliseconds of the creation, of the last restart or of the last
/// heartbeat of the lock phase (the sweeper's and contenders' sign of life; decisions do
/// not change it, so they cost no index write).
pub(crate) const ATTR_LAST_TOUCHED: &str = "LastTouched";
/// TTL (epoch seconds): on part items a backstop; on a completed header the end of its
/// retention (DynamoDB deletes it, without a write by the sweeper).
pub(crate) const ATTR_EXPIRES_AT: &str = "ExpiresAt";
/// The sweeper's index.
pub(crate) const SWEEP_INDEX: &str = "Sweep";
/// Prefix of the sharded `SweepKey` values.
pub(crate) const SWEEP_OPEN_PREFIX: &str = "open#";
/// Suffix of the lock of a request that leaves the item's values as they are (a
/// `ConditionCheck`, a locked read's lock, a `Delete` until its commit): `txId#attempt#k`.
/// Such a lock saves no `_txImage`; its undo removes the protocol attributes (or deletes a
/// transient item). A version that does not know the suffix cannot parse the lock (its
/// attempt is not a number), so it never undoes one (as it would a lock without an image:
/// by deleting the item); see the module docs, "Failure modes".
pub(crate) const KEEP_LOCK_SUFFIX: &str = "#k";
