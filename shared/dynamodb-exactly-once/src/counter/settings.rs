//! The counter's configuration from named settings (see [`crate::config`]).

use std::time::Duration;

use super::aggregation::Aggregation;
use super::{CounterConfig, CounterConfigBuilder};
use crate::config::{colon_pair, ConfigError, Configured, FromSettings, Settings};

impl FromSettings for CounterConfig {
    const NAMES: &'static [&'static str] = &[
        "table",
        "mode",
        "journal_table",
        "attribute_prefix",
        "window_seconds",
        "window_buckets",
        "max_keys_per_second",
        "item_budget_bytes",
        "other_data_bytes",
        "concurrency",
        "max_record_age_seconds",
        "change_group_by",
        "change_key_attribute",
        "change_sort_key",
        "change_count",
        "change_sum",
        "cache_keys",
        "journal_spread",
    ];

    /// `table` (required), `mode` (`journal` or `inline`; default `journal` when
    /// `journal_table` is set, else `inline`), `journal_table`, `attribute_prefix`, `window_seconds`, `window_buckets`,
    /// `max_keys_per_second`, `item_budget_bytes`, `other_data_bytes`, `concurrency`,
    /// `max_record_age_seconds` (the age guard; default the window), `cache_keys` (the
    /// warm-redelivery cache, `0`: off), `journal_spread` (journal mode), and the
    /// aggregation of item changes: `change_group_by` (set: changes aggregated),
    /// `change_key_attribute` (default `PK`), `change_sort_key` (`attribute:value`, a constant
    /// sort key), `change_count` (a counter of live items) and `change_sum`
    /// (`counter:attribute,…`); at least one counter.
    fn from_settings(s: &Settings<'_>) -> Result<Self, ConfigError> {
        let mut b = CounterConfig::builder(s.required("table")?);
        if let Some(journal) = mode_from_settings(s)? {
            b = b.journal(journal);
        }
        if let Some(v) = s.get("attribute_prefix") {
            b = b.attribute_prefix(v);
        }
        if let Some(v) = s.parse("window_seconds")? {
            b = b.window(Duration::from_secs(v));
        }
        if let Some(v) = s.parse("window_buckets")? {
            b = b.window_buckets(v);
        }
        if let Some(v) = s.parse("max_keys_per_second")? {
            b = b.max_keys_per_second(v);
        }
        b = sizes_from_settings(s, b)?;
        if let Some(v) = s.parse("max_record_age_seconds")? {
            b = b.max_record_age(Duration::from_secs(v));
        }
        if let Some(aggregation) = aggregation_from_settings(s)? {
            b = b.aggregation(aggregation);
        }
        b.build()
    }
}

/// `item_budget_bytes`, `other_data_bytes`, `concurrency`, `cache_keys`, `journal_spread`.
fn sizes_from_settings(
    s: &Settings<'_>,
    mut b: CounterConfigBuilder,
) -> Result<CounterConfigBuilder, ConfigError> {
    if let Some(v) = s.parse("item_budget_bytes")? {
        b = b.item_budget_bytes(v);
    }
    if let Some(v) = s.parse("other_data_bytes")? {
        b = b.other_data_bytes(v);
    }
    if let Some(v) = s.parse("concurrency")? {
        b = b.concurrency(v);
    }
    if let Some(v) = s.parse("cache_keys")? {
        b = b.cache_keys(v);
    }
    if let Some(v) = s.parse("journal_spread")? {
        b = b.journal_spread(v);
    }
    Ok(b)
}

/// `Some(journal table)` in journal mode.
fn mode_from_settings(s: &Settings<'_>) -> Result<Option<String>, ConfigError> {
    let journal = s.get("journal_table");
    match (s.get("mode").as_deref(), journal) {
        (None | Some("journal"), Some(table)) => Ok(Some(table)),
        (None | Some("inline"), _) => Ok(None),
        (Some("journal"), None) => Err(ConfigError::new(
            "journal_table",
            "is required with `mode` journal (the table of the journal items)",
        )),
        (Some(_), _) => Err(ConfigError::new("mode", "must be `journal` or `inline`")),
    }
}

/// The `change_*` settings.
fn aggregation_from_settings(s: &Settings<'_>) -> Result<Option<Aggregation>, ConfigError> {
    let Some(group_by) = s.get("change_group_by") else {
        return Ok(None);
    };
    let sums = s
        .list("change_sum")
        .unwrap_or_default()
        .iter()
        .map(|pair| colon_pair("change_sum", pair))
        .collect::<Result<Vec<_>, _>>()?;
    let sort_key = s
        .get("change_sort_key")
        .map(|v| colon_pair("change_sort_key", &v))
        .transpose()?;
    let mut builder = Aggregation::builder(group_by);
    if let Some(attribute) = s.get("change_key_attribute") {
        builder = builder.key_attribute(attribute);
    }
    if let Some((attribute, value)) = sort_key {
        builder = builder.sort_key(attribute, value);
    }
    if let Some(counter) = s.get("change_count") {
        builder = builder.count(counter);
    }
    for (counter, attribute) in sums {
        builder = builder.sum(counter, attribute);
    }
    let aggregation = builder.build().map_err(|e| {
        ConfigError::new(
            "change_group_by",
            format!("{} (`change_count` or `change_sum`)", e.message),
        )
    })?;
    Ok(Some(aggregation))
}

impl Configured for super::Counter {
    type Config = CounterConfig;

    fn new(client: aws_sdk_dynamodb::Client, config: CounterConfig) -> Self {
        super::Counter::new(client, config)
    }
}
