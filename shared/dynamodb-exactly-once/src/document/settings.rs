//! The document protocol's configuration from named settings (see [`crate::config`]).

use super::config::DocumentConfig;
use crate::config::{ConfigError, Configured, FromSettings, Settings};

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
