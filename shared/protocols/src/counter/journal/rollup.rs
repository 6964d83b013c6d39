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

/// Settings of a [`Rollup`].
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct RollupConfig {
    /// The journal table (with its stream).
    pub journal_table: String,
    /// The counter settings whose items are written (table, attribute prefix, and the inline
    /// layout's settings to read items that still hold key buckets).
    pub counter: CounterConfig,
    /// Records per `GetRecords` call (1 to 1,000).
    pub records_per_call: i32,
    /// Counter items updated at once.
    pub concurrency: usize,
    /// Shards read at once.
    pub read_concurrency: usize,
    /// Journaled keys one pass holds before applying them.
    pub max_events_per_pass: usize,
    /// How long a cold item's keys may wait in this process's memory before they are applied
    /// (0, the default: never). An item with fewer than [`hold_keys`](Self::hold_keys) pending
    /// keys whose oldest key is younger than this is not updated in this pass: its keys go with
    /// its next ones, one update for several (see `hold` in the module documentation). Its
    /// counters lag by up to this much more.
    pub hold: Duration,
    /// Pending keys from which an item is applied whatever the hold (at least 1; default 2).
    pub hold_keys: usize,
}

impl RollupConfig {
    /// The roll-up of `counter`, which must be in journal mode.
    pub fn of(counter: CounterConfig) -> Result<Self, ConfigError> {
        counter.validate()?;
        let journal_table = counter.journal_table().map(str::to_string).ok_or_else(|| {
            ConfigError::new("mode", "the roll-up needs a counter in journal mode")
        })?;
        Ok(RollupConfig {
            journal_table,
            concurrency: counter.concurrency.max(DEFAULT_ROLLUP_CONCURRENCY),
            counter,
            records_per_call: RECORDS_PER_CALL,
            read_concurrency: DEFAULT_READ_CONCURRENCY,
            max_events_per_pass: DEFAULT_MAX_EVENTS_PER_PASS,
            hold: Duration::ZERO,
            hold_keys: DEFAULT_HOLD_KEYS,
        })
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

    /// The same roll-up with another clock (watermark times, the run's snapshot; tests move
    /// time with it).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }
}
