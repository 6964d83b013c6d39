//! [`RatchetConfigBuilder`] and the getters of [`RatchetConfig`]: a config that exists is
//! valid.

use crate::ratchet::format::{
    DEFAULT_DELETED_ATTRIBUTE, DEFAULT_TIE_BREAK_ATTRIBUTE, DEFAULT_TS_ATTRIBUTE,
    DEFAULT_TTL_ATTRIBUTE,
};
use std::time::Duration;

use super::config::{RatchetConfig, Replication, DEFAULT_CONCURRENCY, DEFAULT_TOMBSTONE_TTL};
use crate::config::ConfigError;

impl RatchetConfig {
    /// A builder with the defaults, writing `table`.
    pub fn builder(table: impl Into<String>) -> RatchetConfigBuilder {
        RatchetConfigBuilder {
            config: RatchetConfig {
                table: table.into(),
                ts_attribute: DEFAULT_TS_ATTRIBUTE.into(),
                deleted_attribute: DEFAULT_DELETED_ATTRIBUTE.into(),
                ttl_attribute: DEFAULT_TTL_ATTRIBUTE.into(),
                tie_break_attribute: DEFAULT_TIE_BREAK_ATTRIBUTE.into(),
                tombstone_ttl: DEFAULT_TOMBSTONE_TTL,
                concurrency: DEFAULT_CONCURRENCY,
                max_record_age: None,
                lifetime_ledger: None,
                history_table: None,
                replication: None,
                cache_keys: super::cache::DEFAULT_CACHE_KEYS,
            },
        }
    }

    /// A builder starting from this config.
    pub fn to_builder(&self) -> RatchetConfigBuilder {
        RatchetConfigBuilder {
            config: self.clone(),
        }
    }

    /// The table written.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Timestamp attribute.
    pub fn ts_attribute(&self) -> &str {
        &self.ts_attribute
    }

    /// Tombstone flag attribute.
    pub fn deleted_attribute(&self) -> &str {
        &self.deleted_attribute
    }

    /// TTL attribute (epoch seconds).
    pub fn ttl_attribute(&self) -> &str {
        &self.ttl_attribute
    }

    /// Tie-break token attribute.
    pub fn tie_break_attribute(&self) -> &str {
        &self.tie_break_attribute
    }

    /// How long tombstones are kept.
    pub fn tombstone_ttl(&self) -> Duration {
        self.tombstone_ttl
    }

    /// How many keys are written at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// The age guard: a record that reached its source longer ago is kept as a `too_old` dead
    /// letter instead of being applied (`None`: the tombstone lifetime; at most that).
    /// Raising `tombstone_ttl` does not need it when [`RatchetConfig::lifetime_ledger`] is set
    /// (the writer keeps a shorter lifetime's guard while its tombstones may exist); without a
    /// ledger, or for the first raise after a version without one, keep this at the old
    /// lifetime for one new lifetime.
    pub fn max_record_age(&self) -> Option<Duration> {
        self.max_record_age
    }

    /// Where writers promise the tombstone lifetimes they use (see [`super::LifetimeLedger`]):
    /// a raised lifetime then keeps the guard of a shorter one until its tombstones are gone
    /// (`None`: no ledger; the guard is this writer's lifetime, or `max_record_age`).
    pub fn lifetime_ledger(&self) -> Option<&super::LifetimeLedger> {
        self.lifetime_ledger.as_ref()
    }

    /// History mode: every record also lands in this table at its own `(key, ts, tie-break)`
    /// row (see the module's `# History mode` section); `None`: no history.
    pub fn history_table(&self) -> Option<&str> {
        self.history_table.as_deref()
    }

    /// Item changes (DynamoDB stream records) replicated as records (see [`Replication`]);
    /// `None`: changes are refused (`no_change_mapping`).
    pub fn replication(&self) -> Option<&Replication> {
        self.replication.as_ref()
    }

    /// Keys of the warm-redelivery cache: a record at or below a version this process wrote
    /// or read back for its key is answered without a call (`0`: off). See the module's
    /// `# Warm redelivery` section.
    pub fn cache_keys(&self) -> usize {
        self.cache_keys
    }

    /// The age guard in force: [`RatchetConfig::max_record_age`], or the tombstone lifetime.
    pub fn record_age_limit(&self) -> Duration {
        self.max_record_age.unwrap_or(self.tombstone_ttl)
    }
}

/// Builds a validated [`RatchetConfig`].
#[must_use]
#[derive(Debug, Clone)]
pub struct RatchetConfigBuilder {
    pub(super) config: RatchetConfig,
}

impl RatchetConfigBuilder {
    /// Timestamp attribute (default `"Timestamp"`).
    pub fn ts_attribute(mut self, name: impl Into<String>) -> Self {
        self.config.ts_attribute = name.into();
        self
    }

    /// Tombstone flag attribute (default `"Deleted"`).
    pub fn deleted_attribute(mut self, name: impl Into<String>) -> Self {
        self.config.deleted_attribute = name.into();
        self
    }

