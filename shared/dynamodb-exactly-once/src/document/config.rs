//! Settings of the document protocol: the table, the prefix of the protocol's own attributes,
//! the write concurrency and the retry bound of guarded writes.

use std::time::Duration;

use crate::config::{ConfigError, Configured, FromSettings, Settings};
use crate::ddb::retry::Backoff;

/// Default prefix of the protocol's attributes (`doc_version`, `doc_tok`, `doc_tokp`,
/// `doc_toke`).
pub(crate) const DEFAULT_ATTRIBUTE_PREFIX: &str = "doc_";
/// Default number of items written at once.
pub(crate) const DEFAULT_CONCURRENCY: usize = 32;
/// Default retries of a guarded write (`list_remove`, `replace`) that lost a race.
pub(crate) const DEFAULT_MAX_RETRIES: usize = 8;
/// The span of a token epoch: an operation token stays in the item at least this long after
/// it landed, whatever the number of writes in between (see the module docs: lost responses).
pub const TOKEN_EPOCH: Duration = Duration::from_secs(30);
/// Operation-token slots of items written before the token sets (`doc_op0` … `doc_op3`): read,
/// never written.
pub(super) const LEGACY_OP_SLOTS: u64 = 4;
/// The most bytes a token set holds in the size check of a replace (two tokens: an item
/// written now and then; a busier item's sets are larger, see the module docs).
const TOKEN_BYTES_CHECKED: usize = 2 * 16;

/// Settings of the document protocol; build with [`DocumentConfig::builder`] (a config that
/// exists is valid).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentConfig {
    pub(crate) table: String,
    pub(crate) attribute_prefix: String,
    pub(crate) concurrency: usize,
    pub(crate) backoff: Backoff,
}

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

    /// Check the settings ([`DocumentConfigBuilder::build`] calls it).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.table.is_empty() {
            return Err(ConfigError::new("table", "must not be empty"));
        }
        let prefix_ok =
            !self.attribute_prefix.is_empty() && !self.attribute_prefix.contains(['.', '[', ']']);
        if !prefix_ok {
            return Err(ConfigError::new(
                "attribute_prefix",
                "must be non-empty and contain no `.`, `[` or `]`",
            ));
        }
        if self.concurrency == 0 {
            return Err(ConfigError::new("concurrency", "must be at least 1"));
        }
        Ok(())
    }

    /// The version attribute: bumped by one by every applied write.
    pub fn version_attribute(&self) -> String {
        format!("{}version", self.attribute_prefix)
    }

    /// The operation tokens of the item's current token epoch (a binary set).
    pub fn token_attribute(&self) -> String {
        format!("{}tok", self.attribute_prefix)
    }

    /// The operation tokens of the token set before the current one (a binary set).
    pub fn previous_tokens_attribute(&self) -> String {
        format!("{}tokp", self.attribute_prefix)
    }

    /// The token epoch of [`DocumentConfig::token_attribute`] (a number: epoch milliseconds
    /// divided by [`TOKEN_EPOCH`]).
    pub fn token_epoch_attribute(&self) -> String {
        format!("{}toke", self.attribute_prefix)
    }

    /// Operation-token slot `n mod 4` of items written before the token sets (read only).
    pub fn op_slot(&self, n: u64) -> String {
        format!("{}op{}", self.attribute_prefix, n % LEGACY_OP_SLOTS)
    }

    /// The bytes the protocol's attributes add to an item written now and then (as DynamoDB
    /// counts them): the version (a number of up to 20 digits), the token epoch and two
    /// 16-byte tokens. A busier item holds more tokens (16 bytes per write of the last one to
    /// two token epochs).
    pub fn protocol_bytes(&self) -> usize {
        let version = self.version_attribute().len() + 11;
        let slots = self.token_attribute().len()
            + self.previous_tokens_attribute().len()
            + self.token_epoch_attribute().len()
            + 11
            + TOKEN_BYTES_CHECKED;
        // The prefix marker (`_docL` and 6 hex digits) under a prefix other than the default.
        let marker = if self.attribute_prefix == DEFAULT_ATTRIBUTE_PREFIX {
            0
        } else {
            super::PREFIX_MARKER_ATTRIBUTE.len() + 6
        };
        version + slots + marker
    }

    /// Whether a top-level attribute name belongs to the protocol (its prefix, or the prefix
    /// marker `_docL`).
    pub fn is_protocol_attribute(&self, name: &str) -> bool {
        name.starts_with(&self.attribute_prefix) || name == super::PREFIX_MARKER_ATTRIBUTE
    }
}

impl FromSettings for DocumentConfig {
    const NAMES: &'static [&'static str] =
        &["table", "attribute_prefix", "concurrency", "max_retries"];

    /// `table` (required), `attribute_prefix`, `concurrency` and `max_retries` (retries of a
    /// guarded write that lost a race).
    fn from_settings(s: &Settings<'_>) -> Result<Self, ConfigError> {
        let mut b = DocumentConfig::builder(s.required("table")?);
        let c = &mut b.config;
        s.set(&mut c.attribute_prefix, "attribute_prefix")?;
        s.set(&mut c.concurrency, "concurrency")?;
        s.set(&mut c.backoff.retries, "max_retries")?;
        b.build()
    }
}

impl Configured for super::Document {
    type Config = DocumentConfig;

    fn new(client: aws_sdk_dynamodb::Client, config: DocumentConfig) -> Self {
        super::Document::new(client, config)
    }
}

/// Builds a validated [`DocumentConfig`].
#[must_use]
#[derive(Debug, Clone)]
pub struct DocumentConfigBuilder {
    config: DocumentConfig,
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
