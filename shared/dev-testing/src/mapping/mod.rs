//! An emulator of Lambda's DynamoDB Streams event source mapping: it reads a DynamoDB Streams
//! endpoint (the [`crate::StreamsDouble`], or DynamoDB Local's own stream) with the
//! `aws-sdk-dynamodbstreams` client and invokes a [`Handler`] with Lambda's JSON event, the way
//! Lambda's engine does. The engine's state (shard listing, lineage, iterators, checkpoints,
//! window state) is the emulator's, never the handler's: a handler under test keeps nothing
//! of the stream's position.
//!
//! # Rules (Lambda developer guide: `with-ddb.html`, `services-ddb-params.html`,
//! `services-ddb-batchfailurereporting.html`, `services-ddb-windows.html`,
//! `with-ddb-filtering.html`, under <https://docs.aws.amazon.com/lambda/latest/dg/>)
//!
//! * **Lineage.** A shard is read only after its parent is read to its end and its last
//!   batch succeeded (or was discarded); a parent no longer listed does not hold its child.
//!   Shards the mapping has no checkpoint for start at [`StartingPosition`]; children found
//!   later start at their beginning.
//! * **One batch per shard at a time**, or with `ParallelizationFactor` N up to N at once: a
//!   record goes to lane `hash(partition key) mod N`, so the order per partition key is kept.
//!   The shard's checkpoint moves past a record once it and every record read before it are
//!   done (succeeded, filtered out or discarded): the lowest pending record of any lane holds
//!   it.
//! * **Batching.** A batch holds up to `BatchSize` records (and 6 MB of event); a lane
//!   invokes when it has that many, when `MaximumBatchingWindowInSeconds` has passed since its
//!   oldest pending record was read (the mapping's clock), when the shard is read to its end,
//!   or at once for a retry.
//! * **Filtering** (`FilterCriteria`, [`filter`]): records no pattern accepts never reach
//!   the function and are checkpointed past.
//! * **Responses.** Without `ReportBatchItemFailures` any answer is success. With it: a null
//!   or empty `batchItemFailures` is success; otherwise the batch resumes at the lowest
//!   reported `itemIdentifier` (the records before it succeeded); an empty, null or unknown
//!   `itemIdentifier` fails the whole batch.
//! * **Failures** (a function error, a kill, a timeout, a lost response): the batch is
//!   retried. With `BisectBatchOnFunctionError` a failed batch of more than one record is
//!   split in two, and each half is invoked on its own, first half first (the emulator's
//!   reading: halves start a fresh retry count, so a poison record is isolated before retries
//!   run out). After `MaximumRetryAttempts` retries, or once
//!   its records are older than `MaximumRecordAgeInSeconds` (checked before every invoke), a
//!   batch is discarded: its description goes to the on-failure destination
//!   ([`Mapping::on_failure_messages`], Lambda's JSON: `requestContext.condition`,
//!   `approximateInvokeCount`, `DDBStreamBatchInfo {shardId, startSequenceNumber,
//!   endSequenceNumber, approximateArrivalOfFirstRecord, approximateArrivalOfLastRecord,
//!   batchSize, streamArn}`) and the shard moves on. A window's final invoke without records
//!   that runs out of retries ends its window with no message (it describes no record; Lambda
//!   documents none for it).
//! * **Tumbling windows** (`TumblingWindowInSeconds`): a record belongs to the window of its
//!   `ApproximateCreationDateTime` (windows aligned on the epoch); a batch holds one window's
//!   records; each invocation gets `window {start, end}`, `state` (the last successful
//!   response's, `{}` at a window's start), `shardId`, `eventSourceARN`,
//!   `isFinalInvokeForWindow`, `isWindowTerminatedEarly`. A response without `state` is a
//!   failed invocation; a failed invocation is retried with the state it was given. Once the
//!   window's end has passed on the clock and the lane has read all of it (or the shard is read
//!   to its end), the last invoke of the window is final, with the remaining records or none.
//!   A `state` over 1 MB ends the window early: the next invoke is final with
//!   `isWindowTerminatedEarly` and no records, and the window continues with `{}`. With a
//!   partial batch response the returned state is kept (it covers the records before the
//!   reported one). State is kept per lane (one lane per shard without parallelization).
//! * **Trimmed records.** A position older than the stream keeps
//!   (`TrimmedDataAccessException`) restarts the shard at `TRIM_HORIZON`, as Lambda does; the
//!   records in between are lost and counted in [`Stats::trimmed_skips`] and
//!   [`Mapping::trimmed`]. An expired iterator is taken again at the last record read.
//!
//! # Driving it
//!
//! [`Mapping::step`] lists the shards, reads each readable shard (up to 4 pages) and runs
//! one invocation per ready lane, all shards at once; [`Mapping::run_until_idle`] steps until
//! nothing is read or invoked twice in a row. Faults per invocation come from a plan
//! ([`Mapping::set_faults`], or [`seeded_faults`] for a randomized checker): kill the
//! handler's future at its k-th await, time it out, lose its response, deliver the batch
//! twice. Rollovers and trims come from the double's
//! [`crate::Shape`] and the shared clock.
//!
//! Known gaps: Lambda's polling rate (4 per second per shard), its invocation concurrency
//! limits, payloads over 6 MB of a single record, and the asynchronous on-failure delivery
//! are not modelled; the on-failure message's `requestId` and `functionArn` are made up.
//!
//! # Layout
//!
//! * `config.rs`: [`MappingConfig`] and its validating builder.
//! * `filter.rs`: `FilterCriteria` patterns.
//! * `handler.rs`: [`Handler`], [`Fault`], running one invocation under a fault.
//! * `payload.rs`: Lambda's JSON of records, events and on-failure messages.
//! * `shards.rs`: the listing, lineage and reads of each shard.
//! * `lanes/`: batches of each lane (`mod.rs`); what a response does to them: retries,
//!   discards and windows (`response.rs`).

