//! The counter journal's roll-up as the benchmarks run it: the handler of the journal's event
//! source mapping, driven by the emulator (`dev_testing::mapping`) over a stream endpoint
//! (the Streams double, or DynamoDB Local's own stream), one "run" being the mapping stepped
//! until idle. The batches' reports are summed into a [`RunReport`].

use std::sync::{Arc, Mutex};

use dev_testing::mapping::{Mapping, MappingConfig};
use dynamodb_exactly_once::__private::WINDOW_STATE_ENTRY;
use dynamodb_exactly_once::counter::journal::{Rollup, RollupBatchReport, WindowOutcome};
use dynamodb_exactly_once::Clock;
use serde_json::{json, Value};

/// What one run (the mapping stepped until idle) did, summed over its batches.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RunReport {
    /// Shards the mapping has checkpoints for.
    pub shards_listed: usize,
    /// Stream records delivered (any kind).
    pub records: usize,
    pub keys: usize,
    pub applied: usize,
    pub duplicates: usize,
    pub item_updates: usize,
    pub write_calls: u64,
    pub write_units: f64,
    pub dead_letters: usize,
    /// Records the mapping could not deliver (trimmed positions restarted, batches discarded).
    pub trimmed: usize,
    pub failed_items: usize,
    /// Invocations that failed (delivered again).
    pub failed_shards: usize,
    /// Nothing left to deliver and nothing failed.
    pub caught_up: bool,
    /// The mapping's invocations.
    pub invocations: u64,
    /// Invocations (the scheduled roll-up's passes' place).
    pub passes: usize,
    /// Shards the mapping has checkpoints for (as `shards_listed`).
    pub shards: usize,
    /// Not measured through the emulator (0): `bench mapping` reports the lag.
    pub iterator_age_ms: u64,
    /// The largest tumbling-window state an invocation answered (bytes; Lambda keeps up to
    /// 1 MB per shard).
    pub max_state_bytes: usize,
}

impl RunReport {
    fn add(&mut self, batch: &RollupBatchReport) {
        self.records += batch.records;
        self.keys += batch.keys;
        self.applied += batch.applied;
        self.duplicates += batch.duplicates;
        self.item_updates += batch.item_updates;
        self.write_calls += batch.write_calls;
        self.write_units += batch.write_units;
        self.dead_letters += batch.dead_letters;
        self.failed_items += batch.failed_items;
        self.max_state_bytes = self.max_state_bytes.max(batch.state_bytes);
    }
}

/// The mapping's settings the benchmarks vary (the rest as the counter stack sets them:
/// `INSERT`s only, partial batch responses, bisect).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// `BatchSize`.
    pub batch_size: i64,
    /// `MaximumBatchingWindowInSeconds`.
    pub batching_window_secs: i64,
    /// `TumblingWindowInSeconds`.
    pub tumbling_window_secs: i64,
}

impl Default for Settings {
    /// `BatchSize` 1000, no batching window, a 1-minute tumbling window (for the shard id).
    fn default() -> Self {
        Settings {
            batch_size: 1000,
            batching_window_secs: 0,
            tumbling_window_secs: 60,
        }
    }
}

/// The roll-up fed by one mapping; each invocation is the Lambda handler's
/// (`Rollup::apply_window` with the window's state and `isFinalInvokeForWindow`).
pub struct MappingRollup {
    mapping: tokio::sync::Mutex<Mapping>,
    rollup: Rollup,
}

impl MappingRollup {
    /// The mapping of `arn` read with `streams`, on `clock`, invoking `rollup`, with the
    /// default [`Settings`].
    pub fn new(
        streams: aws_sdk_dynamodbstreams::Client,
        arn: &str,
        rollup: Rollup,
        clock: Clock,
    ) -> Result<Self, String> {
        Self::with_settings(streams, arn, rollup, clock, Settings::default())
    }

