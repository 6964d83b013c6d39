//! Invalid settings, with errors that name the setting (and, at the Lambda edge, the
//! environment variable) at fault.

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
