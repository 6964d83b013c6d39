//! [`CounterConfigBuilder`] and the getters of [`CounterConfig`]: a config that exists is
//! valid (the capacity rule included).

use std::time::Duration;

use super::aggregation::Aggregation;
use super::config::{
    CounterConfig, CounterMode, DEFAULT_CONCURRENCY, DEFAULT_ITEM_BUDGET_BYTES,
    DEFAULT_JOURNAL_WINDOW, DEFAULT_MAX_KEYS_PER_SECOND, DEFAULT_OTHER_DATA_BYTES, DEFAULT_WINDOW,
    DEFAULT_WINDOW_BUCKETS,
};
use super::marker::DEFAULT_ATTRIBUTE_PREFIX;
use crate::config::ConfigError;

impl CounterConfig {
    /// A builder with the defaults for `table`: inline keys, window 1 h (14 days
    /// with [`CounterConfigBuilder::journal`]).
    pub fn builder(table: impl Into<String>) -> CounterConfigBuilder {
        CounterConfigBuilder {
            config: CounterConfig {
                table: table.into(),
                mode: CounterMode::Inline,
                attribute_prefix: DEFAULT_ATTRIBUTE_PREFIX.into(),
                window: DEFAULT_WINDOW,
                window_buckets: DEFAULT_WINDOW_BUCKETS,
                max_keys_per_second: DEFAULT_MAX_KEYS_PER_SECOND,
                item_budget_bytes: DEFAULT_ITEM_BUDGET_BYTES,
                other_data_bytes: DEFAULT_OTHER_DATA_BYTES,
                concurrency: DEFAULT_CONCURRENCY,
                max_record_age: None,
                aggregation: None,
                cache_keys: super::cache::DEFAULT_CACHE_KEYS,
                journal_spread: 1,
            },
            window: None,
        }
    }

    /// A builder starting from this config (its window included, as if set explicitly).
    pub fn to_builder(&self) -> CounterConfigBuilder {
        CounterConfigBuilder {
            config: self.clone(),
            window: Some(self.window),
        }
    }

    /// The table written.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Inline keys (the default) or a journal ([`CounterConfigBuilder::journal`]).
    pub fn mode(&self) -> &CounterMode {
        &self.mode
    }

    /// Prefix of the protocol attributes (`<prefix>bucket`, `<prefix>keys_<start>_<until>`,
    /// `<prefix>forgot`, `<prefix>version`, `<prefix>updated`, `<prefix>wtok`, `<prefix>wtokp`,
    /// `<prefix>wtoke`).
    pub fn attribute_prefix(&self) -> &str {
        &self.attribute_prefix
    }

    /// Duplicates are always rejected within this time of the first application.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Buckets kept in the item per setting (2 ≤ W ≤ 24); buckets are `window / (W - 1)`
    /// long.
    pub fn window_buckets(&self) -> u32 {
        self.window_buckets
    }

    /// Declared upper bound of new keys per item and second (capacity rule).
    pub fn max_keys_per_second(&self) -> f64 {
        self.max_keys_per_second
    }

    /// Bytes of an item the protocol may plan for (≤ 400 KiB).
    pub fn item_budget_bytes(&self) -> usize {
        self.item_budget_bytes
    }

    /// Bytes reserved for the item's own data.
    pub fn other_data_bytes(&self) -> usize {
        self.other_data_bytes
    }

    /// How many items are written at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// The age guard: a record that reached its source longer ago is kept as a `too_old` dead
    /// letter instead of being counted (`None`: the window; at most the window). Raising
    /// `window` does not need it: each item refuses a record that arrived before it forgot
    /// keys ([`CounterConfig::forgotten_attribute`]). After a switch to the journal mode, keep
    /// it at the inline window (the roll-up removes inline buckets without that record).
    pub fn max_record_age(&self) -> Option<Duration> {
        self.max_record_age
    }

    /// The age guard in force: [`CounterConfig::max_record_age`], or the window.
    pub fn record_age_limit(&self) -> Duration {
        self.max_record_age.unwrap_or(self.window)
    }

    /// Item changes (DynamoDB stream records) aggregated as records (see [`Aggregation`]);
    /// `None`: changes are refused (`no_change_mapping`).
    pub fn aggregation(&self) -> Option<&Aggregation> {
        self.aggregation.as_ref()
    }

    /// Keys of the warm-redelivery cache: a key this process applied on an item within half
    /// the window (at most 10 minutes) is answered `duplicate` without a call (`0`: off).
    pub fn cache_keys(&self) -> usize {
        self.cache_keys
    }

    /// Journal mode: the partitions one counter item's journal keys spread over (1 to 256;
    /// default 1). Each DynamoDB partition takes about 1,000 writes a second, so a counter
    /// item journaled faster needs more; every partition adds a watermark (about 35 bytes)
    /// to the item. **Fixed for a journal's life**: a key journaled again under another
    /// spread is a new journal item, and would count twice.
    pub fn journal_spread(&self) -> u32 {
        self.journal_spread
    }
}

/// Builds a validated [`CounterConfig`] (see [`CounterConfig::builder`]); the setters may come
/// in any order.
#[must_use]
#[derive(Debug, Clone)]
pub struct CounterConfigBuilder {
    config: CounterConfig,
    /// The window set explicitly; `None`: the mode's default, chosen by [`Self::build`].
    window: Option<Duration>,
}

impl CounterConfigBuilder {
    /// Journal mode, journal in `journal_table` (a table of at least 3 characters other than
    /// `table`): the mode whose cost does not grow with the window or the rate. Its window
    /// defaults to 14 days unless [`Self::window`] is set.
    pub fn journal(mut self, journal_table: impl Into<String>) -> Self {
        self.config.mode = CounterMode::Journal {
            table: journal_table.into(),
        };
        self
    }