    /// As [`MappingRollup::new`], with `settings`.
    pub fn with_settings(
        streams: aws_sdk_dynamodbstreams::Client,
        arn: &str,
        rollup: Rollup,
        clock: Clock,
        settings: Settings,
    ) -> Result<Self, String> {
        let config = MappingConfig::builder()
            .batch_size(settings.batch_size)
            .maximum_batching_window_secs(settings.batching_window_secs)
            .bisect_batch_on_function_error(true)
            .report_batch_item_failures(true)
            .tumbling_window_secs(settings.tumbling_window_secs)
            .filter_pattern(json!({"eventName": ["INSERT"]}))
            .build()
            .map_err(|e| e.to_string())?;
        let mapping = Mapping::new(streams, arn, config).with_clock(clock);
        Ok(MappingRollup {
            mapping: tokio::sync::Mutex::new(mapping),
            rollup,
        })
    }

    /// Step the mapping until idle; what its batches did.
    pub async fn run(&self) -> Result<RunReport, String> {
        self.run_steps(10_000).await
    }

    /// Step the mapping until idle or `max_steps` steps (1: one poll of every shard, one
    /// batch per ready shard); what its batches did.
    pub async fn run_steps(&self, max_steps: usize) -> Result<RunReport, String> {
        let total = Arc::new(Mutex::new(RunReport::default()));
        let (sum, rollup) = (Arc::clone(&total), self.rollup.clone());
        let handler = move |event: Value| {
            let (sum, rollup) = (Arc::clone(&sum), rollup.clone());
            async move { invoke(&rollup, &sum, event).await }
        };
        let mut mapping = self.mapping.lock().await;
        let before = mapping.stats().clone();
        mapping
            .run_until_idle(&handler, max_steps)
            .await
            .map_err(|e| e.to_string())?;
        let stats = mapping.stats().clone();
        let mut report = total.lock().unwrap_or_else(|p| p.into_inner()).clone();
        report.shards_listed = mapping.checkpoints().len();
        report.invocations = stats.invocations - before.invocations;
        report.passes = usize::try_from(report.invocations).unwrap_or(usize::MAX);
        report.shards = report.shards_listed;
        report.failed_shards =
            usize::try_from(stats.failed_invocations - before.failed_invocations).unwrap_or(0);
        report.trimmed = usize::try_from(
            stats.trimmed_skips - before.trimmed_skips + stats.records_discarded
                - before.records_discarded,
        )
        .unwrap_or(0);
        report.caught_up = report.failed_items == 0 && report.failed_shards == 0;
        Ok(report)
    }
}

/// One invocation, as the Lambda handler makes it: the window event's shard, records, state
/// and `isFinalInvokeForWindow` given to `Rollup::apply_window`; the answer is the partial batch
/// response with the state to keep (a function error when the roll-up asks to be invoked again
/// with the same state).
async fn invoke(rollup: &Rollup, sum: &Mutex<RunReport>, event: Value) -> Result<Value, String> {
    let shard = event["shardId"].as_str().unwrap_or_default().to_string();
    let records = event["Records"].as_array().cloned().unwrap_or_default();
    let changes = records
        .iter()
        .map(|r| {
            let body = serde_json::to_vec(r).map_err(|e| e.to_string())?;
            dynamodb_exactly_once_lambda::__private::decode_change(&body)
                .map_err(|e| format!("{e:?}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let held = event["state"][WINDOW_STATE_ENTRY].as_str();
    let final_invoke = event["isFinalInvokeForWindow"].as_bool().unwrap_or(false);
    let outcome = rollup
        .apply_window(&shard, &changes, held, final_invoke)
        .await;
    let (report, state) = match outcome {
        WindowOutcome::Answer { report, state } => (report, state),
        WindowOutcome::Retry { report } => {
            sum.lock().unwrap_or_else(|p| p.into_inner()).add(&report);
            return Err("the window's keys were not all applied".into());
        }
        _ => return Err("an unknown outcome".into()),
    };
    sum.lock().unwrap_or_else(|p| p.into_inner()).add(&report);
    let failures: Vec<Value> = report
        .retry_from
        .iter()
        .map(|seq| json!({"itemIdentifier": seq}))
        .collect();
    let mut kept = serde_json::Map::new();
    if let Some(s) = state {
        kept.insert(WINDOW_STATE_ENTRY.to_string(), Value::String(s));
    }
    let state = Value::Object(kept);
    Ok(json!({"batchItemFailures": failures, "state": state}))
}
