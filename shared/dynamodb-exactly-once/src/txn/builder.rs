//! [`TxConfigBuilder`] and the getters of [`TxConfig`]: a config that exists is valid.

use std::collections::BTreeSet;
use std::time::Duration;

use super::config::TxConfig;
use crate::config::ConfigError;

impl TxConfig {
    /// A builder with the defaults for the TX table `table` and the tables requests may touch
    /// (`allowed`: at least one, not `table`).
    pub fn builder<I, S>(table: impl Into<String>, allowed: I) -> TxConfigBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        TxConfigBuilder {
            config: TxConfig::defaults(table, allowed),
        }
    }

    /// A builder starting from this config.
    pub fn to_builder(&self) -> TxConfigBuilder {
        TxConfigBuilder {
            config: self.clone(),
        }
    }

    /// The TX table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Tables requests may touch.
    pub fn allowed_tables(&self) -> &BTreeSet<String> {
        &self.allowed_tables
    }

    /// How long to wait on a pending transaction's lock before rolling it back.
    pub fn lock_patience(&self) -> Duration {
        self.lock_patience
    }

    /// How often a pending attempt writes a heartbeat (`LastTouched`) while it locks, at
    /// most: before an item's lock write when the last one (or the creation, or the restart)
    /// is older than this. A contender rolls back a holder only after waiting
    /// [`Self::lock_patience`] *and* seeing no heartbeat for as long, so with a patience of
    /// at least twice this interval a coordinator that is still locking is not rolled back.
    /// A run that resumes a pending attempt (the message delivered again) writes one before
    /// locking, which keeps the sweeper away as well. Each costs one write (and two index
    /// writes): a lock phase shorter than the interval writes none. `Duration::ZERO` turns
    /// heartbeats off: contenders then roll a holder back after the patience alone, which
    /// suits transactions that always finish within one invocation.
    pub fn heartbeat_every(&self) -> Duration {
        self.heartbeat_every
    }

    /// Restarts of an aborted attempt within one invocation.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Transactions of a batch run at once; also item writes of one finalize.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// The idempotency horizon: completed records are kept this long (must equal the
    /// sweeper's retention). Messages older than this (by source arrival time) are refused
    /// as `too_old` instead of applied: their record may be gone.
    pub fn retain(&self) -> Duration {
        self.retain
    }

    /// The longest a message can be delivered again (queue retention, redrive); `retain`
    /// must not be shorter.
    pub fn redelivery_horizon(&self) -> Duration {
        self.redelivery_horizon
    }

    /// Run a transaction of at most [`FAST_MAX_REQUESTS`](super::FAST_MAX_REQUESTS) requests
    /// as one `TransactWriteItems` with its header (the fast path; default on). Off: every
    /// transaction takes the lock path (item locks, saved images), as large ones always do.
    pub fn fast_path(&self) -> bool {
        self.fast_path
    }

    /// Commit the fast-path transactions of one batch together, up to 100 actions per
    /// `TransactWriteItems` (group commit; default on, needs `fast_path`).
    pub fn group_commit(&self) -> bool {
        self.group_commit
    }

    /// Items locked by one `TransactWriteItems` on the lock path (1 to 99; default 99): one
    /// round trip and one header check per chunk. 1 locks item by item.
    pub fn lock_chunk(&self) -> usize {
        self.lock_chunk
    }

    /// The lock path reads its items with strongly consistent `BatchGetItem`s (100 keys each,
    /// sent at once) while it creates the record, and finalizes a commit it made without
    /// reading the items again (default on). Off: one `GetItem` per item after the record,
    /// and a read before each finalize.
    pub fn read_ahead(&self) -> bool {
        self.read_ahead
    }
}

/// Builds a validated [`TxConfig`] (see [`TxConfig::builder`]).
#[must_use]
#[derive(Debug, Clone)]
pub struct TxConfigBuilder {
    config: TxConfig,
}

impl TxConfigBuilder {
    /// Replace the tables requests may touch (at least one, not the TX table).
    pub fn allowed_tables<I, S>(mut self, tables: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.allowed_tables = tables.into_iter().map(Into::into).collect();
        self
    }

