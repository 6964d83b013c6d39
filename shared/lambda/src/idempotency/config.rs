//! The layer's settings, validated when built.

use std::time::Duration;

use dynamodb_exactly_once::ConfigError;

/// How long a completed record is kept by default (Powertools' default too).
pub const DEFAULT_EXPIRES_AFTER: Duration = Duration::from_secs(3600);
/// How long a run holds its key when the caller gives no deadline.
pub const DEFAULT_IN_PROGRESS_EXPIRY: Duration = Duration::from_secs(900);
/// Completed keys kept in the process's cache by default.
pub const DEFAULT_CACHE_KEYS: usize = 1000;
/// Longest key stored as it is; a longer one is stored as its SHA-256.
pub const MAX_KEY_BYTES: usize = 1024;

/// Settings of an [`Idempotency`](super::Idempotency) layer; build with
/// [`IdempotencyConfig::builder`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyConfig {
    /// Prefix of every stored key (e.g. the function's name), so that two functions sharing
    /// a table never share keys.
    pub namespace: String,
    /// How long a completed run's result is kept (its record's TTL): a duplicate arriving
    /// later runs again.
    pub expires_after: Duration,
    /// How long a run holds its key when the caller gives no deadline.
    pub in_progress_expiry: Duration,
    /// Refuse a key seen before with another payload (`PayloadMismatch`).
    pub validate_payload: bool,
    /// Completed keys answered from memory, without a call (`0`: none).
    pub cache_keys: usize,
    /// `false`: the handler runs every time, nothing is stored (unit tests).
    pub enabled: bool,
}

impl IdempotencyConfig {
    /// A builder with the defaults, keys under `namespace`.
    pub fn builder(namespace: impl Into<String>) -> IdempotencyConfigBuilder {
        IdempotencyConfigBuilder {
            config: IdempotencyConfig {
                namespace: namespace.into(),
                expires_after: DEFAULT_EXPIRES_AFTER,
                in_progress_expiry: DEFAULT_IN_PROGRESS_EXPIRY,
                validate_payload: true,
                cache_keys: DEFAULT_CACHE_KEYS,
                enabled: true,
            },
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.namespace.is_empty() || self.namespace.len() > 256 {
            return Err(ConfigError::new(
                "namespace",
                "must be 1 to 256 bytes (e.g. the function's name)",
            ));
        }
        if self.expires_after < Duration::from_secs(1) {
            return Err(ConfigError::new("expires_after", "must be at least 1 s"));
        }
        if self.in_progress_expiry < Duration::from_secs(1)
            || self.in_progress_expiry > self.expires_after
        {
            return Err(ConfigError::new(
                "in_progress_expiry",
                "must be at least 1 s and at most expires_after",
            ));
        }
        Ok(())
    }
}

/// Builds a validated [`IdempotencyConfig`].
#[derive(Debug, Clone)]
pub struct IdempotencyConfigBuilder {
    config: IdempotencyConfig,
}

impl IdempotencyConfigBuilder {
    /// How long a completed result is kept (default [`DEFAULT_EXPIRES_AFTER`]).
    pub fn expires_after(mut self, after: Duration) -> Self {
        self.config.expires_after = after;
        self
    }

    /// How long a run without a deadline holds its key (default
    /// [`DEFAULT_IN_PROGRESS_EXPIRY`]).
    pub fn in_progress_expiry(mut self, expiry: Duration) -> Self {
        self.config.in_progress_expiry = expiry;
        self
    }

    /// Whether a key seen with another payload is refused (default `true`).
    pub fn validate_payload(mut self, on: bool) -> Self {
        self.config.validate_payload = on;
        self
    }

    /// Completed keys kept in memory (default [`DEFAULT_CACHE_KEYS`]; `0`: no cache).
    pub fn cache_keys(mut self, keys: usize) -> Self {
        self.config.cache_keys = keys;
        self
    }

    /// `false` turns the layer off: the handler always runs (for unit tests).
    pub fn enabled(mut self, on: bool) -> Self {
        self.config.enabled = on;
        self
    }

    /// The configuration, once valid.
    pub fn build(self) -> Result<IdempotencyConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}
