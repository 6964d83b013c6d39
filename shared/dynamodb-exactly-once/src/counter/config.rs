//! Settings of the counter protocol: [`CounterConfig`] (built in `builder.rs`), the capacity
//! rule ([`Capacity`], checked when built) and the names of the protocol's own attributes.

use std::time::Duration;

use super::aggregation::Aggregation;
use crate::config::ConfigError;
use crate::ddb::item::MAX_ITEM_BYTES;

/// Default guaranteed duplicate window: 1 hour.
pub(crate) const DEFAULT_WINDOW: Duration = Duration::from_secs(3600);
/// Default number of buckets kept (the window is `W - 1` buckets long).
pub(crate) const DEFAULT_WINDOW_BUCKETS: u32 = 2;
/// Default declared rate of new keys per item and second.
pub(crate) const DEFAULT_MAX_KEYS_PER_SECOND: f64 = 1.0;
/// Default bytes of an item the keys may use in total with the other data (350 KiB: 50 KiB of
/// headroom under DynamoDB's limit).
pub(crate) const DEFAULT_ITEM_BUDGET_BYTES: usize = 350 * 1024;
/// Default allowance for the item's own data (key, counters, version).
pub(crate) const DEFAULT_OTHER_DATA_BYTES: usize = 4 * 1024;
/// Default number of items written at once.
pub(crate) const DEFAULT_CONCURRENCY: usize = 32;
/// Bytes of one stored key: 128 bits of SHA-256 as unpadded base64url.
pub const KEY_BYTES: usize = 22;
/// DynamoDB's limit on an expression's length.
pub(crate) const MAX_EXPRESSION_BYTES: usize = 4096;
/// DynamoDB's limit on operators and functions in one expression.
pub(crate) const MAX_EXPRESSION_OPERATORS: usize = 300;
/// Most buckets an item keeps per setting (W).
pub const MAX_WINDOW_BUCKETS: u32 = 24;
/// Longest window accepted (366 days): bucket times stay far from overflowing.
pub(crate) const MAX_WINDOW_SECONDS: u64 = 366 * 86_400;
/// Bytes of protocol names per bucket, at most: its attribute name without the prefix
/// (`keys_` and two 20-digit times) and its entry in the layout (`L`, two times, `_`, `,`).
const NAME_BYTES_PER_BUCKET: usize = 46 + 43;
/// Bytes of `<prefix>bucket`'s name without the prefix.
const LAYOUT_NAME_BYTES: usize = 6;

/// Where an exactly-once increment is made durable.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CounterMode {
    /// The idempotency keys live in the counter item (one conditional `UpdateItem` per item
    /// and batch, exact at once). Each write is billed by the item's size, which grows with
    /// `window × rate`: cheapest for cold counters and short windows.
    Inline,
    /// One small journal item per idempotency key in `table` (an unconditional put under a
    /// TTL of the window), summed into the counter items by the roll-up
    /// ([`super::journal::Rollup`]) from the journal's DynamoDB stream. About one write unit
    /// per event whatever the window or the rate; counters lag the journal by the roll-up's
    /// delay (see [`super::journal`]).
    Journal {
        /// The journal table (hash key [`super::journal::JOURNAL_KEY_ATTRIBUTE`], a stream
        /// with new images, TTL on [`super::journal::TTL_ATTRIBUTE`]).
        table: String,
    },
}

/// Default window of the journal mode: 14 days (SQS keeps and redrives a message that long).
pub(crate) const DEFAULT_JOURNAL_WINDOW: Duration = Duration::from_secs(14 * 86_400);

/// Settings of the counter protocol; build with [`CounterConfig::builder`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct CounterConfig {
    // Each setting is documented on its getter (`builder.rs`).
    pub(crate) table: String,
    pub(crate) mode: CounterMode,
    pub(crate) attribute_prefix: String,
    pub(crate) window: Duration,
    pub(crate) window_buckets: u32,
    pub(crate) max_keys_per_second: f64,
    pub(crate) item_budget_bytes: usize,
    pub(crate) other_data_bytes: usize,
    pub(crate) concurrency: usize,
    pub(crate) max_record_age: Option<Duration>,
    pub(crate) aggregation: Option<Aggregation>,
    pub(crate) cache_keys: usize,
    pub(crate) journal_spread: u32,
}

/// What the capacity rule computes.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// Length of one bucket.
    pub bucket_seconds: u64,
    /// Longest time a key is kept in steady state (`W × bucket_seconds`).
    pub retention_seconds: u64,
    /// Worst-case bytes of keys (and of their bucket names and layout entries) in one item.
    pub key_bytes: f64,
    /// `key_bytes + other_data_bytes`.
    pub worst_case_item_bytes: f64,
}

impl CounterConfig {
    /// The journal table, in journal mode.
    pub fn journal_table(&self) -> Option<&str> {
        match &self.mode {
            CounterMode::Journal { table } => Some(table),
            CounterMode::Inline => None,
        }
    }

