//! Settings of the counter protocol: [`CounterConfig`], the capacity rule ([`Capacity`],
//! [`CounterConfig::validate`]) and the names of the protocol's own attributes.

use std::time::Duration;

use crate::config::ConfigError;
use crate::ddb::item::MAX_ITEM_BYTES;

/// Default prefix of the protocol's own attributes (payloads cannot write names with it).
pub const DEFAULT_ATTRIBUTE_PREFIX: &str = "ctr_";
/// Default guaranteed duplicate window: 1 hour.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(3600);
/// Default number of buckets kept (the window is `W - 1` buckets long).
pub const DEFAULT_WINDOW_BUCKETS: u32 = 2;
/// Default declared rate of new keys per item and second.
pub const DEFAULT_MAX_KEYS_PER_SECOND: f64 = 1.0;
/// Default bytes of an item the keys may use in total with the other data (350 KiB: 50 KiB of
/// headroom under DynamoDB's limit).
pub const DEFAULT_ITEM_BUDGET_BYTES: usize = 350 * 1024;
/// Default allowance for the item's own data (key, counters, version).
pub const DEFAULT_OTHER_DATA_BYTES: usize = 4 * 1024;
/// Default number of items written at once.
pub const DEFAULT_CONCURRENCY: usize = 32;
/// Bytes of one stored key: 128 bits of SHA-256 as unpadded base64url.
pub const KEY_BYTES: usize = 22;
/// DynamoDB's limit on an expression's length.
pub const MAX_EXPRESSION_BYTES: usize = 4096;
/// DynamoDB's limit on operators and functions in one expression.
pub const MAX_EXPRESSION_OPERATORS: usize = 300;

/// Settings of the counter protocol.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterConfig {
    /// The table written.
    pub table: String,
    /// Prefix of the protocol attributes (`<prefix>bucket`, `<prefix>keys_<b>`,
    /// `<prefix>version`, `<prefix>updated`).
    pub attribute_prefix: String,
    /// Duplicates are always rejected within this time of the first application.
    pub window: Duration,
    /// Buckets kept in the item (W ≥ 2); buckets are `window / (W - 1)` long.
    pub window_buckets: u32,
    /// Declared upper bound of new keys per item and second (capacity rule).
    pub max_keys_per_second: f64,
    /// Bytes of an item the protocol may plan for (≤ 400 KiB).
    pub item_budget_bytes: usize,
    /// Bytes reserved for the item's own data.
    pub other_data_bytes: usize,
    /// How many items are written at once.
    pub concurrency: usize,
}

/// What the capacity rule computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// Length of one bucket.
    pub bucket_seconds: u64,
    /// Longest time a key is kept (`W × bucket_seconds`).
    pub retention_seconds: u64,
    /// Worst-case bytes of keys (and their bucket attribute names) in one item.
    pub key_bytes: f64,
    /// `key_bytes + other_data_bytes`.
    pub worst_case_item_bytes: f64,
}

impl CounterConfig {
    /// Defaults for `table`.
    pub fn new(table: impl Into<String>) -> Self {
        CounterConfig {
            table: table.into(),
            attribute_prefix: DEFAULT_ATTRIBUTE_PREFIX.into(),
            window: DEFAULT_WINDOW,
            window_buckets: DEFAULT_WINDOW_BUCKETS,
            max_keys_per_second: DEFAULT_MAX_KEYS_PER_SECOND,
            item_budget_bytes: DEFAULT_ITEM_BUDGET_BYTES,
            other_data_bytes: DEFAULT_OTHER_DATA_BYTES,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }

    /// Length of one bucket: `window / (W - 1)`, rounded up to whole seconds.
    pub fn bucket_seconds(&self) -> u64 {
        let gaps = u64::from(self.window_buckets.saturating_sub(1)).max(1);
        self.window.as_secs().div_ceil(gaps).max(1)
    }

    /// The capacity rule's figures for this configuration.
    pub fn capacity(&self) -> Capacity {
        let bucket_seconds = self.bucket_seconds();
        let retention_seconds = bucket_seconds * u64::from(self.window_buckets);
        // Bucket attribute names: prefix + "keys_" + up to 20 digits, plus `<prefix>bucket`.
        let names = (self.attribute_prefix.len() + 25) * (self.window_buckets as usize + 1);
        let key_bytes =
            retention_seconds as f64 * KEY_BYTES as f64 * self.max_keys_per_second + names as f64;
        Capacity {
            bucket_seconds,
            retention_seconds,
            key_bytes,
            worst_case_item_bytes: key_bytes + self.other_data_bytes as f64,
        }
    }

    /// Keys per `UpdateItem` that keep the condition within DynamoDB's expression limits: each
    /// key costs W `contains` terms joined by `OR` (2 operators and about 24 bytes each).
    pub fn max_keys_per_write(&self) -> usize {
        let w = self.window_buckets.max(1) as usize;
        let by_operators = (MAX_EXPRESSION_OPERATORS - 12) / (2 * w);
        let by_length = (MAX_EXPRESSION_BYTES - 128) / (24 * w);
        by_operators.min(by_length).max(1)
    }

    /// Check the settings, including the capacity rule
    /// `W × bucket_seconds × KEY_BYTES × max_keys_per_second + other ≤ budget`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_names()?;
        self.check_figures()?;
        self.check_capacity()
    }

