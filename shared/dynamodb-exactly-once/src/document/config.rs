//! Settings of the document protocol: the table, the prefix of the protocol's own attributes,
//! the write concurrency and the retry bound of guarded writes.

use std::time::Duration;

pub(crate) use super::format::DEFAULT_ATTRIBUTE_PREFIX;
use crate::config::ConfigError;
use crate::ddb::retry::Backoff;

/// Default number of items written at once.
pub(crate) const DEFAULT_CONCURRENCY: usize = 32;
/// Default retries of a guarded write (`list_remove`, `replace`) that lost a race.
pub(crate) const DEFAULT_MAX_RETRIES: usize = 8;
/// The span of a token epoch: an operation token stays in the item at least this long after
/// it landed, whatever the number of writes in between (see the module docs: lost responses).
pub const TOKEN_EPOCH: Duration = Duration::from_secs(30);
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