mod config;
pub mod filter;
mod handler;
mod lanes;
mod payload;
mod shards;

use std::collections::BTreeMap;
use std::fmt;

use dynamodb_exactly_once::Clock;
use serde_json::Value;

pub use config::{ConfigError, MappingConfig, MappingConfigBuilder, StartingPosition};
pub use handler::{seeded_faults, Fault, Handler, InvocationInfo};
pub use payload::Condition;

use shards::Shard;

/// An error of the stream endpoint the mapping cannot work around (Lambda would retry; the
/// test wants to know).
#[derive(Debug)]
#[non_exhaustive]
pub enum MappingError {
    /// A DynamoDB Streams call failed.
    Streams {
        /// The operation (`DescribeStream`, …).
        operation: &'static str,
        /// The SDK's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The stream answered something the emulator cannot read.
    Malformed(String),
}

impl MappingError {
    /// Whether stepping again may succeed (a Streams call; not a malformed answer).
    pub fn is_retryable(&self) -> bool {
        matches!(self, MappingError::Streams { .. })
    }
}

impl fmt::Display for MappingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MappingError::Streams { operation, source } => write!(f, "{operation}: {source}"),
            MappingError::Malformed(m) => write!(f, "malformed stream answer: {m}"),
        }
    }
}

impl std::error::Error for MappingError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MappingError::Streams { source, .. } => Some(source.as_ref()),
            MappingError::Malformed(_) => None,
        }
    }
}

/// What the mapping did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Invocations started (a duplicate delivery counts twice).
    pub invocations: u64,
    /// Invocations that failed (function error, kill, timeout, lost response, bad response).
    pub failed_invocations: u64,
    /// Records read from the stream.
    pub records_read: u64,
    /// Records dropped by `FilterCriteria`.
    pub records_filtered: u64,
    /// Records that reached the function at least once and then succeeded.
    pub records_succeeded: u64,
    /// Records discarded to the on-failure destination.
    pub records_discarded: u64,
    /// Times a shard's position was older than the stream keeps and it restarted at
    /// `TRIM_HORIZON` (records lost in between).
    pub trimmed_skips: u64,
    /// Batches halved by `BisectBatchOnFunctionError`.
    pub bisections: u64,
    /// Tumbling windows ended early (state over 1 MB).
    pub windows_terminated_early: u64,
    /// `GetRecords`/`GetShardIterator` calls that failed (retried at the next step).
    pub read_errors: u64,
}

/// A shard's checkpoint, as the mapping keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The last record the mapping is done with, and every record before it
    /// (`None`: nothing yet).
    pub sequence_number: Option<String>,
    /// Read to its end and every record done: its children may be read.
    pub done: bool,
}

