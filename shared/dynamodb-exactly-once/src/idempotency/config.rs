//! The layer's settings, validated when built.

use std::time::Duration;

use crate::ConfigError;

/// How long a completed record is kept by default (Powertools' default too).
pub(crate) const DEFAULT_EXPIRES_AFTER: Duration = Duration::from_secs(3600);
/// How long a run holds its key when the caller gives no deadline.
pub(crate) const DEFAULT_IN_PROGRESS_EXPIRY: Duration = Duration::from_secs(900);
/// Completed keys kept in the process's cache by default.
pub(crate) const DEFAULT_CACHE_KEYS: usize = 1000;
/// Bytes of results (and their keys) kept in the process's cache by default.
pub(crate) const DEFAULT_CACHE_BYTES: usize = 4 * 1024 * 1024;
/// Longest key stored as it is; a longer one is stored as its SHA-256.
pub const MAX_KEY_BYTES: usize = 1024;
/// The environment variables that turn the layer off when `true` or `1` (the second is
/// Powertools' own).
pub const DISABLED_ENV: [&str; 2] = ["IDEMPOTENCY_DISABLED", "POWERTOOLS_IDEMPOTENCY_DISABLED"];

/// What the Lambda edge's `run_record` and `tower` layer do with a record or request that gives no key.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingKey {
    /// [`IdempotencyError::Key`](super::IdempotencyError::Key): the function does not run
    /// (the processor rejects the record).
    #[default]
    Reject,
    /// Run the function without idempotency (a warning; `Run::NotStored`), as Powertools
    /// does unless `raise_on_no_idempotency_key`.
    Run,
}

/// Which part of a payload is hashed and compared across calls of one key.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadCheck {
    /// No check.
    Off,
    /// The whole payload.
    Whole,
    /// The values at these JSON pointers (one: that value; several: the array of them; a
    /// missing one counts as `null`).
    At(Vec<String>),
}

/// Settings of an [`Idempotency`](super::Idempotency) layer; build with
/// [`IdempotencyConfig::builder`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyConfig {
    /// Prefix of every stored key (the function's name), so that two functions sharing a
    /// table never share keys. No `#`.
    pub(crate) namespace: String,
    /// How long a completed run's result is kept, from its completion (its record's TTL): a
    /// duplicate arriving later runs again.
    pub(crate) expires_after: Duration,
    /// How long a run holds its key when the caller gives no deadline.
    pub(crate) in_progress_expiry: Duration,
    /// Which part of a payload must be the same across calls of one key (else
    /// `PayloadMismatch`).
    pub(crate) payload_check: PayloadCheck,
    /// Completed keys answered from memory, without a call (`0`: none).
    pub(crate) cache_keys: usize,
    /// Bytes of results kept in memory at most.
    pub(crate) cache_bytes: usize,
    /// What a record without a key does.
    pub(crate) on_missing_key: MissingKey,
    /// `false`: the handler runs every time, nothing is stored.
    pub(crate) enabled: bool,
    /// The operation is the whole key prefix (Powertools' `key_prefix`), without the
    /// namespace.
    pub(crate) operation_as_key_prefix: bool,
}

impl IdempotencyConfig {
    /// Prefix of every stored key (the function's name), so that two functions sharing a
    /// table never share keys. No `#`.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// How long a completed run's result is kept, from its completion (its record's TTL): a
    /// duplicate arriving later runs again.
    pub fn expires_after(&self) -> Duration {
        self.expires_after
    }

    /// How long a run holds its key when the caller gives no deadline.
    pub fn in_progress_expiry(&self) -> Duration {
        self.in_progress_expiry
    }

    /// Which part of a payload must be the same across calls of one key (else
    /// `PayloadMismatch`).
    pub fn payload_check(&self) -> &PayloadCheck {
        &self.payload_check
    }

    /// Completed keys answered from memory, without a call (`0`: none).
    pub fn cache_keys(&self) -> usize {
        self.cache_keys
    }

    /// Bytes of results kept in memory at most.
    pub fn cache_bytes(&self) -> usize {
        self.cache_bytes
    }

    /// What a record without a key does.
    pub fn on_missing_key(&self) -> MissingKey {
        self.on_missing_key
    }

    /// `false`: the handler runs every time, nothing is stored.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether the operation is the whole key prefix (Powertools' `key_prefix`).
    pub fn operation_as_key_prefix(&self) -> bool {
        self.operation_as_key_prefix
    }
}

impl IdempotencyConfig {
    /// A builder with the defaults, keys under `namespace`; turned off when an environment
    /// variable of [`DISABLED_ENV`] is `true` or `1`.
    pub fn builder(namespace: impl Into<String>) -> IdempotencyConfigBuilder {
        Self::builder_reading(namespace, |name| std::env::var(name).ok())
    }

