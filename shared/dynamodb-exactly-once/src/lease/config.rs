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
    /// A builder with the defaults, on the lock table `table`.
    pub fn builder(table: impl Into<String>) -> LeaseConfigBuilder {
        LeaseConfigBuilder {
            config: LeaseConfig {
                table: table.into(),
                lease: DEFAULT_LEASE,
                poll_interval: DEFAULT_POLL_INTERVAL,
            },
        }
    }

    /// A builder starting from this config.
    pub fn to_builder(&self) -> LeaseConfigBuilder {
        LeaseConfigBuilder {
            config: self.clone(),
        }
    }

    /// The lock table (hash key [`ATTR_LOCK_ID`](super::ATTR_LOCK_ID), a string).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// How long an acquisition or heartbeat holds the lock.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// How often a waiting contender reads the lock (sooner sees a release sooner).
    pub fn poll_interval(&self) -> Duration {
        self.poll_interval
    }

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

/// Builds a validated [`LeaseConfig`].
#[must_use]
#[derive(Debug, Clone)]
pub struct LeaseConfigBuilder {
    config: LeaseConfig,
}

impl LeaseConfigBuilder {
    /// How long an acquisition or heartbeat holds the lock (default 10 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// How often a waiting contender reads the lock (default 1 s).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.config.poll_interval = interval;
        self
    }

    /// The config, or the first setting at fault: an empty table, a zero lease or poll
    /// interval.
    pub fn build(self) -> Result<LeaseConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(builder: LeaseConfigBuilder) -> String {
        builder.build().expect_err("an invalid setting").setting
    }

    #[test]
    fn build_refuses_an_invalid_setting_by_name() {
        assert_eq!(refused(LeaseConfig::builder("")), "table");
        let b = || LeaseConfig::builder("Locks");
        assert_eq!(refused(b().lease(Duration::ZERO)), "lease");
        assert_eq!(refused(b().poll_interval(Duration::ZERO)), "poll_interval");
    }

    #[test]
    fn getters_return_what_was_set_and_the_defaults_otherwise() {
        let defaults = LeaseConfig::builder("Locks").build().expect("valid");
        assert_eq!(defaults.table(), "Locks");
        assert_eq!(
            (defaults.lease(), defaults.poll_interval()),
            (DEFAULT_LEASE, DEFAULT_POLL_INTERVAL)
        );
        let c = LeaseConfig::builder("Locks")
            .lease(Duration::from_secs(3))
            .poll_interval(Duration::from_millis(50))
            .build()
            .expect("valid");
        assert_eq!(
            (c.lease().as_secs(), c.poll_interval().as_millis()),
            (3, 50)
        );
        assert_eq!(c.to_builder().build(), Ok(c));
    }
}
