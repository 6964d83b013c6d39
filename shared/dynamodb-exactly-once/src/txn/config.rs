//! [`TxConfig`]: the settings of the transaction protocol.

use std::collections::BTreeSet;
use std::time::Duration;

use super::outcome::TxError;
use super::request::TxMessage;
use crate::config::ConfigError;
use crate::ddb::clock::epoch_millis;
use crate::rejection::{Rejection, RejectionCode};

/// Default wait on a pending transaction's lock before rolling it back.
pub(crate) const DEFAULT_LOCK_PATIENCE: Duration = Duration::from_millis(1000);
/// Default interval of a pending attempt's heartbeats (a quarter of the default patience).
pub(crate) const DEFAULT_HEARTBEAT_EVERY: Duration = Duration::from_millis(250);
/// Default restarts of an aborted attempt within one invocation.
pub(crate) const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Default items per lock-path `TransactWriteItems`.
pub(super) const DEFAULT_LOCK_CHUNK: usize = 99;
/// Default transactions (and item writes) in flight at once.
pub(crate) const DEFAULT_CONCURRENCY: usize = 8;
/// Default redelivery horizon: the longest a message can come back by SQS's own redelivery
/// (SQS keeps a message at most 14 days from its enqueue). A message moved back from a redrive
/// queue is a *new* message with a new enqueue time: the horizon does not cover it (see the
/// protocol page, invariant 6).
pub(crate) const DEFAULT_REDELIVERY_HORIZON: Duration = Duration::from_secs(14 * 24 * 3600);
/// Default idempotency horizon: how long completed TX records are kept (the sweeper's
/// retention), above the redelivery horizon.
pub(crate) const DEFAULT_RETAIN: Duration = Duration::from_secs(15 * 24 * 3600);

/// Settings of the transaction protocol; build with [`TxConfig::builder`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxConfig {
    // Each setting is documented on its getter (`builder.rs`).
    pub(crate) table: String,
    pub(crate) allowed_tables: BTreeSet<String>,
    pub(crate) lock_patience: Duration,
    pub(crate) heartbeat_every: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) concurrency: usize,
    pub(crate) retain: Duration,
    pub(crate) redelivery_horizon: Duration,
    pub(crate) fast_path: bool,
    pub(crate) group_commit: bool,
    pub(crate) lock_chunk: usize,
    pub(crate) read_ahead: bool,
}

impl TxConfig {
    /// Defaults for the TX table `table` and the given allow-list, not validated (the
    /// sweeper's coordinator has no allow-list).
    pub(crate) fn defaults<I, S>(table: impl Into<String>, allowed: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        TxConfig {
            table: table.into(),
            allowed_tables: allowed.into_iter().map(Into::into).collect(),
            lock_patience: DEFAULT_LOCK_PATIENCE,
            heartbeat_every: DEFAULT_HEARTBEAT_EVERY,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            concurrency: DEFAULT_CONCURRENCY,
            retain: DEFAULT_RETAIN,
            redelivery_horizon: DEFAULT_REDELIVERY_HORIZON,
            fast_path: true,
            group_commit: true,
            lock_chunk: DEFAULT_LOCK_CHUNK,
            read_ahead: true,
        }
    }

    /// Check that the allow-list names a table and not the TX table itself, and that the
    /// idempotency horizon covers the redelivery horizon.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check_horizons(self.retain, self.redelivery_horizon)?;
        if !self.heartbeat_every.is_zero() && self.lock_patience < self.heartbeat_every * 2 {
            return Err(ConfigError::new(
                "lock_patience_ms",
                format!(
                    "{} ms is less than twice the heartbeat interval `heartbeat_ms` ({} ms): \
                     contenders would roll back coordinators that are still locking",
                    self.lock_patience.as_millis(),
                    self.heartbeat_every.as_millis()
                ),
            ));
        }
        if self.allowed_tables.is_empty() {
            return Err(ConfigError::new("allowed_tables", "names no table"));
        }
        if self.allowed_tables.contains(&self.table) {
            return Err(ConfigError::new(
                "allowed_tables",
                "must not include the TX table",
            ));
        }
        Ok(())
    }
}

/// `retain` (the idempotency horizon) must cover `redelivery_horizon`: a message delivered
/// again after its record was deleted would be applied a second time.
pub(crate) fn check_horizons(
    retain: Duration,
    redelivery_horizon: Duration,
) -> Result<(), ConfigError> {
    if retain < redelivery_horizon {
        return Err(ConfigError::new(
            "retain_seconds",
            format!(
                "{} s is shorter than the redelivery horizon `redelivery_horizon_seconds` ({} s): \
                 a message redelivered after its TX record was deleted would apply twice",
                retain.as_secs(),
                redelivery_horizon.as_secs()
            ),
        ));
    }
    Ok(())
}

/// How far a message's `issuedAt` may be ahead of the coordinator's clock (producer clock
/// skew): 5 minutes.
pub const MAX_ISSUED_AHEAD: Duration = Duration::from_secs(300);

/// How far `issuedAt` is ahead of this clock, when more than [`MAX_ISSUED_AHEAD`].
fn issued_ahead(message: &TxMessage) -> Option<Duration> {
    let issued = message.issued_at_ms?;
    let ahead = Duration::from_millis(issued.saturating_sub(epoch_millis()));
    (ahead > MAX_ISSUED_AHEAD).then_some(ahead)
}

impl TxConfig {
    /// A message issued (`issuedAt`) longer ago than completed records are kept may find its
    /// record deleted and apply again: refused `too_old`, whatever its envelope's age (a
    /// redrive gives a message a new one).
    /// An `issuedAt` more than [`MAX_ISSUED_AHEAD`] ahead of this clock (a producer clock
    /// ahead, or microseconds) is refused `invalid_timestamp`: its age would read 0 for as
    /// long as it is ahead, and `too_old` would never fire.
    pub(crate) fn too_old(&self, message: &TxMessage) -> Option<TxError> {
        if let Some(ahead) = issued_ahead(message) {
            return Some(TxError::Rejected(Rejection::new(
                RejectionCode::InvalidTimestamp,
                format!(
                    "txId {}: `issuedAt` is {} s ahead of the coordinator's clock (at most {} s \
                     allowed; it must be epoch milliseconds)",
                    message.tx_id,
                    ahead.as_secs(),
                    MAX_ISSUED_AHEAD.as_secs()
                ),
            )));
        }
        let age = self.age_past_retention(message)?;
        Some(TxError::Rejected(Rejection::new(
            RejectionCode::TooOld,
            format!(
                "txId {} was issued {} s ago; its record is kept {} s",
                message.tx_id,
                age.as_secs(),
                self.retain.as_secs()
            ),
        )))
    }

    /// The message's age (since `issuedAt`) when it exceeds the records' retention.
    pub(crate) fn age_past_retention(&self, message: &TxMessage) -> Option<Duration> {
        let issued = message.issued_at_ms?;
        let age = Duration::from_millis(epoch_millis().saturating_sub(issued));
        (age > self.retain).then_some(age)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_must_cover_redelivery() {
        let b = TxConfig::builder("Tx", ["Accounts"]);
        assert!(b.clone().build().is_ok());
        let err = b
            .retain(Duration::from_secs(7 * 24 * 3600))
            .build()
            .expect_err("7 days < 14 days");
        assert!(err.to_string().contains("retain_seconds"), "{err}");
    }
}