    /// [`IdempotencyConfig::builder`] with the environment read through `env` (tests).
    #[doc(hidden)]
    pub fn builder_reading(
        namespace: impl Into<String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> IdempotencyConfigBuilder {
        IdempotencyConfigBuilder {
            config: IdempotencyConfig {
                namespace: namespace.into(),
                expires_after: DEFAULT_EXPIRES_AFTER,
                in_progress_expiry: DEFAULT_IN_PROGRESS_EXPIRY,
                payload_check: PayloadCheck::Whole,
                cache_keys: DEFAULT_CACHE_KEYS,
                cache_bytes: DEFAULT_CACHE_BYTES,
                on_missing_key: MissingKey::Reject,
                enabled: !disabled_by(env),
                operation_as_key_prefix: false,
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
        if self.namespace.contains('#') {
            return Err(ConfigError::new(
                "namespace",
                "must not contain `#`, which separates it from the operation and the key",
            ));
        }
        if self.expires_after < Duration::from_secs(1) {
            return Err(ConfigError::new("expires_after", "must be at least 1 s"));
        }
        if self.in_progress_expiry < Duration::from_secs(1) {
            return Err(ConfigError::new(
                "in_progress_expiry",
                "must be at least 1 s",
            ));
        }
        if let PayloadCheck::At(pointers) = &self.payload_check {
            if pointers.is_empty() || pointers.iter().any(|p| !p.starts_with('/')) {
                return Err(ConfigError::new(
                    "validate_payload_at",
                    "takes one or more JSON pointers (`/detail/orderId`)",
                ));
            }
        }
        Ok(())
    }
}

/// Whether a variable of [`DISABLED_ENV`], as `lookup` reads it, is `true` or `1`.
fn disabled_by(lookup: impl Fn(&str) -> Option<String>) -> bool {
    DISABLED_ENV.iter().any(|name| {
        lookup(name).is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_switch_reads_true_or_1_from_either_variable() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(disabled_by(env(&[("IDEMPOTENCY_DISABLED", "true")])));
        assert!(disabled_by(env(&[(
            "POWERTOOLS_IDEMPOTENCY_DISABLED",
            "1"
        )])));
        assert!(!disabled_by(env(&[("IDEMPOTENCY_DISABLED", "false")])));
        assert!(!disabled_by(env(&[])));
    }
}

/// Builds a validated [`IdempotencyConfig`].
#[derive(Debug, Clone)]
pub struct IdempotencyConfigBuilder {
    config: IdempotencyConfig,
}

impl IdempotencyConfigBuilder {
    /// How long a completed result is kept (default 1 h), counted
    /// from its completion. A run in progress holds its key until its deadline, however
    /// short this is.
    pub fn expires_after(mut self, after: Duration) -> Self {
        self.config.expires_after = after;
        self
    }

    /// How long a run without a deadline holds its key (default
    /// 15 min).
    pub fn in_progress_expiry(mut self, expiry: Duration) -> Self {
        self.config.in_progress_expiry = expiry;
        self
    }

    /// Whether a key seen with another payload is refused (default `true`: the whole
    /// payload; see [`validate_payload_at`](Self::validate_payload_at)).
    pub fn validate_payload(mut self, on: bool) -> Self {
        self.config.payload_check = if on {
            PayloadCheck::Whole
        } else {
            PayloadCheck::Off
        };
        self
    }

    /// Compare only the values at these JSON pointers (Powertools'
    /// `payload_validation_jmespath`), e.g. `["/detail"]` for EventBridge events whose `id`
    /// and `time` differ on every resend.
    pub fn validate_payload_at<S: Into<String>>(
        mut self,
        pointers: impl IntoIterator<Item = S>,
    ) -> Self {
        self.config.payload_check =
            PayloadCheck::At(pointers.into_iter().map(Into::into).collect());
        self
    }

    /// Completed keys kept in memory (default 1000; `0`: no cache).
    pub fn cache_keys(mut self, keys: usize) -> Self {
        self.config.cache_keys = keys;
        self
    }

    /// Bytes of results kept in memory at most (default 4 MiB); a larger
    /// result is not cached.
    pub fn cache_bytes(mut self, bytes: usize) -> Self {
        self.config.cache_bytes = bytes;
        self
    }

    /// What a record without a key does (default [`MissingKey::Reject`]).
    pub fn on_missing_key(mut self, what: MissingKey) -> Self {
        self.config.on_missing_key = what;
        self
    }

    /// `true`: the operation is the whole key prefix, without the namespace, as Powertools'
    /// `@idempotent_function(.., key_prefix=..)` (Python 3.x): stored keys
    /// are `<operation>#<md5>` in Powertools' format (`<operation>#<key>` in the native
    /// one), and the operation may then hold a `.` or a `#` (default `false`:
    /// `<namespace>.<operation>#<md5>`, Powertools' default prefix).
    pub fn operation_as_key_prefix(mut self, on: bool) -> Self {
        self.config.operation_as_key_prefix = on;
        self
    }

    /// `false` turns the layer off: the handler always runs (for unit tests; the
    /// environment's [`DISABLED_ENV`] does the same).
    pub fn enabled(mut self, on: bool) -> Self {
        self.config.enabled = on;
        self
    }

    /// The configuration, once valid. A configuration turned off (by [`DISABLED_ENV`] or
    /// [`enabled(false)`](Self::enabled)) logs a WARN naming why: every run then runs the
    /// function, stores nothing and says so (`Run::NotStored`, `stats().disabled`).
    pub fn build(self) -> Result<IdempotencyConfig, ConfigError> {
        self.config.validate()?;
        if !self.config.enabled {
            tracing::warn!(namespace = %self.config.namespace, switch = %DISABLED_ENV.join(" or "),
                "idempotency is turned off (the environment variable `IDEMPOTENCY_DISABLED` or `POWERTOOLS_IDEMPOTENCY_DISABLED`, or `enabled(false)`): every duplicate runs its function again");
        }
        Ok(self.config)
    }
}
