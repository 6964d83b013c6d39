//! Settings of the ratchet protocol: [`RatchetConfig`] (the table, the protocol's attribute
//! names, the tombstone lifetime and the write concurrency), its defaults and its validation;
//! built in `builder.rs` (with the getters), from named settings in `settings.rs`.

use std::time::Duration;

use crate::config::ConfigError;

/// Default tombstone lifetime: 7 days.
pub(crate) const DEFAULT_TOMBSTONE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default number of keys written at once.
pub(crate) const DEFAULT_CONCURRENCY: usize = 32;

/// Settings of the ratchet protocol; build with [`RatchetConfig::builder`] (a config that
/// exists is valid).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatchetConfig {
    pub(crate) table: String,
    pub(crate) ts_attribute: String,
    pub(crate) deleted_attribute: String,
    pub(crate) ttl_attribute: String,
    pub(crate) tie_break_attribute: String,
    pub(crate) tombstone_ttl: Duration,
    pub(crate) concurrency: usize,
    pub(crate) max_record_age: Option<Duration>,
    pub(crate) lifetime_ledger: Option<super::LifetimeLedger>,
    pub(crate) history_table: Option<String>,
    pub(crate) replication: Option<Replication>,
    pub(crate) cache_keys: usize,
}

/// The settings naming [`RatchetConfig::protocol_attributes`], in order.
pub(super) const ATTRIBUTE_SETTINGS: [&str; 4] = [
    "ts_attribute",
    "deleted_attribute",
    "ttl_attribute",
    "tie_break_attribute",
];

impl RatchetConfig {
    /// Check the settings: a table, the protocol attributes distinct and non-empty, a history
    /// table other than the table, a concurrency of at least 1, an age guard no longer than
    /// the tombstone lifetime. [`RatchetConfigBuilder::build`] calls it.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.table.is_empty() {
            return Err(ConfigError::new("table", "must not be empty"));
        }
        if self
            .max_record_age
            .is_some_and(|age| age > self.tombstone_ttl)
        {
            return Err(ConfigError::new(
                "max_record_age_seconds",
                "is longer than `tombstone_ttl_seconds`: a put older than the tombstone \
                 lifetime could revive a deleted item",
            ));
        }
        let names = self.protocol_attributes();
        for (i, n) in names.iter().enumerate() {
            let setting = ATTRIBUTE_SETTINGS[i];
            if n.is_empty() {
                return Err(ConfigError::new(setting, "must not be empty"));
            }
            if let Some(j) = names[..i].iter().position(|m| m == n) {
                return Err(ConfigError::new(
                    setting,
                    format!(
                        "attribute `{n}` is also `{}`: each protocol role needs its own",
                        ATTRIBUTE_SETTINGS[j]
                    ),
                ));
            }
        }
        if let Some(history) = &self.history_table {
            if history.is_empty() || *history == self.table {
                return Err(ConfigError::new(
                    "history_table",
                    "must name a table other than `table`",
                ));
            }
        }
        if self.concurrency == 0 {
            return Err(ConfigError::new("concurrency", "must be at least 1"));
        }
        Ok(())
    }

    /// The attributes the protocol writes (payloads cannot set them), in the order of
    /// `ATTRIBUTE_SETTINGS`.
    pub fn protocol_attributes(&self) -> [&str; 4] {
        [
            &self.ts_attribute,
            &self.deleted_attribute,
            &self.ttl_attribute,
            &self.tie_break_attribute,
        ]
    }
}

/// Source attributes never copied by default: the other protocols' own attributes (the
/// transaction's `_tx*`, the counter's and the document writer's default prefixes, the
/// versioned item's). A trailing `*` makes a prefix. The replica's own ratchet attributes
/// (timestamp, tie-break, deleted flag, TTL) are always skipped.
pub(crate) const DEFAULT_SKIP_ATTRIBUTES: [&str; 7] = [
    "_tx*",
    "ctr_*",
    "doc_*",
    "_version",
    "_deleted",
    "_writeId",
    "_writtenAt",
];

/// How the ratchet replicates item changes: [`Replication::default`] skips
/// `_tx*`, `ctr_*`, `doc_*`, `_version`, `_deleted`, `_writeId`, `_writtenAt`, [`Replication::skipping`] others.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    pub(crate) skip_attributes: Vec<String>,
}

impl Default for Replication {
    fn default() -> Self {
        Replication::skipping(DEFAULT_SKIP_ATTRIBUTES)
    }
}

impl Replication {
    /// Replication leaving out these source attributes (names, or prefixes ending in `*`)
    /// instead of `_tx*`, `ctr_*`, `doc_*`, `_version`, `_deleted`, `_writeId`, `_writtenAt`.
    pub fn skipping<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Self {
        Replication {
            skip_attributes: names.into_iter().map(Into::into).collect(),
        }
    }

    /// Source attributes not copied: names, or prefixes ending in `*`.
    pub fn skip_attributes(&self) -> &[String] {
        &self.skip_attributes
    }
}

impl Replication {
    /// Whether a source attribute is left out of the replica.
    pub fn skips(&self, config: &RatchetConfig, name: &str) -> bool {
        config.protocol_attributes().contains(&name)
            || self
                .skip_attributes
                .iter()
                .any(|s| match s.strip_suffix('*') {
                    Some(prefix) => name.starts_with(prefix),
                    None => s == name,
                })
    }
}