    /// Length of one bucket: `window / (W - 1)`, rounded up to whole seconds.
    pub fn bucket_seconds(&self) -> u64 {
        let gaps = u64::from(self.window_buckets.saturating_sub(1)).max(1);
        self.window.as_secs().div_ceil(gaps).max(1)
    }

    /// The capacity rule's figures for this configuration (saturating: absurd settings give
    /// huge figures, never an overflow).
    pub fn capacity(&self) -> Capacity {
        let bucket_seconds = self.bucket_seconds();
        let retention_seconds = bucket_seconds.saturating_mul(u64::from(self.window_buckets));
        let key_bytes = retention_seconds as f64 * KEY_BYTES as f64 * self.max_keys_per_second
            + self.name_bytes() as f64;
        Capacity {
            bucket_seconds,
            retention_seconds,
            key_bytes,
            worst_case_item_bytes: key_bytes + self.other_data_bytes as f64,
        }
    }

    /// Bytes of protocol names in a full item: W + 1 buckets (one more while the item rolls
    /// over), each with its attribute name and its layout entry, and `<prefix>bucket`.
    fn name_bytes(&self) -> usize {
        let prefix = self.attribute_prefix.len();
        let buckets = self.window_buckets as usize + 1;
        buckets * (prefix + NAME_BYTES_PER_BUCKET) + prefix + LAYOUT_NAME_BYTES
    }

    /// The greatest `max_keys_per_second` (rounded down to 4 decimals) that passes the
    /// capacity rule with the other settings unchanged; `None` when not even the names fit.
    pub fn max_fitting_keys_per_second(&self) -> Option<f64> {
        let room =
            self.item_budget_bytes as f64 - self.other_data_bytes as f64 - self.name_bytes() as f64;
        let per_rate = self.capacity().retention_seconds as f64 * KEY_BYTES as f64;
        let mut steps = (room / per_rate * 10_000.0).floor();
        // Rounding must never make the suggestion itself too large.
        if steps / 10_000.0 * per_rate > room {
            steps -= 1.0;
        }
        let rate = steps / 10_000.0;
        (rate.is_finite() && rate > 0.0).then_some(rate)
    }

