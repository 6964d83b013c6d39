//! Settings of the ratchet protocol: the table, the protocol's attribute names, the tombstone
//! lifetime and the write concurrency.

use std::time::Duration;

use super::change::Replication;
use crate::config::ConfigError;

/// Default name of the timestamp attribute.
pub const DEFAULT_TS_ATTRIBUTE: &str = "Timestamp";
/// Default name of the tombstone flag.
pub const DEFAULT_DELETED_ATTRIBUTE: &str = "Deleted";
/// Default name of the TTL attribute (epoch seconds; enable TTL on it in the table).
pub const DEFAULT_TTL_ATTRIBUTE: &str = "TTL";
/// Default name of the tie-break attribute.
pub const DEFAULT_TIE_BREAK_ATTRIBUTE: &str = "TieBreak";
/// Default tombstone lifetime: 7 days.
pub const DEFAULT_TOMBSTONE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default number of keys written at once.
pub const DEFAULT_CONCURRENCY: usize = 32;

/// Settings of the ratchet protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatchetConfig {
    /// The table written.
    pub table: String,
    /// Timestamp attribute.
    pub ts_attribute: String,
    /// Tombstone flag attribute.
    pub deleted_attribute: String,
    /// TTL attribute (epoch seconds).
    pub ttl_attribute: String,
    /// Tie-break token attribute.
    pub tie_break_attribute: String,
    /// How long tombstones are kept.
    pub tombstone_ttl: Duration,
    /// How many keys are written at once.
    pub concurrency: usize,
    /// History mode: every record also lands in this table at its own `(key, ts, tie-break)`
    /// row (see the module's `# History mode` section); `None`: no history.
    pub history_table: Option<String>,
    /// Item changes (DynamoDB stream records) replicated as records (see [`Replication`]);
    /// `None`: changes are refused (`no_change_mapping`).
    pub replication: Option<Replication>,
}

impl RatchetConfig {
    /// Defaults for `table`.
    pub fn new(table: impl Into<String>) -> Self {
        RatchetConfig {
            table: table.into(),
            ts_attribute: DEFAULT_TS_ATTRIBUTE.into(),
            deleted_attribute: DEFAULT_DELETED_ATTRIBUTE.into(),
            ttl_attribute: DEFAULT_TTL_ATTRIBUTE.into(),
            tie_break_attribute: DEFAULT_TIE_BREAK_ATTRIBUTE.into(),
            tombstone_ttl: DEFAULT_TOMBSTONE_TTL,
            concurrency: DEFAULT_CONCURRENCY,
            history_table: None,
            replication: None,
        }
    }

    /// Check that the protocol attributes are distinct and non-empty.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let names = self.protocol_attributes();
        for (i, n) in names.iter().enumerate() {
            if n.is_empty() {
                return Err(ConfigError::new(
                    "RATCHET_*_ATTRIBUTE",
                    "attribute names must not be empty",
                ));
            }
            if names[..i].contains(n) {
                return Err(ConfigError::new(
                    "RATCHET_*_ATTRIBUTE",
                    format!("attribute `{n}` is used for two protocol roles"),
                ));
            }
        }
        if let Some(history) = &self.history_table {
            if history.is_empty() || *history == self.table {
                return Err(ConfigError::new(
                    "RATCHET_HISTORY_TABLE",
                    "must name a table other than RATCHET_TABLE",
                ));
            }
        }
        if self.concurrency == 0 {
            return Err(ConfigError::new(
                "RATCHET_CONCURRENCY",
                "must be at least 1",
            ));
        }
        Ok(())
    }

    /// The attributes the protocol writes (payloads cannot set them).
    pub fn protocol_attributes(&self) -> [&str; 4] {
        [
            &self.ts_attribute,
            &self.deleted_attribute,
            &self.ttl_attribute,
            &self.tie_break_attribute,
        ]
    }
}
