//! The roll-up's settings, report and handle; a run is in [`super::pass`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;

use super::dead::RollupDeadLetter;
use super::hold::HeldKeys;
use super::prune::{prune_cache, PruneCache, ShardStates};
use super::read::KeptIterators;
use crate::config::ConfigError;
use crate::counter::CounterConfig;
use crate::ddb::Clock;

/// Records asked for per `GetRecords` call (DynamoDB Streams' limit: 1,000).
const RECORDS_PER_CALL: i32 = 1000;
/// Counter items updated at once (at least; the counter's `concurrency` when higher).
const DEFAULT_ROLLUP_CONCURRENCY: usize = 16;
/// Shards read at once (DynamoDB Streams allows two readers per shard; each is one here).
const DEFAULT_READ_CONCURRENCY: usize = 16;
/// Journaled keys one pass holds in memory before it applies them (about 200 bytes each).
const DEFAULT_MAX_EVENTS_PER_PASS: usize = 500_000;
/// Pending keys from which an item is applied whatever the hold.
const DEFAULT_HOLD_KEYS: usize = 2;
/// The longest budget of one run (a Lambda invocation lasts at most 15 minutes).
pub(super) const MAX_RUN: Duration = Duration::from_secs(14 * 60);
/// Most dead letters and gaps listed in one report (all are counted, and dead letters kept).
pub(super) const MAX_LISTED: usize = 20;

/// Settings of a [`Rollup`]; build with [`RollupConfig::builder`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct RollupConfig {
    // Each setting is documented on its getter.
    pub(crate) journal_table: String,
    pub(crate) counter: CounterConfig,
    pub(crate) records_per_call: i32,
    pub(crate) concurrency: usize,
    pub(crate) read_concurrency: usize,
    pub(crate) max_events_per_pass: usize,
    pub(crate) hold: Duration,
    pub(crate) hold_keys: usize,
}