/// Where a trimmed position was skipped: the shard, and the last record done before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrimmedSkip {
    /// The shard.
    pub shard_id: String,
    /// The last record read before the skip (`None`: the shard's start).
    pub after: Option<String>,
}

/// What one [`Mapping::step`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StepReport {
    /// Records read.
    pub records_read: usize,
    /// Invocations run.
    pub invocations: usize,
    /// Shards newly listed or finished.
    pub shard_changes: usize,
}

impl StepReport {
    /// Nothing read, invoked or changed.
    pub fn is_idle(&self) -> bool {
        self.records_read == 0 && self.invocations == 0 && self.shard_changes == 0
    }
}

type FaultPlan = Box<dyn FnMut(&InvocationInfo) -> Fault + Send>;

/// One event source mapping: a stream, its settings, and the engine's state.
pub struct Mapping {
    client: aws_sdk_dynamodbstreams::Client,
    stream_arn: String,
    config: MappingConfig,
    clock: Clock,
    hash_key: Option<String>,
    listed_once: bool,
    shards: BTreeMap<String, Shard>,
    order: Vec<String>,
    faults: Option<FaultPlan>,
    on_failure: Vec<Value>,
    trimmed: Vec<TrimmedSkip>,
    stats: Stats,
}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapping")
            .field("stream_arn", &self.stream_arn)
            .field("config", &self.config)
            .field("shards", &self.order)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Mapping {
    /// A mapping of `stream_arn`, read through `client`, on the system clock.
    pub fn new(
        client: aws_sdk_dynamodbstreams::Client,
        stream_arn: impl Into<String>,
        config: MappingConfig,
    ) -> Mapping {
        Mapping {
            client,
            stream_arn: stream_arn.into(),
            config,
            clock: Clock::system(),
            hash_key: None,
            listed_once: false,
            shards: BTreeMap::new(),
            order: Vec::new(),
            faults: None,
            on_failure: Vec::new(),
            trimmed: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// Use `clock` (the one the double and the test share) for record ages, batching windows
    /// and tumbling windows.
    pub fn with_clock(mut self, clock: Clock) -> Mapping {
        self.clock = clock;
        self
    }

    /// Decide each invocation's [`Fault`] with `plan` (seeded schedules, "kill the 3rd").
    pub fn set_faults(&mut self, plan: impl FnMut(&InvocationInfo) -> Fault + Send + 'static) {
        self.faults = Some(Box::new(plan));
    }

    /// No faults from now on.
    pub fn clear_faults(&mut self) {
        self.faults = None;
    }

    /// The stream.
    pub fn stream_arn(&self) -> &str {
        &self.stream_arn
    }

    /// What the mapping did so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The on-failure destination's messages, oldest first.
    pub fn on_failure_messages(&self) -> &[Value] {
        &self.on_failure
    }

    /// Every trimmed position skipped so far.
    pub fn trimmed(&self) -> &[TrimmedSkip] {
        &self.trimmed
    }

    /// Each known shard's checkpoint, by shard id.
    pub fn checkpoints(&self) -> BTreeMap<String, Checkpoint> {
        self.shards
            .iter()
            .map(|(id, s)| (id.clone(), s.checkpoint()))
            .collect()
    }

    /// List the shards, read every readable shard, and run one invocation per ready lane
    /// (all at once), then apply their outcomes.
    pub async fn step<H: Handler + ?Sized>(
        &mut self,
        handler: &H,
    ) -> Result<StepReport, MappingError> {
        let mut report = StepReport {
            shard_changes: self.refresh_shards().await?,
            ..StepReport::default()
        };
        report.records_read = self.read_shards().await;
        report.invocations = self.invoke_lanes(handler).await;
        report.shard_changes += self.finish_shards();
        Ok(report)
    }

    /// Step until two steps in a row are idle, or `max_steps`; returns the steps taken.
    pub async fn run_until_idle<H: Handler + ?Sized>(
        &mut self,
        handler: &H,
        max_steps: usize,
    ) -> Result<usize, MappingError> {
        let mut idle = 0;
        for n in 1..=max_steps {
            if self.step(handler).await?.is_idle() {
                idle += 1;
                if idle == 2 {
                    return Ok(n);
                }
            } else {
                idle = 0;
            }
        }
        Ok(max_steps)
    }
}