    /// The table name and the attribute prefix.
    fn check_names(&self) -> Result<(), ConfigError> {
        if self.table.len() < 3 {
            return Err(ConfigError::new(
                "COUNTER_TABLE",
                "a table name has at least 3 characters",
            ));
        }
        let prefix = &self.attribute_prefix;
        let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.';
        if prefix.is_empty() || prefix.len() > 64 || !prefix.chars().all(allowed) {
            return Err(ConfigError::new(
                "COUNTER_ATTRIBUTE_PREFIX",
                "must be 1 to 64 characters of [A-Za-z0-9_.-]",
            ));
        }
        Ok(())
    }

    /// Each figure on its own: buckets, window, rate, budget, concurrency.
    fn check_figures(&self) -> Result<(), ConfigError> {
        if self.window_buckets < 2 || self.window_buckets > 24 {
            return Err(ConfigError::new(
                "COUNTER_WINDOW_BUCKETS",
                "must be between 2 and 24 (the window is W-1 buckets long)",
            ));
        }
        if self.window.as_secs() == 0 {
            return Err(ConfigError::new(
                "COUNTER_WINDOW_SECONDS",
                "must be at least 1 second",
            ));
        }
        if !(self.max_keys_per_second.is_finite() && self.max_keys_per_second > 0.0) {
            return Err(ConfigError::new(
                "COUNTER_MAX_KEYS_PER_SECOND",
                "must be a positive number",
            ));
        }
        if self.item_budget_bytes > MAX_ITEM_BYTES {
            return Err(ConfigError::new(
                "COUNTER_ITEM_BUDGET_BYTES",
                format!("must not exceed DynamoDB's item limit of {MAX_ITEM_BYTES} bytes"),
            ));
        }
        if self.concurrency == 0 {
            return Err(ConfigError::new(
                "COUNTER_CONCURRENCY",
                "must be at least 1",
            ));
        }
        Ok(())
    }

    /// The capacity rule: the keys of W buckets at the declared rate fit the item budget.
    fn check_capacity(&self) -> Result<(), ConfigError> {
        let c = self.capacity();
        if c.worst_case_item_bytes <= self.item_budget_bytes as f64 {
            return Ok(());
        }
        let max_rate = (self.item_budget_bytes as f64 - self.other_data_bytes as f64).max(0.0)
            / (c.retention_seconds as f64 * KEY_BYTES as f64);
        Err(ConfigError::new(
            "COUNTER_WINDOW_SECONDS",
            format!(
                "the key window cannot fit in one item: {w} buckets × {b} s × {k} bytes × \
                 {r} keys/s per item = {kb:.0} bytes of keys, + {o} bytes of other data = \
                 {total:.0} > budget {budget} bytes. Shorten the window, use more buckets, \
                 lower COUNTER_MAX_KEYS_PER_SECOND (at most {max_rate:.4} fits) or split \
                 the counter over more items",
                w = self.window_buckets,
                b = c.bucket_seconds,
                k = KEY_BYTES,
                r = self.max_keys_per_second,
                kb = c.key_bytes,
                o = self.other_data_bytes,
                total = c.worst_case_item_bytes,
                budget = self.item_budget_bytes,
            ),
        ))
    }

    /// `<prefix>bucket`: the item's current bucket.
    pub fn bucket_attribute(&self) -> String {
        format!("{}bucket", self.attribute_prefix)
    }

    /// `<prefix>keys_<bucket>`: the keys applied while the item was in `bucket`.
    pub fn keys_attribute(&self, bucket: u64) -> String {
        format!("{}keys_{bucket}", self.attribute_prefix)
    }

