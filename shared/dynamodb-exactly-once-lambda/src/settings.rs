//! Settings from the environment, with errors that name the variable.
//!
//! A protocol's configuration is read from `<PREFIX>_<SETTING>` variables, one per name of
//! its [`FromSettings::NAMES`] (`RATCHET_TOMBSTONE_TTL_SECONDS` is the ratchet's
//! `tombstone_ttl_seconds`) and built, so validated, by its builder
//! ([`FromSettings::from_settings`]); the protocol is then built from it
//! ([`Configured::new`]). This module knows no protocol: a new one only implements those two
//! traits. A writer function also reads `<PREFIX>_DEAD_LETTER_SINK` (`table`, with
//! `<PREFIX>_DEAD_LETTER_TABLE`; `sqs`, with `<PREFIX>_DEAD_LETTER_QUEUE_URL`; `report`),
//! `<PREFIX>_DEADLINE_MARGIN_MS`, `<PREFIX>_DEPLOYMENT`, `<PREFIX>_EVENT_TIME_POINTER` and
//! `<PREFIX>_RECORD_MAPPING` (see [`crate::writer::writer_from_env`]). Distinct prefixes matter locally: `cargo lambda watch`
//! gives every function the same environment.

use std::str::FromStr;

use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::config::{Configured, FromSettings, Settings};
use dynamodb_exactly_once::ConfigError;

/// A variable that may be absent (empty counts as absent).
pub(crate) fn env_opt(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// An optional variable parsed as `T`.
pub(crate) fn env_parse<T: FromStr>(name: &str) -> Result<Option<T>, ConfigError>
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

/// A function's identity: its name (dead letters, logs, metrics) and the prefix of its
/// variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FunctionSpec {
    /// The function's name, e.g. `ratchet-writer`.
    pub name: &'static str,
    /// The prefix of its variables, e.g. `RATCHET`.
    pub env_prefix: &'static str,
}

impl FunctionSpec {
    /// A function named `name` (dead letters, logs, metrics) reading `<env_prefix>_*`.
    pub const fn new(name: &'static str, env_prefix: &'static str) -> Self {
        FunctionSpec { name, env_prefix }
    }

    /// `<PREFIX>_<SETTING>` in upper case.
    pub fn var(&self, setting: &str) -> String {
        format!("{}_{}", self.env_prefix, setting.to_ascii_uppercase())
    }

    /// The configuration `C` from this function's variables; errors name the variable.
    pub fn config_from_env<C: FromSettings>(&self) -> Result<C, ConfigError> {
        let lookup = |setting: &str| env_opt(&self.var(setting));
        C::from_settings(&Settings::new(&lookup)).map_err(|e| e.renamed(|s| self.var(s)))
    }

    /// `P` from this function's variables, validated; errors name the variable.
    pub fn from_env<P: Configured>(&self, client: Client) -> Result<P, ConfigError> {
        let config = self.config_from_env::<P::Config>()?;
        Ok(P::new(client, config))
    }
}

/// The ready functions of this repository (`functions/<name>`): their names and prefixes.
pub mod functions {
    use super::FunctionSpec;

    /// `ratchet-writer`: `RATCHET_*`.
    pub const RATCHET_WRITER: FunctionSpec = FunctionSpec {
        name: "ratchet-writer",
        env_prefix: "RATCHET",
    };
    /// `counter-writer`: `COUNTER_*`.
    pub const COUNTER_WRITER: FunctionSpec = FunctionSpec {
        name: "counter-writer",
        env_prefix: "COUNTER",
    };
    /// `document-writer`: `DOCUMENT_*`.
    pub const DOCUMENT_WRITER: FunctionSpec = FunctionSpec {
        name: "document-writer",
        env_prefix: "DOCUMENT",
    };
    /// `tx-coordinator`: `TX_*`.
    pub const TX_COORDINATOR: FunctionSpec = FunctionSpec {
        name: "tx-coordinator",
        env_prefix: "TX",
    };
    /// `counter-rollup`: `COUNTER_*` (counter-writer's settings, journal mode).
    pub const COUNTER_ROLLUP: FunctionSpec = FunctionSpec {
        name: "counter-rollup",
        env_prefix: "COUNTER",
    };
    /// `tx-sweeper`: `TX_*` (the coordinator's table settings; `TX_DEAD_LETTER_TABLE` and
    /// `TX_DEPLOYMENT` for the records it retires, see [`crate::run::sweeper_from_env`]).
    pub const TX_SWEEPER: FunctionSpec = FunctionSpec {
        name: "tx-sweeper",
        env_prefix: "TX",
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::offline_client;

    #[test]
    fn an_invalid_setting_is_reported_as_its_variable() {
        let spec = FunctionSpec {
            name: "settings-test",
            env_prefix: "SETTINGSTEST",
        };
        // Variables of this test's own prefix only: nothing else reads them.
        std::env::set_var("SETTINGSTEST_TABLE", "Counters");
        std::env::set_var("SETTINGSTEST_WINDOW_SECONDS", "86400");
        std::env::set_var("SETTINGSTEST_MAX_KEYS_PER_SECOND", "10");
        let err = spec
            .from_env::<dynamodb_exactly_once::counter::Counter>(offline_client())
            .expect_err("a day at 10 keys/s cannot fit in one item");
        assert_eq!(err.setting, "SETTINGSTEST_WINDOW_SECONDS");
        std::env::set_var("SETTINGSTEST_CONCURRENCY", "many");
        let err = spec
            .from_env::<dynamodb_exactly_once::counter::Counter>(offline_client())
            .expect_err("not a number");
        assert_eq!(err.setting, "SETTINGSTEST_CONCURRENCY");
    }

    #[test]
    fn a_variable_is_the_prefix_and_the_setting_in_upper_case() {
        assert_eq!(
            functions::RATCHET_WRITER.var("tombstone_ttl_seconds"),
            "RATCHET_TOMBSTONE_TTL_SECONDS"
        );
    }
}
