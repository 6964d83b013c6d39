//! Settings: configurations validated when they are built, filled from named settings
//! (strings), with errors that name the setting at fault.
//!
//! Every protocol's configuration is built by `XConfig::builder(<required>)…build()`
//! (`RatchetConfig::builder(table)` and so on), which validates it: a config that exists is
//! valid, and it is read through getters. The same
//! configuration can also be read from named string settings ([`FromSettings`]), which is how
//! the Lambda edge fills it from `<PREFIX>_<SETTING>` environment variables without knowing
//! any protocol: a setting's name is the lower-case suffix of its variable
//! (`tombstone_ttl_seconds` ↔ `RATCHET_TOMBSTONE_TTL_SECONDS`).

use std::str::FromStr;
use std::time::Duration;

/// A setting is missing or invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting {setting}: {message}")]
#[non_exhaustive]
pub struct ConfigError {
    /// The setting at fault (a [`FromSettings`] name such as `concurrency`, or, once the
    /// Lambda edge renamed it, its environment variable).
    pub setting: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error about `setting`.
    pub fn new(setting: &str, message: impl Into<String>) -> Self {
        ConfigError {
            setting: setting.to_string(),
            message: message.into(),
        }
    }

    /// The same error with the setting named as `rename` says (e.g. as an environment
    /// variable).
    pub fn renamed(self, rename: impl Fn(&str) -> String) -> Self {
        ConfigError {
            setting: rename(&self.setting),
            message: self.message,
        }
    }
}

/// Where named settings come from: a lookup that answers `None` for an unset setting.
pub struct Settings<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl std::fmt::Debug for Settings<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Settings")
    }
}

impl<'a> Settings<'a> {
    /// Settings answered by `lookup` (empty or blank values count as unset).
    pub fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Settings { lookup }
    }

    /// A setting's value, `None` when unset or blank.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// A setting that must be set.
    pub fn required(&self, name: &str) -> Result<String, ConfigError> {
        self.get(name)
            .ok_or_else(|| ConfigError::new(name, "is required"))
    }

    /// An optional setting parsed as `T`.
    pub fn parse<T: FromStr>(&self, name: &str) -> Result<Option<T>, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        self.get(name)
            .map(|v| {
                v.parse::<T>()
                    .map_err(|e| ConfigError::new(name, format!("{v:?}: {e}")))
            })
            .transpose()
    }

    /// Overwrite `target` with the setting when it is set.
    pub fn set<T: FromStr>(&self, target: &mut T, name: &str) -> Result<(), ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        if let Some(v) = self.parse::<T>(name)? {
            *target = v;
        }
        Ok(())
    }

    /// Overwrite `target` with the setting (whole seconds) when it is set.
    pub fn set_secs(&self, target: &mut Duration, name: &str) -> Result<(), ConfigError> {
        if let Some(v) = self.parse::<u64>(name)? {
            *target = Duration::from_secs(v);
        }
        Ok(())
    }

    /// Overwrite `target` with the setting (milliseconds) when it is set.
    pub fn set_millis(&self, target: &mut Duration, name: &str) -> Result<(), ConfigError> {
        if let Some(v) = self.parse::<u64>(name)? {
            *target = Duration::from_millis(v);
        }
        Ok(())
    }

    /// A comma-separated list (`a, b,,c` → `["a", "b", "c"]`), `None` when unset.
    pub fn list(&self, name: &str) -> Option<Vec<String>> {
        self.get(name).map(|v| comma_list(&v))
    }
}

/// `a, b,,c` → `["a", "b", "c"]`.
pub(crate) fn comma_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

/// `name:value`, both non-empty.
pub(crate) fn colon_pair(setting: &str, pair: &str) -> Result<(String, String), ConfigError> {
    match pair.split_once(':') {
        Some((a, b)) if !a.trim().is_empty() && !b.trim().is_empty() => {
            Ok((a.trim().to_string(), b.trim().to_string()))
        }
        _ => Err(ConfigError::new(
            setting,
            format!("{pair:?}: must be name:value"),
        )),
    }
}

/// A configuration read from named settings; every name it reads is in [`FromSettings::NAMES`].
pub trait FromSettings: Sized {
    /// Every setting read, e.g. `table`, `concurrency`, `tombstone_ttl_seconds`.
    const NAMES: &'static [&'static str];

    /// The configuration from `settings` (defaults for what is unset), built through the
    /// configuration's builder, so validated as it is built.
    fn from_settings(settings: &Settings<'_>) -> Result<Self, ConfigError>;
}

/// A protocol (or the sweeper) built from a validated configuration.
pub trait Configured: Sized {
    /// Its configuration.
    type Config: FromSettings;

    /// The protocol on `config` (built, so valid: the fallible step is
    /// [`FromSettings::from_settings`]).
    fn new(client: aws_sdk_dynamodb::Client, config: Self::Config) -> Self;
}
