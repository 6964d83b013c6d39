//! Settings of the lease lock, validated when built.

use std::time::Duration;

use crate::config::ConfigError;

/// Default lease duration.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(10);
/// Default time between two reads of a contender waiting for a lock.
pub(crate) const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Settings of the lease lock; build with [`LeaseConfig::builder`] (a config that exists is
/// valid).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    pub(crate) table: String,
    pub(crate) lease: Duration,
    pub(crate) poll_interval: Duration,
}

impl LeaseConfig {
    /// Check the settings: a table, a lease and a poll interval above zero
    /// ([`LeaseConfigBuilder::build`] calls it).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.table.is_empty() {
            return Err(ConfigError::new("table", "must not be empty"));
        }
        if self.lease.is_zero() {
            return Err(ConfigError::new("lease", "must be longer than zero"));
        }
        if self.poll_interval.is_zero() {
            return Err(ConfigError::new(
                "poll_interval",
                "must be longer than zero",
            ));
        }
        Ok(())
    }
}