    /// TTL attribute, epoch seconds (default `"TTL"`; enable TTL on it).
    pub fn ttl_attribute(mut self, name: impl Into<String>) -> Self {
        self.config.ttl_attribute = name.into();
        self
    }

    /// Tie-break token attribute (default `"TieBreak"`).
    pub fn tie_break_attribute(mut self, name: impl Into<String>) -> Self {
        self.config.tie_break_attribute = name.into();
        self
    }

    /// How long tombstones are kept (default 7 days).
    pub fn tombstone_ttl(mut self, ttl: Duration) -> Self {
        self.config.tombstone_ttl = ttl;
        self
    }

    /// How many keys are written at once (default 32; at least 1).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.config.concurrency = concurrency;
        self
    }

    /// The age guard (default: the tombstone lifetime; at most that), see
    /// [`RatchetConfig::max_record_age`].
    pub fn max_record_age(mut self, age: Duration) -> Self {
        self.config.max_record_age = Some(age);
        self
    }

    /// Where writers promise the tombstone lifetimes they use (default: no ledger), see
    /// [`RatchetConfig::lifetime_ledger`].
    pub fn lifetime_ledger(mut self, ledger: super::LifetimeLedger) -> Self {
        self.config.lifetime_ledger = Some(ledger);
        self
    }

    /// History mode into this table, other than the table (default: no history).
    pub fn history_table(mut self, table: impl Into<String>) -> Self {
        self.config.history_table = Some(table.into());
        self
    }

    /// Replicate item changes (default: changes are refused, `no_change_mapping`).
    pub fn replication(mut self, replication: Replication) -> Self {
        self.config.replication = Some(replication);
        self
    }

    /// Keys of the warm-redelivery cache (default 10000; `0`: off).
    pub fn cache_keys(mut self, keys: usize) -> Self {
        self.config.cache_keys = keys;
        self
    }

    /// The config, or the first setting at fault: an empty table, an empty or shared
    /// protocol attribute name, a history table that is the table, a concurrency of 0, an age
    /// guard longer than the tombstone lifetime.
    pub fn build(self) -> Result<RatchetConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(builder: RatchetConfigBuilder) -> String {
        builder.build().expect_err("an invalid setting").setting
    }

    #[test]
    fn build_refuses_an_invalid_setting_by_name() {
        let b = || RatchetConfig::builder("T");
        assert_eq!(refused(RatchetConfig::builder("")), "table");
        assert_eq!(refused(b().ts_attribute("")), "ts_attribute");
        assert_eq!(refused(b().ttl_attribute("Deleted")), "ttl_attribute");
        assert_eq!(
            refused(b().tie_break_attribute("Timestamp")),
            "tie_break_attribute"
        );
        assert_eq!(refused(b().history_table("T")), "history_table");
        assert_eq!(refused(b().concurrency(0)), "concurrency");
        let too_old = b()
            .tombstone_ttl(Duration::from_secs(600))
            .max_record_age(Duration::from_secs(601));
        assert_eq!(refused(too_old), "max_record_age_seconds");
    }

    #[test]
    fn getters_return_what_was_set_and_the_defaults_otherwise() {
        let defaults = RatchetConfig::builder("T").build().expect("valid");
        assert_eq!(defaults.table(), "T");
        assert_eq!(
            defaults.protocol_attributes(),
            ["Timestamp", "Deleted", "TTL", "TieBreak"]
        );
        assert_eq!(defaults.tombstone_ttl(), DEFAULT_TOMBSTONE_TTL);
        assert_eq!(defaults.record_age_limit(), DEFAULT_TOMBSTONE_TTL);
        assert!(defaults.history_table().is_none() && defaults.replication().is_none());
        let ledger = super::super::LifetimeLedger::new("Ledger", "T");
        let c = RatchetConfig::builder("T")
            .ts_attribute("ts")
            .deleted_attribute("del")
            .ttl_attribute("exp")
            .tie_break_attribute("tb")
            .tombstone_ttl(Duration::from_secs(600))
            .concurrency(4)
            .max_record_age(Duration::from_secs(60))
            .lifetime_ledger(ledger.clone())
            .history_table("H")
            .replication(Replication::skipping(["secret", "tmp_*"]))
            .cache_keys(0)
            .build()
            .expect("valid");
        assert_eq!(
            [
                c.ts_attribute(),
                c.deleted_attribute(),
                c.ttl_attribute(),
                c.tie_break_attribute()
            ],
            ["ts", "del", "exp", "tb"]
        );
        assert_eq!((c.tombstone_ttl().as_secs(), c.concurrency()), (600, 4));
        assert_eq!(c.max_record_age(), Some(Duration::from_secs(60)));
        assert_eq!(c.record_age_limit(), Duration::from_secs(60));
        assert_eq!(
            (c.lifetime_ledger(), c.history_table()),
            (Some(&ledger), Some("H"))
        );
        let skipped = c.replication().map(|r| r.skip_attributes().join(","));
        assert_eq!(skipped.as_deref(), Some("secret,tmp_*"));
        assert_eq!(c.cache_keys(), 0);
        assert_eq!(c.to_builder().build(), Ok(c));
    }
}
