//! The tables of the versioning protocol, validated when built.

use crate::config::ConfigError;

/// The tables of the versioning protocol; build with [`VersioningConfig::builder`] (a config
/// that exists is valid).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersioningConfig {
    pub(crate) table: String,
    pub(crate) history_table: String,
}

impl VersioningConfig {
    /// Both tables named, and distinct ([`VersioningConfigBuilder::build`] calls it).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.table.is_empty() {
            return Err(ConfigError::new("table", "must not be empty"));
        }
        if self.history_table.is_empty() {
            return Err(ConfigError::new("history_table", "must not be empty"));
        }
        if self.table == self.history_table {
            return Err(ConfigError::new(
                "history_table",
                "the latest and the history table must be distinct",
            ));
        }
        Ok(())
    }
}