    /// Prefix of the protocol attributes (default `"ctr_"`; 1 to 64
    /// characters of `[A-Za-z0-9_.-]`).
    pub fn attribute_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.attribute_prefix = prefix.into();
        self
    }

    /// The duplicate window (default 1 h, 14 days in journal
    /// mode; 1 s to 366 days).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self
    }

    /// Buckets kept per item (default 2; 2 to
    /// [`MAX_WINDOW_BUCKETS`](super::MAX_WINDOW_BUCKETS)).
    pub fn window_buckets(mut self, buckets: u32) -> Self {
        self.config.window_buckets = buckets;
        self
    }

    /// Declared upper bound of new keys per item and second (default
    /// 1.0; the capacity rule checks it in inline mode).
    pub fn max_keys_per_second(mut self, rate: f64) -> Self {
        self.config.max_keys_per_second = rate;
        self
    }

    /// Bytes of an item the protocol may plan for (default 350 KiB;
    /// at most 400 KiB).
    pub fn item_budget_bytes(mut self, bytes: usize) -> Self {
        self.config.item_budget_bytes = bytes;
        self
    }

    /// Bytes reserved for the item's own data (default 4 KiB).
    pub fn other_data_bytes(mut self, bytes: usize) -> Self {
        self.config.other_data_bytes = bytes;
        self
    }

    /// Items written at once (default 32; at least 1).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.config.concurrency = concurrency;
        self
    }

    /// The age guard (default: the window; at most the window), see
    /// [`CounterConfig::max_record_age`].
    pub fn max_record_age(mut self, age: Duration) -> Self {
        self.config.max_record_age = Some(age);
        self
    }

    /// Aggregate item changes (DynamoDB stream records) as records (default: refused).
    pub fn aggregation(mut self, aggregation: Aggregation) -> Self {
        self.config.aggregation = Some(aggregation);
        self
    }

    /// Keys of the warm-redelivery cache (default
    /// 10000; `0`: off).
    pub fn cache_keys(mut self, keys: usize) -> Self {
        self.config.cache_keys = keys;
        self
    }

    /// Journal mode: the partitions one counter item's journal keys spread over (1 to 256;
    /// default 1), fixed for a journal's life (see [`CounterConfig::journal_spread`]).
    pub fn journal_spread(mut self, spread: u32) -> Self {
        self.config.journal_spread = spread;
        self
    }

    /// The config, once its settings pass the checks (the capacity rule
    /// `W × bucket_seconds × KEY_BYTES × max_keys_per_second + other ≤ budget` in inline
    /// mode); the error names the setting at fault.
    pub fn build(self) -> Result<CounterConfig, ConfigError> {
        let mut config = self.config;
        config.window = self.window.unwrap_or(match config.mode {
            CounterMode::Journal { .. } => DEFAULT_JOURNAL_WINDOW,
            CounterMode::Inline => DEFAULT_WINDOW,
        });
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(builder: CounterConfigBuilder) -> String {
        builder.build().expect_err("refused").setting
    }

    #[test]
    fn the_journal_window_default_does_not_depend_on_setter_order() {
        let before = CounterConfig::builder("counters")
            .journal("journal")
            .build();
        let after = CounterConfig::builder("counters")
            .window_buckets(3)
            .journal("journal")
            .build();
        assert_eq!(before.map(|c| c.window()), Ok(DEFAULT_JOURNAL_WINDOW));
        assert_eq!(after.map(|c| c.window()), Ok(DEFAULT_JOURNAL_WINDOW));
        let explicit = |builder: CounterConfigBuilder| builder.build().map(|c| c.window());
        let hour = Duration::from_secs(3600);
        let b = CounterConfig::builder("counters");
        assert_eq!(
            explicit(b.clone().window(hour).journal("journal")),
            Ok(hour)
        );
        assert_eq!(
            explicit(b.clone().journal("journal").window(hour)),
            Ok(hour)
        );
        assert_eq!(explicit(b).map(|w| w.as_secs()), Ok(3600));
    }

    #[test]
    fn build_refuses_a_window_the_item_cannot_hold() {
        let b = CounterConfig::builder("counters").max_keys_per_second(100.0);
        assert_eq!(refused(b.clone()), "window_seconds");
        // The journal keeps no keys in the item: no capacity rule.
        assert!(b.journal("journal").build().is_ok());
    }

    #[test]
    fn build_refuses_window_buckets_out_of_range() {
        let b = CounterConfig::builder("counters");
        assert_eq!(refused(b.clone().window_buckets(1)), "window_buckets");
        assert_eq!(refused(b.clone().window_buckets(25)), "window_buckets");
        assert!(b.window_buckets(24).build().is_ok());
    }

    #[test]
    fn build_refuses_a_journal_spread_out_of_range() {
        let b = CounterConfig::builder("counters").journal("journal");
        assert_eq!(refused(b.clone().journal_spread(0)), "journal_spread");
        assert_eq!(refused(b.clone().journal_spread(257)), "journal_spread");
        assert_eq!(refused(b.clone().journal("counters")), "journal_table");
        assert_eq!(
            b.journal_spread(256).build().map(|c| c.journal_spread()),
            Ok(256)
        );
    }

    #[test]
    fn to_builder_keeps_every_setting() {
        let c = CounterConfig::builder("counters")
            .journal("journal")
            .max_record_age(Duration::from_secs(60))
            .build()
            .expect("valid");
        assert_eq!(c.to_builder().build(), Ok(c.clone()));
        let longer = c.to_builder().window(Duration::from_secs(86_400)).build();
        assert_eq!(longer.map(|c| c.window().as_secs()), Ok(86_400));
    }
}