impl RollupConfig {
    /// A builder with the defaults for the roll-up of `counter`, which must be in journal mode
    /// ([`RollupConfigBuilder::build`] refuses it otherwise).
    pub fn builder(counter: CounterConfig) -> RollupConfigBuilder {
        RollupConfigBuilder {
            config: RollupConfig {
                journal_table: counter.journal_table().unwrap_or_default().to_string(),
                concurrency: counter.concurrency.max(DEFAULT_ROLLUP_CONCURRENCY),
                counter,
                records_per_call: RECORDS_PER_CALL,
                read_concurrency: DEFAULT_READ_CONCURRENCY,
                max_events_per_pass: DEFAULT_MAX_EVENTS_PER_PASS,
                hold: Duration::ZERO,
                hold_keys: DEFAULT_HOLD_KEYS,
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

    /// Records per `GetRecords` call (1 to 1,000).
    pub fn records_per_call(&self) -> i32 {
        self.records_per_call
    }

    /// Counter items updated at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Shards read at once.
    pub fn read_concurrency(&self) -> usize {
        self.read_concurrency
    }

    /// Journaled keys one pass holds before applying them.
    pub fn max_events_per_pass(&self) -> usize {
        self.max_events_per_pass
    }

    /// How long a cold item's keys may wait in this process's memory before they are applied
    /// (0, the default: never). An item with fewer than [`hold_keys`](Self::hold_keys) pending
    /// keys whose oldest key is younger than this is not updated in this pass: its keys go with
    /// its next ones, one update for several (see `hold` in the module documentation). Its
    /// counters lag by up to this much more.
    pub fn hold(&self) -> Duration {
        self.hold
    }

    /// Pending keys from which an item is applied whatever the hold (at least 1; default 2).
    pub fn hold_keys(&self) -> usize {
        self.hold_keys
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
        if !(1..=RECORDS_PER_CALL).contains(&self.records_per_call) {
            return Err(ConfigError::new("records_per_call", "must be 1 to 1000"));
        }
        let at_least_one = [
            ("rollup_concurrency", self.concurrency),
            ("read_concurrency", self.read_concurrency),
            ("max_events_per_pass", self.max_events_per_pass),
            ("hold_keys", self.hold_keys),
        ];
        match at_least_one.into_iter().find(|(_, n)| *n == 0) {
            Some((setting, _)) => Err(ConfigError::new(setting, "must be at least 1")),
            None => Ok(()),
        }
    }
}

/// Builds a validated [`RollupConfig`] (see [`RollupConfig::builder`]).
#[must_use]
#[derive(Debug, Clone)]
pub struct RollupConfigBuilder {
    config: RollupConfig,
}

impl RollupConfigBuilder {
    /// Records per `GetRecords` call (1 to 1,000; default 1,000).
    pub fn records_per_call(mut self, records: i32) -> Self {
        self.config.records_per_call = records;
        self
    }

    /// Counter items updated at once (default: the counter's `concurrency`, at least 16).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.config.concurrency = concurrency;
        self
    }

    /// Shards read at once (default 16; DynamoDB Streams allows two readers per shard).
    pub fn read_concurrency(mut self, concurrency: usize) -> Self {
        self.config.read_concurrency = concurrency;
        self
    }

    /// Journaled keys one pass holds in memory before it applies them (default 500,000,
    /// about 200 bytes each).
    pub fn max_events_per_pass(mut self, keys: usize) -> Self {
        self.config.max_events_per_pass = keys;
        self
    }

    /// How long a cold item's keys may wait in memory (default 0: never; see
    /// [`RollupConfig::hold`]).
    pub fn hold(mut self, hold: Duration) -> Self {
        self.config.hold = hold;
        self
    }

    /// Pending keys from which an item is applied whatever the hold (at least 1; default 2).
    pub fn hold_keys(mut self, keys: usize) -> Self {
        self.config.hold_keys = keys;
        self
    }

    /// The config, once the counter is valid and in journal mode and each figure is in its
    /// range; the error names the setting at fault.
    pub fn build(self) -> Result<RollupConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

/// Records of the stream a run could not read: a checkpointed shard whose next records had
/// been trimmed, a shard that left the stream unfinished, a parent that left it unread, or a
/// stream without a complete pass for longer than it keeps records. The keys journaled then
/// are still in the journal table (for the window): see the runbook's repair.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RollupGap {
    /// The shard, when one is known.
    pub shard: Option<String>,
    /// The gap starts after records created at this time (epoch seconds), when known.
    pub from_secs: Option<u64>,
    /// The gap ends before records created at this time (epoch seconds), when known.
    pub to_secs: Option<u64>,
    /// What was seen.
    pub reason: String,
}

/// What one [`Rollup::run`] did.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RollupReport {
    /// Shards the stream listed.
    pub shards_listed: usize,
    /// Shards read.
    pub shards: usize,
    /// Passes made (one unless memory or time cut a pass short).
    pub passes: usize,
    /// Stream records read (any kind).
    pub records: usize,
    /// Journaled keys found (`INSERT`s).
    pub keys: usize,
    /// Keys added to their counters by this run.
    pub applied: usize,
    /// Keys an earlier run (or a concurrent one) had applied already.
    pub duplicates: usize,
    /// Counter item updates made.
    pub item_updates: usize,
    /// DynamoDB write requests (updates, checkpoints, dead letters; failed conditions
    /// included).
    pub write_calls: u64,
    /// Write units as AWS bills them.
    pub write_units: f64,
    /// Journal records not counted and kept as dead letters (refused keys and deltas,
    /// records the journal's writer did not write).
    pub dead_letters: usize,
    /// The first dead letters of the run (at most 20).
    pub letters: Vec<RollupDeadLetter>,
    /// Gaps: records the roll-up could not read (see [`RollupGap`]).
    pub trimmed: usize,
    /// The first gaps (at most 20), with their bounds.
    pub gaps: Vec<RollupGap>,
    /// Counter items not updated because of an error (their keys are read again next run).
    pub failed_items: usize,
    /// Shards whose read failed (read again next run).
    pub failed_shards: usize,
    /// Every shard was read as far as the run's start (or its end), and every key read was
    /// applied or, with a hold, is held in memory (`held` of them: not yet in the counters).
    pub caught_up: bool,
    /// Keys held in this process's memory at the end of the run (read, not applied: see
    /// [`RollupConfig::hold`]).
    pub held: usize,
    /// The age (milliseconds, from the key's first put) of the oldest key held at the end of
    /// the run: how far the hold makes the counters lag; 0 when none is held.
    pub held_age_ms: u64,
    /// How far behind the roll-up is, like Lambda's `IteratorAge`: over the shards *not*
    /// caught up (stopped for time, failed, or held by a failed item), the greatest age
    /// (milliseconds, this process's clock against DynamoDB's approximate creation time) of
    /// the last record they were read to; 0 when every shard is caught up.
    pub iterator_age_ms: u64,
}

/// The roll-up of one journal (see the [module documentation](super)). Run it on a schedule,
/// one run at a time (the function `counter-rollup` has a reserved concurrency of 1). Two runs
/// at once stay exact (the watermarks) and only repeat each other's reads, provided neither
/// lasts longer than 20 minutes (a done shard's watermark is removed 20 minutes after it
/// was done).
#[derive(Clone)]
pub struct Rollup {
    pub(super) ddb: Client,
    pub(super) streams: aws_sdk_dynamodbstreams::Client,
    pub(super) config: RollupConfig,
    pub(super) clock: Clock,
    pub(super) iterators: Arc<KeptIterators>,
    pub(super) prune: Arc<PruneCache>,
    pub(super) states: Arc<Mutex<ShardStates>>,
    /// How far this process read and applied each shard (ahead of the saved checkpoints).
    pub(super) positions: Arc<Mutex<HashMap<String, String>>>,
    /// Records of each shard this process read since its checkpoint was last saved.
    pub(super) unsaved: Arc<Mutex<HashMap<String, usize>>>,
    /// Keys of cold items held in memory (see [`RollupConfig::hold`]).
    pub(super) held: Arc<Mutex<HeldKeys>>,
}

impl std::fmt::Debug for Rollup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rollup")
            .field("config", &self.config)
            .finish()
    }
}

