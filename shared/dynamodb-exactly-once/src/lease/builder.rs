//! [`LeaseConfigBuilder`] and the getters of [`LeaseConfig`]: a config that exists is valid.

use std::time::Duration;

use super::config::*;
use crate::config::ConfigError;

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
}

/// Builds a validated [`LeaseConfig`].
#[must_use]
#[derive(Debug, Clone)]
pub struct LeaseConfigBuilder {
    pub(super) config: LeaseConfig,
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
