//! [`VersioningConfigBuilder`] and the getters of [`VersioningConfig`]: a config that exists is valid.

use super::config::VersioningConfig;
use crate::config::ConfigError;

impl VersioningConfig {
    /// A builder on the latest table `table` and its history table `history_table`.
    pub fn builder(
        table: impl Into<String>,
        history_table: impl Into<String>,
    ) -> VersioningConfigBuilder {
        VersioningConfigBuilder {
            config: VersioningConfig {
                table: table.into(),
                history_table: history_table.into(),
            },
        }
    }

    /// A builder starting from this config.
    pub fn to_builder(&self) -> VersioningConfigBuilder {
        VersioningConfigBuilder {
            config: self.clone(),
        }
    }

    /// The latest table (the item's own key schema).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The history table ([`HISTORY_KEY`](super::HISTORY_KEY) (S) +
    /// [`HISTORY_VERSION`](super::HISTORY_VERSION) (N)).
    pub fn history_table(&self) -> &str {
        &self.history_table
    }
}

/// Builds a validated [`VersioningConfig`].
#[must_use]
#[derive(Debug, Clone)]
pub struct VersioningConfigBuilder {
    pub(super) config: VersioningConfig,
}

impl VersioningConfigBuilder {
    /// The config, or the first setting at fault: an empty table, an empty history table or
    /// one that is the latest table.
    pub fn build(self) -> Result<VersioningConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(table: &str, history_table: &str) -> String {
        let built = VersioningConfig::builder(table, history_table).build();
        built.expect_err("an invalid setting").setting
    }

    #[test]
    fn build_refuses_an_invalid_setting_by_name() {
        assert_eq!(refused("", "H"), "table");
        assert_eq!(refused("T", ""), "history_table");
        assert_eq!(refused("T", "T"), "history_table");
    }

    #[test]
    fn getters_return_what_was_set() {
        let c = VersioningConfig::builder("T", "H").build().expect("valid");
        assert_eq!((c.table(), c.history_table()), ("T", "H"));
        assert_eq!(c.to_builder().build(), Ok(c));
    }
}
