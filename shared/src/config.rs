//! Settings from the environment, with errors that name the variable.

use std::str::FromStr;

/// A setting is missing or invalid.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration {name}: {message}")]
pub struct ConfigError {
    /// The variable (or setting) at fault.
    pub name: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error about `name`.
    pub fn new(name: &str, message: impl Into<String>) -> Self {
        ConfigError {
            name: name.to_string(),
            message: message.into(),
        }
    }
}

/// A variable that must be set and non-empty.
pub fn env_required(name: &str) -> Result<String, ConfigError> {
    env_opt(name).ok_or_else(|| ConfigError::new(name, "is required"))
}

/// A variable that may be absent (empty counts as absent).
pub fn env_opt(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// An optional variable parsed as `T`.
pub fn env_parse<T: FromStr>(name: &str) -> Result<Option<T>, ConfigError>
where
    T::Err: std::fmt::Display,
{
    env_opt(name)
        .map(|v| {
            v.trim()
                .parse::<T>()
                .map_err(|e| ConfigError::new(name, format!("{v:?}: {e}")))
        })
        .transpose()
}
