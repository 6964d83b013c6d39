//! Settings from the environment, with errors that name the variable.
//!
//! Every writer function reads `<PREFIX>_*` variables ([`FunctionSpec::env_prefix`]): the
//! protocol's own settings (below), `<PREFIX>_DEAD_LETTER_TABLE` (required) and
//! `<PREFIX>_DEADLINE_MARGIN_MS` (see [`crate::writer::writer_from_env`]). Distinct prefixes
//! matter locally: `cargo lambda watch` gives every function the same environment.

use std::str::FromStr;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::counter::{
    Aggregation, Counter, CounterConfig, DEFAULT_AGGREGATE_KEY_ATTRIBUTE,
};
use dynamodb_exactly_once::document::{Document, DocumentConfig};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig, Replication};
use dynamodb_exactly_once::sweep::{SweepConfig, Sweeper};
use dynamodb_exactly_once::txn::{Coordinator, TxConfig};
use dynamodb_exactly_once::{ConfigError, Protocol};

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

fn set<T: FromStr>(target: &mut T, name: &str) -> Result<(), ConfigError>
where
    T::Err: std::fmt::Display,
{
    if let Some(v) = env_parse::<T>(name)? {
        *target = v;
    }
    Ok(())
}

fn set_secs(target: &mut Duration, name: &str) -> Result<(), ConfigError> {
    if let Some(v) = env_parse::<u64>(name)? {
        *target = Duration::from_secs(v);
    }
    Ok(())
}

fn set_ms(target: &mut Duration, name: &str) -> Result<(), ConfigError> {
    if let Some(v) = env_parse::<u64>(name)? {
        *target = Duration::from_millis(v);
    }
    Ok(())
}

/// A writer function's identity: its name (dead letters, logs, metrics) and the prefix of
/// its variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionSpec {
    /// The function's name, e.g. `ratchet-writer`.
    pub name: &'static str,
    /// The prefix of its variables, e.g. `RATCHET`.
    pub env_prefix: &'static str,
}

impl FunctionSpec {
    /// `<PREFIX>_<suffix>`.
    pub fn var(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.env_prefix)
    }
}

/// A protocol that a writer function builds from its environment.
pub trait FromEnv: Protocol + Sized {
    /// The function it runs in.
    const SPEC: FunctionSpec;

    /// The protocol from `<PREFIX>_*` variables.
    fn from_env(client: Client) -> Result<Self, ConfigError>;
}

impl FromEnv for Ratchet {
    const SPEC: FunctionSpec = FunctionSpec {
        name: "ratchet-writer",
        env_prefix: "RATCHET",
    };

    /// `RATCHET_TABLE` (required), `RATCHET_TS_ATTRIBUTE`, `RATCHET_DELETED_ATTRIBUTE`,
    /// `RATCHET_TTL_ATTRIBUTE`, `RATCHET_TIE_BREAK_ATTRIBUTE`, `RATCHET_TOMBSTONE_TTL_SECONDS`,
    /// `RATCHET_CONCURRENCY`, `RATCHET_HISTORY_TABLE` (optional: history mode),
    /// `RATCHET_CHANGES` (`replicate`: DynamoDB stream records replicated; unset or `none`:
    /// refused) and `RATCHET_CHANGE_SKIP_ATTRIBUTES` (comma-separated names or `prefix*`,
    /// replacing [`dynamodb_exactly_once::ratchet::DEFAULT_SKIP_ATTRIBUTES`]).
    fn from_env(client: Client) -> Result<Self, ConfigError> {
        let mut c = RatchetConfig::new(env_required("RATCHET_TABLE")?);
        set(&mut c.ts_attribute, "RATCHET_TS_ATTRIBUTE")?;
        set(&mut c.deleted_attribute, "RATCHET_DELETED_ATTRIBUTE")?;
        set(&mut c.ttl_attribute, "RATCHET_TTL_ATTRIBUTE")?;
        set(&mut c.tie_break_attribute, "RATCHET_TIE_BREAK_ATTRIBUTE")?;
        set_secs(&mut c.tombstone_ttl, "RATCHET_TOMBSTONE_TTL_SECONDS")?;
        set(&mut c.concurrency, "RATCHET_CONCURRENCY")?;
        c.history_table = env_opt("RATCHET_HISTORY_TABLE");
        c.replication = replication_from_env()?;
        c.validate()?;
        Ok(Ratchet::new(client, c))
    }
}

/// `RATCHET_CHANGES` and `RATCHET_CHANGE_SKIP_ATTRIBUTES`.
fn replication_from_env() -> Result<Option<Replication>, ConfigError> {
    let skip = env_opt("RATCHET_CHANGE_SKIP_ATTRIBUTES").map(|v| comma_list(&v));
    match env_opt("RATCHET_CHANGES").as_deref().map(str::trim) {
        None | Some("none") => Ok(None),
        Some("replicate") => {
            let mut replication = Replication::default();
            if let Some(skip) = skip {
                replication.skip_attributes = skip;
            }
            Ok(Some(replication))
        }
        Some(other) => Err(ConfigError::new(
            "RATCHET_CHANGES",
            format!("{other:?}: must be `replicate` or `none`"),
        )),
    }
}

