//! [`DocumentConfigBuilder`] and the getters of [`DocumentConfig`]: a config that exists is valid.

use crate::document::format::DEFAULT_ATTRIBUTE_PREFIX;
use std::time::Duration;

use super::config::{DocumentConfig, DEFAULT_CONCURRENCY, DEFAULT_MAX_RETRIES};
use crate::config::ConfigError;
use crate::ddb::retry::Backoff;

impl DocumentConfig {
    /// A builder with the defaults, writing `table`.
    pub fn builder(table: impl Into<String>) -> DocumentConfigBuilder {
        DocumentConfigBuilder {
            config: DocumentConfig {
                table: table.into(),
                attribute_prefix: DEFAULT_ATTRIBUTE_PREFIX.into(),
                concurrency: DEFAULT_CONCURRENCY,
                backoff: Backoff::new(
                    Duration::from_millis(5),
                    Duration::from_millis(200),
                    DEFAULT_MAX_RETRIES,
                ),
            },
        }
    }

    /// A builder starting from this config.
    pub fn to_builder(&self) -> DocumentConfigBuilder {
        DocumentConfigBuilder {
            config: self.clone(),
        }
    }

    /// The table written.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Prefix of the protocol's attributes; paths and documents cannot use it.
    pub fn attribute_prefix(&self) -> &str {
        &self.attribute_prefix
    }

    /// How many items are written at once (records of one item always in order, one task).
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Waits between the tries of a guarded write that lost a race (`retries` bounds them).
    pub fn backoff(&self) -> Backoff {
        self.backoff
    }
}

/// Builds a validated [`DocumentConfig`].
#[must_use]
#[derive(Debug, Clone)]
pub struct DocumentConfigBuilder {
    pub(super) config: DocumentConfig,
}

impl DocumentConfigBuilder {
    /// Prefix of the protocol's attributes (default `"doc_"`; non-empty,
    /// no `.`, `[` or `]`; fixed once data exists, see the module's *Layout*).
    pub fn attribute_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.attribute_prefix = prefix.into();
        self
    }

    /// How many items are written at once (default 32; at least 1).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.config.concurrency = concurrency;
        self
    }

    /// Waits between the tries of a guarded write that lost a race (default: 5 ms to 200 ms,
    /// 8 retries).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.config.backoff = backoff;
        self
    }

    /// The config, or the first setting at fault: an empty table, an empty prefix or one with
    /// `.`, `[` or `]`, a concurrency of 0.
    pub fn build(self) -> Result<DocumentConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(builder: DocumentConfigBuilder) -> String {
        builder.build().expect_err("an invalid setting").setting
    }

    #[test]
    fn build_refuses_an_invalid_setting_by_name() {
        assert_eq!(refused(DocumentConfig::builder("")), "table");
        let b = || DocumentConfig::builder("T");
        assert_eq!(refused(b().attribute_prefix("")), "attribute_prefix");
        assert_eq!(refused(b().attribute_prefix("a.b")), "attribute_prefix");
        assert_eq!(refused(b().concurrency(0)), "concurrency");
    }

    #[test]
    fn getters_return_what_was_set_and_the_defaults_otherwise() {
        let defaults = DocumentConfig::builder("T").build().expect("valid");
        assert_eq!(defaults.table(), "T");
        assert_eq!(defaults.attribute_prefix(), DEFAULT_ATTRIBUTE_PREFIX);
        assert_eq!(defaults.concurrency(), DEFAULT_CONCURRENCY);
        assert_eq!(defaults.backoff().retries, DEFAULT_MAX_RETRIES);
        let once = Backoff::new(Duration::from_millis(1), Duration::from_millis(2), 1);
        let c = DocumentConfig::builder("T")
            .attribute_prefix("d_")
            .concurrency(2)
            .backoff(once)
            .build()
            .expect("valid");
        assert_eq!(
            (c.attribute_prefix(), c.concurrency(), c.backoff()),
            ("d_", 2, once)
        );
        assert_eq!(c.version_attribute(), "d_version");
        assert_eq!(c.to_builder().build(), Ok(c));
    }
}
