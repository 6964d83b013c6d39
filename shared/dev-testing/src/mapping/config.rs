//! The mapping's settings, as `CreateEventSourceMapping` takes them for a DynamoDB stream, with
//! Lambda's ranges (<https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html>).

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use super::filter::{FilterCriteria, FilterError};

/// Where a shard the mapping has no checkpoint for starts (`StartingPosition`). Child shards
/// found later always start at their beginning, as Lambda reads a child after its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StartingPosition {
    /// The oldest record kept (`TRIM_HORIZON`).
    #[default]
    TrimHorizon,
    /// Only records written after the mapping started (`LATEST`).
    Latest,
}

/// A setting outside Lambda's range, named as the API names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `setting` is outside `range` (the text Lambda's documentation gives).
    OutOfRange {
        /// The API's name of the setting (`BatchSize`, …).
        setting: &'static str,
        /// The value given.
        value: String,
        /// The allowed values.
        range: &'static str,
    },
    /// A `FilterCriteria` pattern Lambda would refuse (or the emulator cannot read).
    Filter(FilterError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::OutOfRange {
                setting,
                value,
                range,
            } => write!(f, "{setting} = {value} is outside {range}"),
            ConfigError::Filter(e) => write!(f, "FilterCriteria: {e}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A validated mapping configuration ([`MappingConfig::builder`]).
#[derive(Debug, Clone)]
pub struct MappingConfig {
    pub(crate) batch_size: usize,
    pub(crate) batching_window: Duration,
    pub(crate) parallelization_factor: usize,
    pub(crate) bisect_on_error: bool,
    pub(crate) max_retry_attempts: Option<u32>,
    pub(crate) max_record_age: Option<Duration>,
    pub(crate) report_batch_item_failures: bool,
    pub(crate) tumbling_window: Option<Duration>,
    pub(crate) filters: FilterCriteria,
    pub(crate) starting_position: StartingPosition,
}

impl Default for MappingConfig {
    /// Lambda's defaults: `BatchSize` 100, no batching window, `ParallelizationFactor` 1, no
    /// bisect, infinite retries and age, no partial batch responses, no window, no filter,
    /// `TRIM_HORIZON`.
    fn default() -> Self {
        MappingConfig {
            batch_size: 100,
            batching_window: Duration::ZERO,
            parallelization_factor: 1,
            bisect_on_error: false,
            max_retry_attempts: None,
            max_record_age: None,
            report_batch_item_failures: false,
            tumbling_window: None,
            filters: FilterCriteria::default(),
            starting_position: StartingPosition::TrimHorizon,
        }
    }
}

impl MappingConfig {
    /// A builder starting from Lambda's defaults.
    pub fn builder() -> MappingConfigBuilder {
        MappingConfigBuilder::default()
    }

    /// `BatchSize`.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// `ParallelizationFactor`.
    pub fn parallelization_factor(&self) -> usize {
        self.parallelization_factor
    }

    /// `TumblingWindowInSeconds` (`None`: no window).
    pub fn tumbling_window(&self) -> Option<Duration> {
        self.tumbling_window
    }
}

/// Builds a [`MappingConfig`]; [`MappingConfigBuilder::build`] checks Lambda's ranges.
#[derive(Debug, Clone, Default)]
pub struct MappingConfigBuilder {
    batch_size: Option<i64>,
    batching_window_secs: Option<i64>,
    parallelization_factor: Option<i64>,
    bisect_on_error: bool,
    max_retry_attempts: Option<i64>,
    max_record_age_secs: Option<i64>,
    report_batch_item_failures: bool,
    tumbling_window_secs: Option<i64>,
    filter_patterns: Vec<Value>,
    starting_position: StartingPosition,
}

impl MappingConfigBuilder {
    /// `BatchSize` (1–10000).
    pub fn batch_size(mut self, n: i64) -> Self {
        self.batch_size = Some(n);
        self
    }

    /// `MaximumBatchingWindowInSeconds` (0–300).
    pub fn maximum_batching_window_secs(mut self, secs: i64) -> Self {
        self.batching_window_secs = Some(secs);
        self
    }

    /// `ParallelizationFactor` (1–10).
    pub fn parallelization_factor(mut self, n: i64) -> Self {
        self.parallelization_factor = Some(n);
        self
    }

    /// `BisectBatchOnFunctionError`.
    pub fn bisect_batch_on_function_error(mut self, on: bool) -> Self {
        self.bisect_on_error = on;
        self
    }

    /// `MaximumRetryAttempts` (-1 = until the record expires, or 0–10000).
    pub fn maximum_retry_attempts(mut self, n: i64) -> Self {
        self.max_retry_attempts = Some(n);
        self
    }

    /// `MaximumRecordAgeInSeconds` (-1 = infinite, or 60–604800).
    pub fn maximum_record_age_secs(mut self, secs: i64) -> Self {
        self.max_record_age_secs = Some(secs);
        self
    }

    /// `FunctionResponseTypes: [ReportBatchItemFailures]`.
    pub fn report_batch_item_failures(mut self, on: bool) -> Self {
        self.report_batch_item_failures = on;
        self
    }

    /// `TumblingWindowInSeconds` (0–900; 0 = no window).
    pub fn tumbling_window_secs(mut self, secs: i64) -> Self {
        self.tumbling_window_secs = Some(secs);
        self
    }

    /// One `FilterCriteria.Filters[].Pattern` (a JSON event pattern; several are OR'ed).
    pub fn filter_pattern(mut self, pattern: Value) -> Self {
        self.filter_patterns.push(pattern);
        self
    }

    /// `StartingPosition`.
    pub fn starting_position(mut self, p: StartingPosition) -> Self {
        self.starting_position = p;
        self
    }

    /// The configuration, or the first setting outside Lambda's range.
    pub fn build(self) -> Result<MappingConfig, ConfigError> {
        let d = MappingConfig::default();
        let batch_size = ranged("BatchSize", self.batch_size, 1, 10_000, "1–10000")?;
        let window = ranged(
            "MaximumBatchingWindowInSeconds",
            self.batching_window_secs,
            0,
            300,
            "0–300",
        )?;
        let factor = ranged(
            "ParallelizationFactor",
            self.parallelization_factor,
            1,
            10,
            "1–10",
        )?;
        let retries = minus_one_or(
            "MaximumRetryAttempts",
            self.max_retry_attempts,
            0,
            10_000,
            "-1 or 0–10000",
        )?;
        let age = minus_one_or(
            "MaximumRecordAgeInSeconds",
            self.max_record_age_secs,
            60,
            604_800,
            "-1 or 60–604800",
        )?;
        let tumbling = ranged(
            "TumblingWindowInSeconds",
            self.tumbling_window_secs,
            0,
            900,
            "0–900",
        )?;
        let filters = FilterCriteria::new(self.filter_patterns).map_err(ConfigError::Filter)?;
        Ok(MappingConfig {
            batch_size: batch_size.map_or(d.batch_size, |n| n as usize),
            batching_window: Duration::from_secs(window.unwrap_or(0) as u64),
            parallelization_factor: factor.map_or(1, |n| n as usize),
            bisect_on_error: self.bisect_on_error,
            max_retry_attempts: retries.map(|n| n as u32),
            max_record_age: age.map(|s| Duration::from_secs(s as u64)),
            report_batch_item_failures: self.report_batch_item_failures,
            tumbling_window: tumbling
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(s as u64)),
            filters,
            starting_position: self.starting_position,
        })
    }
}

/// `value` within `lo..=hi` (or unset).
fn ranged(
    setting: &'static str,
    value: Option<i64>,
    lo: i64,
    hi: i64,
    range: &'static str,
) -> Result<Option<i64>, ConfigError> {
    match value {
        Some(v) if v < lo || v > hi => Err(ConfigError::OutOfRange {
            setting,
            value: v.to_string(),
            range,
        }),
        other => Ok(other),
    }
}

/// `-1` (infinite: `None`), a value within `lo..=hi`, or unset (`None`).
fn minus_one_or(
    setting: &'static str,
    value: Option<i64>,
    lo: i64,
    hi: i64,
    range: &'static str,
) -> Result<Option<i64>, ConfigError> {
    match value {
        Some(-1) | None => Ok(None),
        v => ranged(setting, v, lo, hi, range),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_lambdas() {
        let c = MappingConfig::builder().build().expect("defaults");
        assert_eq!(c.batch_size, 100);
        assert_eq!(c.parallelization_factor, 1);
        assert_eq!(c.max_retry_attempts, None);
        assert_eq!(c.max_record_age, None);
        assert_eq!(c.tumbling_window, None);
        assert_eq!(c.starting_position, StartingPosition::TrimHorizon);
    }

    #[test]
    fn every_range_is_checked_at_both_ends() {
        type Set = fn(MappingConfigBuilder, i64) -> MappingConfigBuilder;
        let cases: [(&str, Set, i64, i64); 6] = [
            ("BatchSize", |b, v| b.batch_size(v), 1, 10_000),
            (
                "MaximumBatchingWindowInSeconds",
                |b, v| b.maximum_batching_window_secs(v),
                0,
                300,
            ),
            (
                "ParallelizationFactor",
                |b, v| b.parallelization_factor(v),
                1,
                10,
            ),
            (
                "MaximumRetryAttempts",
                |b, v| b.maximum_retry_attempts(v),
                0,
                10_000,
            ),
            (
                "MaximumRecordAgeInSeconds",
                |b, v| b.maximum_record_age_secs(v),
                60,
                604_800,
            ),
            (
                "TumblingWindowInSeconds",
                |b, v| b.tumbling_window_secs(v),
                0,
                900,
            ),
        ];
        for (name, set, lo, hi) in cases {
            for ok in [lo, hi] {
                assert!(
                    set(MappingConfig::builder(), ok).build().is_ok(),
                    "{name} {ok}"
                );
            }
            for bad in [lo - 1, hi + 1] {
                if bad == -1 && (name.starts_with("MaximumRe")) {
                    continue;
                }
                match set(MappingConfig::builder(), bad).build() {
                    Err(ConfigError::OutOfRange { setting, .. }) => assert_eq!(setting, name),
                    other => panic!("{name} {bad}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn minus_one_means_infinite_and_zero_window_means_none() {
        let c = MappingConfig::builder()
            .maximum_retry_attempts(-1)
            .maximum_record_age_secs(-1)
            .tumbling_window_secs(0)
            .build()
            .expect("valid");
        assert_eq!(c.max_retry_attempts, None);
        assert_eq!(c.max_record_age, None);
        assert_eq!(c.tumbling_window, None);
        let age = MappingConfig::builder().maximum_record_age_secs(59).build();
        assert!(matches!(age, Err(ConfigError::OutOfRange { .. })));
    }

    #[test]
    fn a_bad_filter_pattern_is_refused() {
        let c = MappingConfig::builder()
            .filter_pattern(serde_json::json!({"eventName": "INSERT"}))
            .build();
        assert!(matches!(c, Err(ConfigError::Filter(_))), "{c:?}");
    }
}