    /// `<prefix>version`: the version of [`Counter::put_versioned`](super::Counter::put_versioned).
    pub fn version_attribute(&self) -> String {
        format!("{}version", self.attribute_prefix)
    }

    /// `<prefix>updated`: epoch ms of the last versioned write.
    pub fn updated_attribute(&self) -> String {
        format!("{}updated", self.attribute_prefix)
    }

    /// The bucket of a `<prefix>keys_<bucket>` attribute name (`None`: another attribute).
    pub(super) fn bucket_of_keys_attribute(&self, name: &str) -> Option<u64> {
        name.strip_prefix(&self.attribute_prefix)?
            .strip_prefix("keys_")?
            .parse()
            .ok()
    }

    /// Whether `name` starts with the protocol's prefix (payloads cannot write it).
    pub(super) fn is_protocol_attribute(&self, name: &str) -> bool {
        name.starts_with(&self.attribute_prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_configuration_fits_and_chunks_within_expression_limits() {
        let c = CounterConfig::new("counters");
        assert!(c.validate().is_ok());
        assert_eq!(c.bucket_seconds(), 3600);
        assert_eq!(c.capacity().retention_seconds, 7200);
        assert!(c.max_keys_per_write() >= 50);
        let w = c.window_buckets as usize;
        let terms = c.max_keys_per_write() * w;
        assert!(terms * 24 + 128 <= MAX_EXPRESSION_BYTES);
        assert!(terms * 2 + 12 <= MAX_EXPRESSION_OPERATORS);
    }

    /// The rate a refusal suggests, read back from its message.
    fn suggested_rate(c: &CounterConfig) -> f64 {
        let err = c.validate().expect_err("refused");
        err.message
            .split("at most ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no suggested rate in: {}", err.message))
    }

    #[test]
    fn the_suggested_maximum_rate_is_itself_accepted() {
        for (window, buckets) in [(3600, 2), (86_400, 2), (600, 24), (7, 3)] {
            let mut c = CounterConfig::new("counters");
            c.window = Duration::from_secs(window);
            c.window_buckets = buckets;
            c.max_keys_per_second = 100.0;
            let rate = suggested_rate(&c);
            c.max_keys_per_second = rate;
            assert!(
                c.validate().is_ok(),
                "window {window} s, W {buckets}: the suggested {rate} is refused: {:?}",
                c.validate()
            );
        }
    }

    #[test]
    fn absurd_windows_are_refused_without_overflowing() {
        for window in [u64::MAX, u64::MAX / 2, 1 << 40] {
            let mut c = CounterConfig::new("counters");
            c.window = Duration::from_secs(window);
            c.window_buckets = 24;
            c.max_keys_per_second = 1e-300;
            let err = c.validate().expect_err("absurd window");
            assert_eq!(err.name, "COUNTER_WINDOW_SECONDS", "{}", err.message);
            let _ = c.capacity();
            let _ = c.bucket_seconds();
        }
    }

    #[test]
    fn each_invalid_setting_names_its_variable() {
        let with = |f: fn(&mut CounterConfig)| {
            let mut c = CounterConfig::new("counters");
            f(&mut c);
            c.validate().map_err(|e| e.name)
        };
        assert_eq!(with(|c| c.table = "ab".into()), Err("COUNTER_TABLE".into()));
        assert_eq!(
            with(|c| c.attribute_prefix = "c tr".into()),
            Err("COUNTER_ATTRIBUTE_PREFIX".into())
        );
        assert_eq!(
            with(|c| c.window_buckets = 1),
            Err("COUNTER_WINDOW_BUCKETS".into())
        );
        assert_eq!(
            with(|c| c.window = Duration::ZERO),
            Err("COUNTER_WINDOW_SECONDS".into())
        );
        assert_eq!(
            with(|c| c.max_keys_per_second = f64::NAN),
            Err("COUNTER_MAX_KEYS_PER_SECOND".into())
        );
        assert_eq!(
            with(|c| c.item_budget_bytes = MAX_ITEM_BYTES + 1),
            Err("COUNTER_ITEM_BUDGET_BYTES".into())
        );
        assert_eq!(
            with(|c| c.concurrency = 0),
            Err("COUNTER_CONCURRENCY".into())
        );
        assert_eq!(
            with(|c| c.max_keys_per_second = 100.0),
            Err("COUNTER_WINDOW_SECONDS".into())
        );
    }
}
