//! Settings of the sweeper.

use std::time::Duration;

use crate::config::{ConfigError, Configured, FromSettings, Settings};

/// Default stale threshold: longer than a redelivery gap (the template's 360 s visibility
/// timeout plus the coordinator's 60 s timeout), so a transaction that spans deliveries is
/// not rolled back between them.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(900);
/// Default longest gap between two deliveries of a message (the template's queue visibility
/// timeout, 360 s, plus the coordinator's timeout, 60 s).
pub const DEFAULT_REDELIVERY_GAP: Duration = Duration::from_secs(420);
/// Default retention of completed TX records (the idempotency horizon: 15 days, above SQS's
/// 14-day maximum retention; see [`crate::txn::DEFAULT_RETAIN`]).
pub const DEFAULT_RETAIN: Duration = crate::txn::DEFAULT_RETAIN;
/// Default time kept in reserve before the invocation deadline.
pub const DEFAULT_SWEEP_MARGIN: Duration = Duration::from_millis(3000);
/// Default transactions driven at once.
pub const DEFAULT_SWEEP_CONCURRENCY: usize = 8;
/// Settings of the sweeper.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepConfig {
    /// The TX table.
    pub table: String,
    /// A transaction without creation, restart or heartbeat for this long is stale.
    pub stale_after: Duration,
    /// Completed records expire this long after completion (the idempotency horizon).
    pub retain: Duration,
    /// Stop this long before the invocation deadline.
    pub deadline_margin: Duration,
    /// Transactions driven at once.
    pub concurrency: usize,
    /// The longest gap between two deliveries of a message (the queue's visibility timeout
    /// plus the coordinator's timeout): `stale_after` must be longer.
    pub redelivery_gap: Duration,
    /// How long a message may be delivered again (checked against `retain`).
    pub redelivery_horizon: Duration,
    /// Most stale transactions read from one shard per sweep, half the oldest and half the
    /// newest (the rest wait for the next run).
    pub max_due_per_shard: usize,
}

impl SweepConfig {
    /// Defaults for `table`.
    pub fn new(table: impl Into<String>) -> Self {
        SweepConfig {
            table: table.into(),
            stale_after: DEFAULT_STALE_AFTER,
            retain: DEFAULT_RETAIN,
            deadline_margin: DEFAULT_SWEEP_MARGIN,
            concurrency: DEFAULT_SWEEP_CONCURRENCY,
            redelivery_gap: DEFAULT_REDELIVERY_GAP,
            redelivery_horizon: crate::txn::DEFAULT_REDELIVERY_HORIZON,
            max_due_per_shard: super::MAX_DUE_PER_KEY,
        }
    }

    /// Check the settings: the stale threshold longer than the redelivery gap
    /// ([`check_stale_after`]), the retention covering the redelivery horizon, a concurrency
    /// of at least 1.
    pub fn validate(&self) -> Result<(), ConfigError> {
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
        let mut c = SweepConfig::new(s.required("table")?);
        s.set_secs(&mut c.stale_after, "stale_after_seconds")?;
        s.set_secs(&mut c.redelivery_gap, "redelivery_gap_seconds")?;
        s.set(&mut c.concurrency, "sweep_concurrency")?;
        s.set_secs(&mut c.retain, "retain_seconds")?;
        s.set_secs(&mut c.redelivery_horizon, "redelivery_horizon_seconds")?;
        s.set_millis(&mut c.deadline_margin, "sweep_margin_ms")?;
        Ok(c)
    }
}

impl Configured for super::Sweeper {
    type Config = SweepConfig;

    fn try_new(client: aws_sdk_dynamodb::Client, config: SweepConfig) -> Result<Self, ConfigError> {
        super::Sweeper::try_new(client, config)
    }
}