    /// How long to wait on a pending transaction's lock before rolling it back (default
    /// 1 s; at least twice the heartbeat
    /// interval).
    pub fn lock_patience(mut self, patience: Duration) -> Self {
        self.config.lock_patience = patience;
        self
    }

    /// The heartbeat interval (default
    /// 250 ms; `Duration::ZERO`: off),
    /// see [`TxConfig::heartbeat_every`].
    pub fn heartbeat_every(mut self, every: Duration) -> Self {
        self.config.heartbeat_every = every;
        self
    }

    /// Restarts of an aborted attempt within one invocation (default
    /// 5; at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.config.max_attempts = attempts;
        self
    }

    /// Transactions of a batch run at once, and item writes of one finalize (default
    /// 8; at least 1).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.config.concurrency = concurrency;
        self
    }

    /// The idempotency horizon (default 15 days; not
    /// shorter than the redelivery horizon), see [`TxConfig::retain`].
    pub fn retain(mut self, retain: Duration) -> Self {
        self.config.retain = retain;
        self
    }

    /// The longest a message can be delivered again (default
    /// 14 days).
    pub fn redelivery_horizon(mut self, horizon: Duration) -> Self {
        self.config.redelivery_horizon = horizon;
        self
    }

    /// The fast path (default on), see [`TxConfig::fast_path`].
    pub fn fast_path(mut self, on: bool) -> Self {
        self.config.fast_path = on;
        self
    }

    /// Group commit of a batch's fast-path transactions (default on), see
    /// [`TxConfig::group_commit`].
    pub fn group_commit(mut self, on: bool) -> Self {
        self.config.group_commit = on;
        self
    }

    /// Items locked by one `TransactWriteItems` on the lock path (1 to 99; default 99).
    pub fn lock_chunk(mut self, items: usize) -> Self {
        self.config.lock_chunk = items;
        self
    }

    /// Read-ahead on the lock path (default on), see [`TxConfig::read_ahead`].
    pub fn read_ahead(mut self, on: bool) -> Self {
        self.config.read_ahead = on;
        self
    }

    /// The config, once its settings pass the checks (an allow-list without the TX table,
    /// the retention covering the redelivery horizon, the patience at least twice the
    /// heartbeat interval, each figure in its range); the error names the setting at fault.
    pub fn build(self) -> Result<TxConfig, ConfigError> {
        self.config.validate()?;
        let c = &self.config;
        if c.max_attempts == 0 {
            return Err(ConfigError::new("max_attempts", "must be at least 1"));
        }
        if c.concurrency == 0 {
            return Err(ConfigError::new("concurrency", "must be at least 1"));
        }
        if !(1..=super::FAST_MAX_REQUESTS).contains(&c.lock_chunk) {
            return Err(ConfigError::new("lock_chunk", "must be 1 to 99"));
        }
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(builder: TxConfigBuilder) -> String {
        builder.build().expect_err("refused").setting
    }

    #[test]
    fn build_refuses_an_allow_list_without_tables_or_with_the_tx_table() {
        assert_eq!(
            refused(TxConfig::builder("Tx", Vec::<String>::new())),
            "allowed_tables"
        );
        assert_eq!(
            refused(TxConfig::builder("Tx", ["A", "Tx"])),
            "allowed_tables"
        );
    }

    #[test]
    fn build_refuses_a_patience_under_two_heartbeats_unless_heartbeats_are_off() {
        let b = TxConfig::builder("Tx", ["Accounts"]).lock_patience(Duration::from_millis(400));
        assert_eq!(refused(b.clone()), "lock_patience_ms");
        assert!(b.heartbeat_every(Duration::ZERO).build().is_ok());
    }

    #[test]
    fn build_refuses_figures_out_of_range() {
        let b = TxConfig::builder("Tx", ["Accounts"]);
        assert_eq!(refused(b.clone().max_attempts(0)), "max_attempts");
        assert_eq!(refused(b.clone().concurrency(0)), "concurrency");
        assert_eq!(refused(b.clone().lock_chunk(0)), "lock_chunk");
        assert_eq!(refused(b.clone().lock_chunk(100)), "lock_chunk");
        let c = b.lock_chunk(1).fast_path(false).build().expect("valid");
        assert_eq!(c.to_builder().build().as_ref(), Ok(&c));
        assert_eq!((c.lock_chunk(), c.fast_path()), (1, false));
    }
}