/// `name:value`, both non-empty.
fn colon_pair(variable: &str, pair: &str) -> Result<(String, String), ConfigError> {
    match pair.split_once(':') {
        Some((a, b)) if !a.trim().is_empty() && !b.trim().is_empty() => {
            Ok((a.trim().to_string(), b.trim().to_string()))
        }
        _ => Err(ConfigError::new(
            variable,
            format!("{pair:?}: must be name:value"),
        )),
    }
}

/// `a, b,,c` → `["a", "b", "c"]`.
fn comma_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

/// `COUNTER_CHANGE_GROUP_BY` (set: DynamoDB stream records aggregated),
/// `COUNTER_CHANGE_KEY_ATTRIBUTE` (default `PK`), `COUNTER_CHANGE_SORT_KEY`
/// (`attribute:value`, a constant sort key), `COUNTER_CHANGE_COUNT` (a counter of live items)
/// and `COUNTER_CHANGE_SUM` (`counter:attribute,…`); at least one counter.
fn aggregation_from_env() -> Result<Option<Aggregation>, ConfigError> {
    let Some(group_by) = env_opt("COUNTER_CHANGE_GROUP_BY") else {
        return Ok(None);
    };
    let sums = env_opt("COUNTER_CHANGE_SUM")
        .map(|v| comma_list(&v))
        .unwrap_or_default()
        .iter()
        .map(|pair| colon_pair("COUNTER_CHANGE_SUM", pair))
        .collect::<Result<Vec<_>, _>>()?;
    let sort_key = env_opt("COUNTER_CHANGE_SORT_KEY")
        .map(|v| colon_pair("COUNTER_CHANGE_SORT_KEY", &v))
        .transpose()?;
    let aggregation = Aggregation {
        group_by: group_by.trim().to_string(),
        key_attribute: env_opt("COUNTER_CHANGE_KEY_ATTRIBUTE")
            .map_or(DEFAULT_AGGREGATE_KEY_ATTRIBUTE.into(), |k| {
                k.trim().to_string()
            }),
        sort_key,
        count: env_opt("COUNTER_CHANGE_COUNT").map(|c| c.trim().to_string()),
        sums,
    };
    if aggregation.count.is_none() && aggregation.sums.is_empty() {
        return Err(ConfigError::new(
            "COUNTER_CHANGE_GROUP_BY",
            "aggregation needs COUNTER_CHANGE_COUNT or COUNTER_CHANGE_SUM",
        ));
    }
    Ok(Some(aggregation))
}

impl FromEnv for Counter {
    const SPEC: FunctionSpec = FunctionSpec {
        name: "counter-writer",
        env_prefix: "COUNTER",
    };

    /// `COUNTER_TABLE` (required), `COUNTER_ATTRIBUTE_PREFIX`, `COUNTER_WINDOW_SECONDS`,
    /// `COUNTER_WINDOW_BUCKETS`, `COUNTER_MAX_KEYS_PER_SECOND`, `COUNTER_ITEM_BUDGET_BYTES`,
    /// `COUNTER_OTHER_DATA_BYTES`, `COUNTER_CONCURRENCY` and the aggregation of DynamoDB
    /// stream records (`COUNTER_CHANGE_*`, see `aggregation_from_env`), then the capacity
    /// rule: a key window that cannot fit in one item fails at start-up with the figures.
    fn from_env(client: Client) -> Result<Self, ConfigError> {
        let mut c = CounterConfig::new(env_required("COUNTER_TABLE")?);
        set(&mut c.attribute_prefix, "COUNTER_ATTRIBUTE_PREFIX")?;
        set_secs(&mut c.window, "COUNTER_WINDOW_SECONDS")?;
        set(&mut c.window_buckets, "COUNTER_WINDOW_BUCKETS")?;
        set(&mut c.max_keys_per_second, "COUNTER_MAX_KEYS_PER_SECOND")?;
        set(&mut c.item_budget_bytes, "COUNTER_ITEM_BUDGET_BYTES")?;
        set(&mut c.other_data_bytes, "COUNTER_OTHER_DATA_BYTES")?;
        set(&mut c.concurrency, "COUNTER_CONCURRENCY")?;
        c.aggregation = aggregation_from_env()?;
        c.validate()?;
        Ok(Counter::new(client, c))
    }
}

impl FromEnv for Coordinator {
    const SPEC: FunctionSpec = FunctionSpec {
        name: "tx-coordinator",
        env_prefix: "TX",
    };

