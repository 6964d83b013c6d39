#![doc = include_str!("../../docs/lease.md")]

mod acquire;
mod builder;
mod config;
mod format;
mod holding;

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use serde::Deserialize;

use crate::ddb::{Item, StoreError};

pub use builder::LeaseConfigBuilder;
pub use config::LeaseConfig;
pub use format::ATTR_LOCK_ID;
pub use holding::Holding;

/// Acquire a free lock: no item, or a released one.
pub(crate) const CONDITION_FREE: &str = "attribute_not_exists(#id) OR #rel = :true";
/// Take over: the record version is still the one seen a full lease ago.
pub(crate) const CONDITION_UNCHANGED: &str = "#rv = :seen";
/// Heartbeat or release: still this holder's acquisition, not released.
pub(crate) const CONDITION_HOLDING: &str = "#tok = :tok AND #rel = :false";
/// Every acquisition: a new holder, a new record version, the next fencing token.
pub(crate) const UPDATE_ACQUIRE: &str = "SET #owner = :owner, #rv = :rv, #lease = :lease, #rel = :false, #tok = if_not_exists(#tok, :zero) + :one";
/// A heartbeat: a new record version (and the lease, which may have changed).
pub(crate) const UPDATE_HEARTBEAT: &str = "SET #rv = :rv, #lease = :lease";
/// A release: flagged, with a new record version; the token stays.
pub(crate) const UPDATE_RELEASE: &str = "SET #rel = :true, #rv = :rv";

/// A lock item as read.
#[non_exhaustive]
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
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an outcome such as a conflict or a stale record is not an error: handle it"]
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
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an outcome such as a conflict or a stale record is not an error: handle it"]
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
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an outcome such as a conflict or a stale record is not an error: handle it"]
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
/// let lease = Lease::new(client, LeaseConfig::builder("Locks").build()?);
/// match lease.acquire("nightly-report", "worker-a", Duration::from_secs(30)).await? {
///     AcquireOutcome::Acquired { token, mut holding, .. } => {
///         // ... work, passing `token` to every write; heartbeat every lease / 3:
///         lease.heartbeat(&mut holding).await?;
///         lease.release(holding).await?;
///     }
///     AcquireOutcome::Held { by, .. } => println!("{by} holds it"),
///     other => println!("not acquired: {other:?}"),
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
    /// The lock on `config`'s table (a built config is valid: its builder checked it).
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Lease {
            client: crate::ddb::conflict::retrying_conflicts(client),
            config,
        }
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
