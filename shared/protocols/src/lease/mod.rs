//! A fenced lease lock: at most one holder at a time, judged without trusting clocks across
//! machines, and a fencing token that lets any conditional write refuse a stale holder.
//!
//! # Invariants
//!
//! 1. **One holder at a time.** A lock item (key `LockId`) names its holder (`Owner`), a
//!    random record version (`RecordVersion`, new with every acquisition, heartbeat and
//!    release), the holder's lease duration (`LeaseMs`) and whether it was released. Every
//!    change is one conditional write: acquiring a free lock requires it absent or released
//!    ([`CONDITION_FREE`]); heartbeats and releases require the holder's token and no release
//!    ([`CONDITION_HOLDING`]); a **takeover** requires the record version the contender saw
//!    ([`CONDITION_UNCHANGED`]).
//! 2. **No clock is compared across machines.** As in the AWS DynamoDB lock client, a
//!    contender that finds the lock held remembers its record version and takes over only
//!    after seeing that version **unchanged for a full lease duration on its own monotonic
//!    clock** (`tokio::time::Instant`). The item stores no timestamps. The holder counts its
//!    lease from the moment it *sent* its last successful acquire or heartbeat
//!    ([`Holding::remaining`]); the contender counts from the moment its read *returned*, which
//!    is after that write was applied:
//!
//!    ```text
//!    holder    send heartbeat ─► applied (version v7)        holder's lease ends
//!              |◄────────────────── lease ──────────────────►|
//!    contender          read returns v7 |◄──────────── lease ────────────►| read v7 again,
//!                                                                          takeover IF version = v7
//!    ```
//!
//!    So a takeover always happens after the holder's own lease ended, whatever the offset
//!    between the two machines' clocks; only their *rates* must agree within the margin the
//!    holder keeps (stop working some time before `remaining()` reaches zero; heartbeat every
//!    third of the lease).
//! 3. **Fencing tokens strictly increase.** `FencingToken` is a counter in the lock item,
//!    incremented by the acquiring conditional write itself
//!    (`SET #tok = if_not_exists(#tok, :zero) + :one`), so two acquisitions never get the same
//!    token and a later one always gets a greater one. Releases keep the item (it is never
//!    deleted: the counter would restart). A holder that was paused past its lease and still
//!    believes it holds the lock cannot be stopped by the lock; its writes are stopped by the
//!    resource: pass the token with every write, and let the resource refuse tokens older than
//!    the newest it has seen. The [`crate::ratchet`] does exactly that with `ts` = the token
//!    (or [`Holding::fenced_ts`] for several writes per holding); any other conditional write
//!    can add `attribute_not_exists(#fence) OR #fence <= :token` and `SET #fence = :token`.
//!    A new holder should make one fenced write as soon as it acquires, so that the resource
//!    knows its token before the stale holder wakes up.
//!
//! # Write cost
//!
//! | step | reads | write requests |
//! |---|---|---|
//! | acquire a free lock | 1 consistent `GetItem` | 1 `UpdateItem` |
//! | take over an expired lock | 1 per poll interval during ≥ one lease | 1 `UpdateItem` |
//! | heartbeat, release | 0 | 1 `UpdateItem` |
//!
//! A contender that loses a race pays one failed conditional write (billed on AWS).
//!
//! # Failure modes
//!
//! * **Lost response** of an acquisition: the SDK sends the same write again, which fails its
//!   condition; the `ALL_OLD` item carries the record version this very write chose, so the
//!   contender knows it acquired (and its token). A heartbeat's retry simply applies again; a
//!   release's retry finds its own release.
//! * **Holder crashes or stops heart-beating**: a contender takes over after one lease of
//!   unchanged record version; the old holder's heartbeat then reports
//!   [`HeartbeatOutcome::Lost`].
//! * **Holder paused past its lease** (GC, freeze, partition): it may still act — that is what
//!   fencing tokens are for (invariant 3).
//! * **Patience exhausted**: [`AcquireOutcome::Held`] names the holder and the record version.
//! * DynamoDB errors are [`StoreError`]s (transient ones say so); nothing is retried here
//!   beyond the SDK's own retries, so a caller decides how long to keep trying.
//!
//! # Layout
//!
//! * `acquire`: acquiring (free lock, takeover after an unchanged lease).
//! * `holding`: the held lease: heartbeat, release, fenced timestamps.

mod acquire;
mod holding;

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use serde::Deserialize;

use crate::ddb::{Item, StoreError};

pub use holding::Holding;

/// The lock item's key attribute.
pub const ATTR_LOCK_ID: &str = "LockId";
/// The holder's name.
pub const ATTR_OWNER: &str = "Owner";
/// Random record version, new with every acquisition, heartbeat and release.
pub const ATTR_RECORD_VERSION: &str = "RecordVersion";
/// The fencing token of the latest acquisition (a number that only grows).
pub const ATTR_FENCING_TOKEN: &str = "FencingToken";
/// The holder's lease duration in milliseconds.
pub const ATTR_LEASE_MS: &str = "LeaseMs";
/// `true` once the holder released the lock.
pub const ATTR_RELEASED: &str = "Released";