    /// `TX_TABLE` (required), `TX_ALLOWED_TABLES` (required, comma-separated table names or
    /// table ARNs, see [`allowed_tables`]), `TX_LOCK_PATIENCE_MS`, `TX_HEARTBEAT_MS`
    /// (start-up fails unless the patience is at least twice the heartbeat),
    /// `TX_MAX_ATTEMPTS`, `TX_CONCURRENCY`, `TX_RETAIN_SECONDS` and
    /// `TX_REDELIVERY_HORIZON_SECONDS` (start-up fails unless retain ≥ horizon).
    fn from_env(client: Client) -> Result<Self, ConfigError> {
        let allowed = allowed_tables(&env_required("TX_ALLOWED_TABLES")?);
        let mut c = TxConfig::new(env_required("TX_TABLE")?, allowed);
        set_ms(&mut c.lock_patience, "TX_LOCK_PATIENCE_MS")?;
        set_ms(&mut c.heartbeat_every, "TX_HEARTBEAT_MS")?;
        set(&mut c.max_attempts, "TX_MAX_ATTEMPTS")?;
        set(&mut c.concurrency, "TX_CONCURRENCY")?;
        set_secs(&mut c.retain, "TX_RETAIN_SECONDS")?;
        set_secs(&mut c.redelivery_horizon, "TX_REDELIVERY_HORIZON_SECONDS")?;
        c.max_attempts = c.max_attempts.max(1);
        c.concurrency = c.concurrency.max(1);
        c.validate()?;
        Ok(Coordinator::new(client, c))
    }
}

/// The table names of `TX_ALLOWED_TABLES`: comma-separated names or table ARNs
/// (`arn:aws:dynamodb:<region>:<account>:table/<name>` stands for `<name>`), so a deployment
/// can pass the same ARNs it grants its role (`stacks/transactions.yaml`).
pub fn allowed_tables(value: &str) -> Vec<String> {
    comma_list(value)
        .into_iter()
        .map(|t| match t.split_once(":table/") {
            Some((arn, name)) if arn.starts_with("arn:") => name.to_string(),
            _ => t,
        })
        .collect()
}

/// The sweeper from `TX_TABLE` (required), `TX_STALE_AFTER_SECONDS`,
/// `TX_REDELIVERY_GAP_SECONDS` (start-up fails unless the stale threshold is longer),
/// `TX_RETAIN_SECONDS`, `TX_REDELIVERY_HORIZON_SECONDS` (start-up fails unless retain ≥
/// horizon), `TX_SWEEP_CONCURRENCY` and `TX_SWEEP_MARGIN_MS`.
pub fn sweeper_from_env(client: Client) -> Result<Sweeper, ConfigError> {
    let mut c = SweepConfig::new(env_required("TX_TABLE")?);
    set_secs(&mut c.stale_after, "TX_STALE_AFTER_SECONDS")?;
    let mut gap = dynamodb_exactly_once::sweep::DEFAULT_REDELIVERY_GAP;
    set_secs(&mut gap, "TX_REDELIVERY_GAP_SECONDS")?;
    dynamodb_exactly_once::sweep::check_stale_after(c.stale_after, gap)?;
    set(&mut c.concurrency, "TX_SWEEP_CONCURRENCY")?;
    set_secs(&mut c.retain, "TX_RETAIN_SECONDS")?;
    let mut horizon = dynamodb_exactly_once::txn::DEFAULT_REDELIVERY_HORIZON;
    set_secs(&mut horizon, "TX_REDELIVERY_HORIZON_SECONDS")?;
    dynamodb_exactly_once::txn::check_horizons(c.retain, horizon)?;
    set_ms(&mut c.deadline_margin, "TX_SWEEP_MARGIN_MS")?;
    Ok(Sweeper::new(client, c))
}

impl FromEnv for Document {
    const SPEC: FunctionSpec = FunctionSpec {
        name: "document-writer",
        env_prefix: "DOCUMENT",
    };

    /// `DOCUMENT_TABLE` (required), `DOCUMENT_ATTRIBUTE_PREFIX`, `DOCUMENT_CONCURRENCY` and
    /// `DOCUMENT_MAX_RETRIES` (retries of a guarded write that lost a race).
    fn from_env(client: Client) -> Result<Self, ConfigError> {
        let mut c = DocumentConfig::new(env_required("DOCUMENT_TABLE")?);
        set(&mut c.attribute_prefix, "DOCUMENT_ATTRIBUTE_PREFIX")?;
        set(&mut c.concurrency, "DOCUMENT_CONCURRENCY")?;
        set(&mut c.backoff.retries, "DOCUMENT_MAX_RETRIES")?;
        c.validate()?;
        Ok(Document::new(client, c))
    }
}

#[cfg(test)]
mod tests {
    use super::allowed_tables;

    #[test]
    fn allowed_tables_are_names_or_table_arns() {
        assert_eq!(
            allowed_tables(
                "AccountsTable, arn:aws:dynamodb:eu-west-1:123456789012:table/Orders,,\
                 arn:aws-cn:dynamodb:cn-north-1:123456789012:table/my.table-1"
            ),
            ["AccountsTable", "Orders", "my.table-1"]
        );
    }
}
