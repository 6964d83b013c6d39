//! The transaction protocol's configuration from named settings (see [`crate::config`]).

use std::time::Duration;

use super::builder::TxConfigBuilder;
use super::config::TxConfig;
use crate::config::{ConfigError, Configured, FromSettings, Settings};

impl FromSettings for TxConfig {
    const NAMES: &'static [&'static str] = &[
        "table",
        "allowed_tables",
        "lock_patience_ms",
        "heartbeat_ms",
        "max_attempts",
        "concurrency",
        "retain_seconds",
        "redelivery_horizon_seconds",
        "fast_path",
        "group_commit",
        "lock_chunk",
        "read_ahead",
    ];

    /// `table` and `allowed_tables` (comma-separated table names or table ARNs,
    /// `arn:aws:dynamodb:<region>:<account>:table/<name>` standing for `<name>`, so a
    /// deployment can pass the ARNs it grants its role) required, `lock_patience_ms`,
    /// `heartbeat_ms`, `max_attempts`, `concurrency`, `retain_seconds` and
    /// `redelivery_horizon_seconds`, `fast_path`, `group_commit` and `read_ahead` (`true` | `false`), `lock_chunk` (1–99).
    fn from_settings(s: &Settings<'_>) -> Result<Self, ConfigError> {
        let allowed = s
            .list("allowed_tables")
            .ok_or_else(|| ConfigError::new("allowed_tables", "is required"))?
            .into_iter()
            .map(table_name)
            .collect::<Vec<_>>();
        let mut b = TxConfig::builder(s.required("table")?, allowed);
        if let Some(ms) = s.parse("lock_patience_ms")? {
            b = b.lock_patience(Duration::from_millis(ms));
        }
        if let Some(ms) = s.parse("heartbeat_ms")? {
            b = b.heartbeat_every(Duration::from_millis(ms));
        }
        if let Some(n) = s.parse::<u32>("max_attempts")? {
            b = b.max_attempts(n.max(1));
        }
        if let Some(n) = s.parse::<usize>("concurrency")? {
            b = b.concurrency(n.max(1));
        }
        if let Some(secs) = s.parse("retain_seconds")? {
            b = b.retain(Duration::from_secs(secs));
        }
        if let Some(secs) = s.parse("redelivery_horizon_seconds")? {
            b = b.redelivery_horizon(Duration::from_secs(secs));
        }
        switches_from_settings(s, b)?.build()
    }
}

/// `fast_path`, `group_commit`, `lock_chunk` (clamped to 1–99) and `read_ahead`.
fn switches_from_settings(
    s: &Settings<'_>,
    mut b: TxConfigBuilder,
) -> Result<TxConfigBuilder, ConfigError> {
    if let Some(on) = s.parse("fast_path")? {
        b = b.fast_path(on);
    }
    if let Some(on) = s.parse("group_commit")? {
        b = b.group_commit(on);
    }
    if let Some(n) = s.parse::<usize>("lock_chunk")? {
        b = b.lock_chunk(n.clamp(1, super::FAST_MAX_REQUESTS));
    }
    if let Some(on) = s.parse("read_ahead")? {
        b = b.read_ahead(on);
    }
    Ok(b)
}

/// A table name, or the name in a table ARN.
fn table_name(entry: String) -> String {
    match entry.split_once(":table/") {
        Some((arn, name)) if arn.starts_with("arn:") => name.to_string(),
        _ => entry,
    }
}

impl Configured for super::Coordinator {
    type Config = TxConfig;

    fn new(client: aws_sdk_dynamodb::Client, config: TxConfig) -> Self {
        super::Coordinator::new(client, config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_tables_are_names_or_table_arns() {
        let lookup = |name: &str| match name {
            "table" => Some("TxTable".to_string()),
            "allowed_tables" => Some(
                "AccountsTable, arn:aws:dynamodb:eu-west-1:123456789012:table/Orders,,\
                 arn:aws-cn:dynamodb:cn-north-1:123456789012:table/my.table-1"
                    .to_string(),
            ),
            _ => None,
        };
        let c = TxConfig::from_settings(&Settings::new(&lookup)).expect("settings");
        let names: Vec<&str> = c.allowed_tables().iter().map(String::as_str).collect();
        assert_eq!(names, ["AccountsTable", "Orders", "my.table-1"]);
    }
}
