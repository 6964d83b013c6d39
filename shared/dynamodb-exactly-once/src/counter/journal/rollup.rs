//! The roll-up's settings and handle; a batch is applied in [`super::shard_batch`].


use aws_sdk_dynamodb::Client;

use crate::config::ConfigError;
use crate::counter::CounterConfig;
use crate::ddb::Clock;

/// Counter items updated at once (at least; the counter's `concurrency` when higher).
const DEFAULT_ROLLUP_CONCURRENCY: usize = 16;
/// Most dead letters listed in one report (all are counted, and kept).
pub(super) const MAX_LISTED: usize = 20;

/// Settings of a [`Rollup`]; build with [`RollupConfig::builder`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct RollupConfig {
    // Each setting is documented on its getter.
    pub(crate) journal_table: String,
    pub(crate) counter: CounterConfig,
    pub(crate) concurrency: usize,
    pub(crate) hold_in_window: bool,
}

impl RollupConfig {
    /// A builder with the defaults for the roll-up of `counter`, which must be in journal mode
    /// ([`RollupConfigBuilder::build`] refuses it otherwise).
    pub fn builder(counter: CounterConfig) -> RollupConfigBuilder {
        RollupConfigBuilder {
            config: RollupConfig {
                journal_table: counter.journal_table().unwrap_or_default().to_string(),
                concurrency: counter.concurrency.max(DEFAULT_ROLLUP_CONCURRENCY),
                hold_in_window: false,
                counter,
            },
        }
    }

    /// A builder starting from this config.
    pub fn to_builder(&self) -> RollupConfigBuilder {
        RollupConfigBuilder {
            config: self.clone(),
        }
    }

    /// The journal table (with its stream): the counter's.
    pub fn journal_table(&self) -> &str {
        &self.journal_table
    }

    /// The counter settings whose items are written (table, attribute prefix, and the inline
    /// layout's settings to read items that still hold key buckets).
    pub fn counter(&self) -> &CounterConfig {
        &self.counter
    }

    /// Counter items updated at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Whether a tumbling window's keys are kept in its state and applied at its end
    /// ([`Rollup::apply_window`]); `false` (the default): each invocation applies its keys.
    pub fn hold_in_window(&self) -> bool {
        self.hold_in_window
    }

    /// The counter in journal mode, and each figure in its range.
    fn validate(&self) -> Result<(), ConfigError> {
        self.counter.validate()?;
        if self.counter.journal_table().is_none() {
            return Err(ConfigError::new(
                "mode",
                "the roll-up needs a counter in journal mode",
            ));
        }
        if self.concurrency == 0 {
            return Err(ConfigError::new("rollup_concurrency", "must be at least 1"));
        }
        Ok(())
    }
}

/// Builds a validated [`RollupConfig`] (see [`RollupConfig::builder`]).
#[must_use]
#[derive(Debug, Clone)]
pub struct RollupConfigBuilder {
    config: RollupConfig,
}

impl RollupConfigBuilder {
    /// Counter items updated at once (default: the counter's `concurrency`, at least 16).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.config.concurrency = concurrency;
        self
    }

    /// Keep a tumbling window's keys in its state and apply them at its end (default: off,
    /// each invocation applies its keys). On: one update per item and window (the cost win
    /// of a long window), but a final invoke the mapping gives up on
    /// (`MaximumRetryAttempts`) loses the keys the state held, which only the exactness audit
    /// finds (see the module `window`).
    pub fn hold_in_window(mut self, on: bool) -> Self {
        self.config.hold_in_window = on;
        self
    }

    /// The config, once the counter is valid and in journal mode and each figure is in its
    /// range; the error names the setting at fault.
    pub fn build(self) -> Result<RollupConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

/// The roll-up of one journal (see the [module documentation](super)): the handler of the
/// journal's stream event source mapping, one shard's batch per call
/// ([`Rollup::apply_batch`]). It keeps nothing of the stream's position: any number of
/// processes, cold or warm, may apply batches at once.
#[derive(Clone)]
pub struct Rollup {
    pub(super) ddb: Client,
    pub(super) config: RollupConfig,
    pub(super) clock: Clock,
}

impl std::fmt::Debug for Rollup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rollup")
            .field("config", &self.config)
            .finish()
    }
}

impl Rollup {
    /// The roll-up of `config` with DynamoDB's client (its conflicts retried).
    pub fn new(ddb: Client, config: RollupConfig) -> Self {
        Rollup {
            ddb: crate::ddb::conflict::retrying_conflicts(ddb),
            config,
            clock: Clock::system(),
        }
    }

    /// The same roll-up with another clock (watermark and day-sum times; tests move time with
    /// it).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal() -> CounterConfig {
        CounterConfig::builder("counters")
            .journal("journal")
            .build()
            .expect("valid")
    }

    fn refused(builder: RollupConfigBuilder) -> String {
        builder.build().expect_err("refused").setting
    }

    #[test]
    fn build_refuses_an_inline_counter() {
        let inline = CounterConfig::builder("counters").build().expect("valid");
        assert_eq!(refused(RollupConfig::builder(inline)), "mode");
        let config = RollupConfig::builder(journal()).build().expect("valid");
        assert_eq!(config.journal_table(), "journal");
        assert_eq!(config.concurrency(), 32);
    }

    #[test]
    fn build_refuses_figures_out_of_range() {
        let b = RollupConfig::builder(journal());
        assert_eq!(refused(b.clone().concurrency(0)), "rollup_concurrency");
        assert_eq!(b.concurrency(4).build().map(|c| c.concurrency()), Ok(4));
    }
}