    /// Check the settings, including the capacity rule
    /// `W × bucket_seconds × KEY_BYTES × max_keys_per_second + other ≤ budget`.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_record_age.is_some_and(|age| age > self.window) {
            return Err(ConfigError::new(
                "max_record_age_seconds",
                "is longer than `window_seconds`: a redelivery older than the window could \
                 count twice",
            ));
        }
        self.check_names()?;
        self.check_figures()?;
        if !(1..=256).contains(&self.journal_spread) {
            return Err(ConfigError::new("journal_spread", "must be 1 to 256"));
        }
        match &self.mode {
            CounterMode::Inline => self.check_capacity(),
            // The keys are journal items: no item holds them, no capacity rule.
            CounterMode::Journal { table } if table.len() < 3 || table == &self.table => {
                Err(ConfigError::new(
                    "journal_table",
                    "must name a table of at least 3 characters other than `table`",
                ))
            }
            CounterMode::Journal { .. } => Ok(()),
        }
    }

    /// The table name and the attribute prefix.
    fn check_names(&self) -> Result<(), ConfigError> {
        if self.table.len() < 3 {
            return Err(ConfigError::new(
                "table",
                "a table name has at least 3 characters",
            ));
        }
        let prefix = &self.attribute_prefix;
        let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.';
        if prefix.is_empty() || prefix.len() > 64 || !prefix.chars().all(allowed) {
            return Err(ConfigError::new(
                "attribute_prefix",
                "must be 1 to 64 characters of [A-Za-z0-9_.-]",
            ));
        }
        Ok(())
    }

    /// Each figure on its own: buckets, window, rate, budget, concurrency.
    fn check_figures(&self) -> Result<(), ConfigError> {
        if self.window_buckets < 2 || self.window_buckets > MAX_WINDOW_BUCKETS {
            return Err(ConfigError::new(
                "window_buckets",
                format!(
                    "must be between 2 and {MAX_WINDOW_BUCKETS} (the window is W-1 buckets long)"
                ),
            ));
        }
        if self.window.as_secs() == 0 || self.window.as_secs() > MAX_WINDOW_SECONDS {
            return Err(ConfigError::new(
                "window_seconds",
                format!(
                    "must be between 1 second and {MAX_WINDOW_SECONDS} (366 days), got {}",
                    self.window.as_secs()
                ),
            ));
        }
        if !(self.max_keys_per_second.is_finite() && self.max_keys_per_second > 0.0) {
            return Err(ConfigError::new(
                "max_keys_per_second",
                "must be a positive number",
            ));
        }
        if self.item_budget_bytes > MAX_ITEM_BYTES {
            return Err(ConfigError::new(
                "item_budget_bytes",
                format!("must not exceed DynamoDB's item limit of {MAX_ITEM_BYTES} bytes"),
            ));
        }
        if self.concurrency == 0 {
            return Err(ConfigError::new("concurrency", "must be at least 1"));
        }
        Ok(())
    }

    /// The capacity rule: the keys of W buckets at the declared rate fit the item budget.
    fn check_capacity(&self) -> Result<(), ConfigError> {
        let c = self.capacity();
        if c.worst_case_item_bytes <= self.item_budget_bytes as f64 {
            return Ok(());
        }
        let lower = match self.max_fitting_keys_per_second() {
            Some(rate) => format!("lower `max_keys_per_second` (at most {rate} fits)"),
            None => "raise `item_budget_bytes` (no rate fits)".to_string(),
        };
        Err(ConfigError::new(
            "window_seconds",
            format!(
                "the key window cannot fit in one item: {w} buckets × {b} s × {k} bytes × \
                 {r} keys/s per item = {kb:.0} bytes of keys and bucket names, + {o} bytes of \
                 other data = {total:.0} > budget {budget} bytes. Shorten the window, use more \
                 buckets, {lower} or split the counter over more items",
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

    /// `<prefix>bucket`: the item's layout, the list of its key buckets.
    pub fn bucket_attribute(&self) -> String {
        format!("{}bucket", self.attribute_prefix)
    }

    /// `<prefix>forgot`: the epoch second before which records may have had their key removed
    /// from the item (the newest span end of any bucket a write removed; absent until the
    /// first removal). A record that arrived before it is kept as `too_old`, whatever the
    /// window setting says.
    pub fn forgotten_attribute(&self) -> String {
        format!("{}forgot", self.attribute_prefix)
    }

    /// `<prefix>version`: the version of [`Counter::put_versioned`](super::Counter::put_versioned).
    pub fn version_attribute(&self) -> String {
        format!("{}version", self.attribute_prefix)
    }

    /// `<prefix>updated`: epoch ms of the last versioned write.
    pub fn updated_attribute(&self) -> String {
        format!("{}updated", self.attribute_prefix)
    }

    /// Whether `name` starts with the protocol's prefix (payloads cannot write it).
    pub(crate) fn is_protocol_attribute(&self, name: &str) -> bool {
        name.starts_with(&self.attribute_prefix)
            || super::marker::PrefixMarker::new(&self.attribute_prefix).reserves(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults, whose fields the tests then change (the builder would refuse some).
    fn defaults() -> CounterConfig {
        CounterConfig::builder("counters").build().expect("valid")
    }

    #[test]
    fn default_configuration_fits_and_chunks_within_expression_limits() {
        let c = defaults();
        assert!(c.validate().is_ok());
        assert_eq!(c.bucket_seconds(), 3600);
        assert_eq!(c.capacity().retention_seconds, 7200);
        assert!(c.max_keys_per_write() >= 50);
        assert_eq!(c.max_keys_per_write(), 70);
        let w = c.window_buckets() as usize;
        let terms = c.max_keys_per_write() * w;
        // Terms, the guard of a first write (W guessed layouts), the age term and AND / NOT.
        assert!(terms * 24 + 32 + 14 * w + 48 <= MAX_EXPRESSION_BYTES);
        assert!(terms * 2 + 1 + 2 * w + 4 + 2 <= MAX_EXPRESSION_OPERATORS);
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
            let mut c = defaults();
            c.window = Duration::from_secs(window);
            c.window_buckets = buckets;
            c.max_keys_per_second = 1e6;
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
            let mut c = defaults();
            c.window = Duration::from_secs(window);
            c.window_buckets = 24;
            c.max_keys_per_second = 1e-300;
            let err = c.validate().expect_err("absurd window");
            assert_eq!(err.setting, "window_seconds", "{}", err.message);
            let _ = c.capacity();
            let _ = c.bucket_seconds();
        }
    }

    #[test]
    fn each_invalid_setting_names_its_variable() {
        let with = |f: fn(&mut CounterConfig)| {
            let mut c = defaults();
            f(&mut c);
            c.validate().map_err(|e| e.setting)
        };
        assert_eq!(with(|c| c.table = "ab".into()), Err("table".into()));
        assert_eq!(
            with(|c| c.attribute_prefix = "c tr".into()),
            Err("attribute_prefix".into())
        );
        assert_eq!(with(|c| c.window_buckets = 1), Err("window_buckets".into()));
        assert_eq!(
            with(|c| c.window = Duration::ZERO),
            Err("window_seconds".into())
        );
        assert_eq!(
            with(|c| c.max_keys_per_second = f64::NAN),
            Err("max_keys_per_second".into())
        );
        assert_eq!(
            with(|c| c.item_budget_bytes = MAX_ITEM_BYTES + 1),
            Err("item_budget_bytes".into())
        );
        assert_eq!(with(|c| c.concurrency = 0), Err("concurrency".into()));
        assert_eq!(
            with(|c| c.max_keys_per_second = 100.0),
            Err("window_seconds".into())
        );
    }
}