/// Acquire a free lock: no item, or a released one.
pub const CONDITION_FREE: &str = "attribute_not_exists(#id) OR #rel = :true";
/// Take over: the record version is still the one seen a full lease ago.
pub const CONDITION_UNCHANGED: &str = "#rv = :seen";
/// Heartbeat or release: still this holder's acquisition, not released.
pub const CONDITION_HOLDING: &str = "#tok = :tok AND #rel = :false";
/// Every acquisition: a new holder, a new record version, the next fencing token.
pub const UPDATE_ACQUIRE: &str = "SET #owner = :owner, #rv = :rv, #lease = :lease, #rel = :false, #tok = if_not_exists(#tok, :zero) + :one";
/// A heartbeat: a new record version (and the lease, which may have changed).
pub const UPDATE_HEARTBEAT: &str = "SET #rv = :rv, #lease = :lease";
/// A release: flagged, with a new record version; the token stays.
pub const UPDATE_RELEASE: &str = "SET #rel = :true, #rv = :rv";

/// Default lease duration.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);
/// Default time between two reads of a contender waiting for a lock.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Settings of the lease lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The lock table (hash key `LockId`, a string).
    pub table: String,
    /// How long an acquisition or heartbeat holds the lock.
    pub lease: Duration,
    /// How often a waiting contender reads the lock (sooner sees a release sooner).
    pub poll_interval: Duration,
}

impl LeaseConfig {
    /// Defaults for `table`.
    pub fn new(table: impl Into<String>) -> Self {
        LeaseConfig {
            table: table.into(),
            lease: DEFAULT_LEASE,
            poll_interval: DEFAULT_POLL_INTERVAL,
        }
    }

    /// Check the settings: a table, a lease and a poll interval above zero.
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        if self.table.is_empty() {
            return Err(crate::ConfigError::new("table", "must not be empty"));
        }
        if self.lease.is_zero() {
            return Err(crate::ConfigError::new("lease", "must be longer than zero"));
        }
        if self.poll_interval.is_zero() {
            return Err(crate::ConfigError::new(
                "poll_interval",
                "must be longer than zero",
            ));
        }
        Ok(())
    }
}

/// A lock item as read.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LockState {
    /// The holder (or the last holder, when released).
    #[serde(rename = "Owner")]
    pub owner: String,
    /// The record version.
    #[serde(rename = "RecordVersion")]
    pub version: String,
    /// The fencing token of the latest acquisition.
    #[serde(rename = "FencingToken")]
    pub token: u64,
    /// The holder's lease in milliseconds.
    #[serde(rename = "LeaseMs")]
    pub lease_ms: u64,
    /// Whether the holder released it.
    #[serde(rename = "Released", default)]
    pub released: bool,
}

impl LockState {
    fn from_item(item: Item) -> Result<LockState, StoreError> {
        serde_dynamo::from_item(item)
            .map_err(|e| StoreError::Inconsistent(format!("lock item: {e}")))
    }

    /// The holder's lease.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }
}

/// The result of an acquisition attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// This contender holds the lock.
    Acquired {
        /// The fencing token of this acquisition (greater than every earlier one).
        token: u64,
        /// The held lease (heartbeat and release through it).
        holding: Holding,
        /// The previous holder, when the lock was taken over after its lease ran out.
        took_over_from: Option<String>,
    },
    /// Someone else holds it (and kept it alive, or the patience ran out first).
    Held {
        /// The holder.
        by: String,
        /// The record version last seen.
        version: String,
    },
}

/// The result of a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    /// Still held; the lease runs again from the moment the heartbeat was sent.
    Extended,
    /// No longer held: taken over, or released.
    Lost {
        /// The current holder (`None`: released or no item).
        by: Option<String>,
    },
}

/// The result of a release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// Released.
    Released,
    /// It was no longer ours to release.
    Lost {
        /// The current holder (`None`: released by someone else or no item).
        by: Option<String>,
    },
}

/// The lease lock on one table.
///
/// ```no_run
/// # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use dynamodb_exactly_once::lease::{AcquireOutcome, Lease, LeaseConfig};
///
/// let lease = Lease::try_new(client, LeaseConfig::new("Locks"))?;
/// match lease.acquire("nightly-report", "worker-a", Duration::from_secs(30)).await? {
///     AcquireOutcome::Acquired { token, mut holding, .. } => {
///         // ... work, passing `token` to every write; heartbeat every lease / 3:
///         lease.heartbeat(&mut holding).await?;
///         lease.release(holding).await?;
///     }
///     AcquireOutcome::Held { by, .. } => println!("{by} holds it"),
/// }
/// # Ok(())
/// # }
/// ```
#[doc(alias = "fencing token")]
#[doc(alias = "distributed lock")]
#[doc(alias = "lock")]
#[derive(Debug, Clone)]
pub struct Lease {
    client: Client,
    config: LeaseConfig,
}

impl Lease {
    /// The lock on `config.table`, once the settings are valid ([`LeaseConfig::validate`]).
    pub fn try_new(client: Client, config: LeaseConfig) -> Result<Self, crate::ConfigError> {
        config.validate()?;
        Ok(Lease { client, config })
    }

    /// The settings.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Read a lock item (consistent); `None` when it was never acquired.
    pub async fn get(&self, lock_id: &str) -> Result<Option<LockState>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .key(ATTR_LOCK_ID, AttributeValue::S(lock_id.to_string()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        out.item.map(LockState::from_item).transpose()
    }
}

/// A fresh record version (128 random bits, hex).
fn new_record_version() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The lease in milliseconds, as stored.
fn lease_ms(lease: Duration) -> String {
    u64::try_from(lease.as_millis())
        .unwrap_or(u64::MAX)
        .to_string()
}
