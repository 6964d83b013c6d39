//! Settings of the sweeper.

use std::time::Duration;

use crate::config::{ConfigError, Configured, FromSettings, Settings};

/// Default stale threshold: longer than a redelivery gap (the template's 360 s visibility
/// timeout plus the coordinator's 60 s timeout), so a transaction that spans deliveries is
/// not rolled back between them.
pub(crate) const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(900);
/// Default longest gap between two deliveries of a message (the template's queue visibility
/// timeout, 360 s, plus the coordinator's timeout, 60 s).
pub(crate) const DEFAULT_REDELIVERY_GAP: Duration = Duration::from_secs(420);
/// Default retention of completed TX records (the idempotency horizon: 15 days, above SQS's
/// 14-day maximum retention; the coordinator's `DEFAULT_RETAIN`).
pub(crate) const DEFAULT_RETAIN: Duration = crate::txn::DEFAULT_RETAIN;
/// Default time kept in reserve before the invocation deadline.
pub(crate) const DEFAULT_SWEEP_MARGIN: Duration = Duration::from_millis(3000);
/// Default transactions driven at once.
pub(crate) const DEFAULT_SWEEP_CONCURRENCY: usize = 8;
/// Settings of the sweeper; build with [`SweepConfig::builder`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepConfig {
    // Each setting is documented on its getter.
    pub(crate) table: String,
    pub(crate) stale_after: Duration,
    pub(crate) retain: Duration,
    pub(crate) deadline_margin: Duration,
    pub(crate) concurrency: usize,
    pub(crate) redelivery_gap: Duration,
    pub(crate) redelivery_horizon: Duration,
    pub(crate) max_due_per_shard: usize,
}

impl SweepConfig {
    /// A builder with the defaults for the TX table `table`.
    pub fn builder(table: impl Into<String>) -> SweepConfigBuilder {
        SweepConfigBuilder {
            config: SweepConfig {
                table: table.into(),
                stale_after: DEFAULT_STALE_AFTER,
                retain: DEFAULT_RETAIN,
                deadline_margin: DEFAULT_SWEEP_MARGIN,
                concurrency: DEFAULT_SWEEP_CONCURRENCY,
                redelivery_gap: DEFAULT_REDELIVERY_GAP,
                redelivery_horizon: crate::txn::DEFAULT_REDELIVERY_HORIZON,
                max_due_per_shard: super::MAX_DUE_PER_KEY,
            },
        }
    }

    /// A builder starting from this config.
    pub fn to_builder(&self) -> SweepConfigBuilder {
        SweepConfigBuilder {
            config: self.clone(),
        }
    }

    /// The TX table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// A transaction without creation, restart or heartbeat for this long is stale.
    pub fn stale_after(&self) -> Duration {
        self.stale_after
    }

    /// Completed records expire this long after completion (the idempotency horizon).
    pub fn retain(&self) -> Duration {
        self.retain
    }

    /// Stop this long before the invocation deadline.
    pub fn deadline_margin(&self) -> Duration {
        self.deadline_margin
    }

    /// Transactions driven at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// The longest gap between two deliveries of a message (the queue's visibility timeout
    /// plus the coordinator's timeout): `stale_after` must be longer.
    pub fn redelivery_gap(&self) -> Duration {
        self.redelivery_gap
    }

    /// How long a message may be delivered again (checked against `retain`).
    pub fn redelivery_horizon(&self) -> Duration {
        self.redelivery_horizon
    }

    /// Most stale transactions read from one shard per sweep, half the oldest and half the
    /// newest (the rest wait for the next run).
    pub fn max_due_per_shard(&self) -> usize {
        self.max_due_per_shard
    }

    /// Check the settings: the stale threshold longer than the redelivery gap
    /// ([`check_stale_after`]), the retention covering the redelivery horizon, a concurrency
    /// of at least 1.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.table.is_empty() {
            return Err(ConfigError::new("table", "must not be empty"));
        }
        check_stale_after(self.stale_after, self.redelivery_gap)?;
        crate::txn::check_horizons(self.retain, self.redelivery_horizon)?;
        if self.concurrency == 0 {
            return Err(ConfigError::new("sweep_concurrency", "must be at least 1"));
        }
        Ok(())
    }
}

/// Builds a validated [`SweepConfig`] (see [`SweepConfig::builder`]).
#[must_use]
#[derive(Debug, Clone)]
pub struct SweepConfigBuilder {
    config: SweepConfig,
}

impl SweepConfigBuilder {
    /// The stale threshold (default 15 min; longer than the redelivery gap).
    pub fn stale_after(mut self, after: Duration) -> Self {
        self.config.stale_after = after;
        self
    }

    /// The retention of completed records (default 15 days; not shorter than the
    /// redelivery horizon).
    pub fn retain(mut self, retain: Duration) -> Self {
        self.config.retain = retain;
        self
    }