impl Rollup {
    /// The roll-up of `config` with DynamoDB's and DynamoDB Streams' clients.
    pub fn new(
        ddb: Client,
        streams: aws_sdk_dynamodbstreams::Client,
        config: RollupConfig,
    ) -> Self {
        Rollup {
            ddb: crate::ddb::conflict::retrying_conflicts(ddb),
            streams,
            config,
            clock: Clock::system(),
            iterators: Arc::new(Mutex::new(HashMap::new())),
            prune: Arc::new(prune_cache()),
            states: Arc::new(Mutex::new(HashMap::new())),
            positions: Arc::new(Mutex::new(HashMap::new())),
            unsaved: Arc::new(Mutex::new(HashMap::new())),
            held: Arc::new(Mutex::new(HeldKeys::new())),
        }
    }

    /// The roll-up of `config` as the handler of the journal's event source mapping
    /// ([`Rollup::apply_batch`]): it reads no stream itself, so it needs no Streams client
    /// (the one it holds, for [`Rollup::run`], is never configured nor called).
    pub fn for_mapping(ddb: Client, config: RollupConfig) -> Self {
        let streams = aws_sdk_dynamodbstreams::Config::builder()
            .behavior_version(aws_sdk_dynamodbstreams::config::BehaviorVersion::latest())
            .build();
        Rollup::new(
            ddb,
            aws_sdk_dynamodbstreams::Client::from_conf(streams),
            config,
        )
    }

    /// The same roll-up with another clock (watermark times, the run's snapshot; tests move
    /// time with it).
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
        assert_eq!(refused(b.clone().records_per_call(0)), "records_per_call");
        assert_eq!(
            refused(b.clone().records_per_call(1001)),
            "records_per_call"
        );
        assert_eq!(refused(b.clone().concurrency(0)), "rollup_concurrency");
        assert_eq!(refused(b.clone().read_concurrency(0)), "read_concurrency");
        assert_eq!(
            refused(b.clone().max_events_per_pass(0)),
            "max_events_per_pass"
        );
        assert_eq!(refused(b.clone().hold_keys(0)), "hold_keys");
        let held = b.hold(Duration::from_secs(60)).hold_keys(3).build();
        assert_eq!(
            held.map(|c| (c.hold().as_secs(), c.hold_keys())),
            Ok((60, 3))
        );
    }
}
