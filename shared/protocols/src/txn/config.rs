//! [`TxConfig`]: the settings of the transaction protocol.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::config::ConfigError;

/// Default wait on a pending transaction's lock before rolling it back.
pub const DEFAULT_LOCK_PATIENCE: Duration = Duration::from_millis(1000);
/// Default restarts of an aborted attempt within one invocation.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Default transactions (and item writes) in flight at once.
pub const DEFAULT_CONCURRENCY: usize = 8;

/// Settings of the transaction protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxConfig {
    /// The TX table.
    pub table: String,
    /// Tables requests may touch.
    pub allowed_tables: BTreeSet<String>,
    /// How long to wait on a pending transaction's lock before rolling it back.
    pub lock_patience: Duration,
    /// Restarts of an aborted attempt within one invocation.
    pub max_attempts: u32,
    /// Transactions of a batch run at once; also item writes of one finalize.
    pub concurrency: usize,
}

impl TxConfig {
    /// Defaults for the TX table `table` and the given allow-list.
    pub fn new<I, S>(table: impl Into<String>, allowed: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        TxConfig {
            table: table.into(),
            allowed_tables: allowed.into_iter().map(Into::into).collect(),
            lock_patience: DEFAULT_LOCK_PATIENCE,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }

    /// Check that the allow-list names a table and not the TX table itself.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.allowed_tables.is_empty() {
            return Err(ConfigError::new("TX_ALLOWED_TABLES", "names no table"));
        }
        if self.allowed_tables.contains(&self.table) {
            return Err(ConfigError::new(
                "TX_ALLOWED_TABLES",
                "must not include the TX table",
            ));
        }
        Ok(())
    }
}