    /// Time kept in reserve before the invocation deadline (default
    /// 3 s).
    pub fn deadline_margin(mut self, margin: Duration) -> Self {
        self.config.deadline_margin = margin;
        self
    }

    /// Transactions driven at once (default 8; at least 1).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.config.concurrency = concurrency;
        self
    }

    /// The longest gap between two deliveries of a message (default
    /// 7 min; zero skips the stale threshold's check).
    pub fn redelivery_gap(mut self, gap: Duration) -> Self {
        self.config.redelivery_gap = gap;
        self
    }

    /// How long a message may be delivered again (default
    /// 14 days).
    pub fn redelivery_horizon(mut self, horizon: Duration) -> Self {
        self.config.redelivery_horizon = horizon;
        self
    }

    /// Most stale transactions read from one shard per sweep (default
    /// [`MAX_DUE_PER_KEY`](super::MAX_DUE_PER_KEY)).
    pub fn max_due_per_shard(mut self, due: usize) -> Self {
        self.config.max_due_per_shard = due;
        self
    }

    /// The config, once its settings pass the checks; the error names the setting at fault.
    pub fn build(self) -> Result<SweepConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

/// The stale threshold must exceed the longest gap between two deliveries of a message
/// (`gap`: the queue's visibility timeout plus the coordinator's timeout), or a transaction
/// that needs several invocations is rolled back between them. A zero gap (a source that never
/// delivers a message twice, or a test) skips the check.
///
/// ```
/// use std::time::Duration;
/// use dynamodb_exactly_once::txn::sweep::check_stale_after;
/// assert!(check_stale_after(Duration::from_secs(900), Duration::from_secs(420)).is_ok());
/// assert!(check_stale_after(Duration::from_secs(300), Duration::from_secs(420)).is_err());
/// ```
pub fn check_stale_after(stale_after: Duration, gap: Duration) -> Result<(), ConfigError> {
    if !gap.is_zero() && stale_after <= gap {
        return Err(ConfigError::new(
            "stale_after_seconds",
            format!(
                "{} s is not longer than the redelivery gap `redelivery_gap_seconds` ({} s): \
                 the sweeper would roll back transactions between two deliveries",
                stale_after.as_secs(),
                gap.as_secs()
            ),
        ));
    }
    Ok(())
}

impl FromSettings for SweepConfig {
    const NAMES: &'static [&'static str] = &[
        "table",
        "stale_after_seconds",
        "redelivery_gap_seconds",
        "sweep_concurrency",
        "retain_seconds",
        "redelivery_horizon_seconds",
        "sweep_margin_ms",
    ];

    /// `table` (required), `stale_after_seconds`, `redelivery_gap_seconds`,
    /// `sweep_concurrency`, `retain_seconds`, `redelivery_horizon_seconds` and
    /// `sweep_margin_ms`.
    fn from_settings(s: &Settings<'_>) -> Result<Self, ConfigError> {
        let mut b = SweepConfig::builder(s.required("table")?);
        if let Some(secs) = s.parse("stale_after_seconds")? {
            b = b.stale_after(Duration::from_secs(secs));
        }
        if let Some(secs) = s.parse("redelivery_gap_seconds")? {
            b = b.redelivery_gap(Duration::from_secs(secs));
        }
        if let Some(n) = s.parse("sweep_concurrency")? {
            b = b.concurrency(n);
        }
        if let Some(secs) = s.parse("retain_seconds")? {
            b = b.retain(Duration::from_secs(secs));
        }
        if let Some(secs) = s.parse("redelivery_horizon_seconds")? {
            b = b.redelivery_horizon(Duration::from_secs(secs));
        }
        if let Some(ms) = s.parse("sweep_margin_ms")? {
            b = b.deadline_margin(Duration::from_millis(ms));
        }
        b.build()
    }
}

impl Configured for super::Sweeper {
    type Config = SweepConfig;

    fn new(client: aws_sdk_dynamodb::Client, config: SweepConfig) -> Self {
        super::Sweeper::new(client, config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(builder: SweepConfigBuilder) -> String {
        builder.build().expect_err("refused").setting
    }

    #[test]
    fn build_refuses_what_validation_checks() {
        let b = SweepConfig::builder("Tx");
        assert!(b.clone().build().is_ok());
        assert_eq!(refused(SweepConfig::builder("")), "table");
        let early = b.clone().stale_after(Duration::from_secs(300));
        assert_eq!(refused(early.clone()), "stale_after_seconds");
        assert!(early.redelivery_gap(Duration::ZERO).build().is_ok());
        let short = b.clone().retain(Duration::from_secs(86_400));
        assert_eq!(refused(short), "retain_seconds");
        assert_eq!(refused(b.clone().concurrency(0)), "sweep_concurrency");
        let c = b.max_due_per_shard(10).build().expect("valid");
        assert_eq!(
            c.to_builder().build().map(|c| c.max_due_per_shard()),
            Ok(10)
        );
    }
}
