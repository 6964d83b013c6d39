//! The counter journal's roll-up as the benchmarks run it: the handler of the journal's event
//! source mapping, driven by the emulator (`dev_testing::mapping`) over a stream endpoint
//! (the Streams double, or DynamoDB Local's own stream), one "run" being the mapping stepped
//! until idle. The batches' reports are summed into a [`RunReport`].

use std::sync::{Arc, Mutex};

use dev_testing::mapping::{Mapping, MappingConfig};
use dynamodb_exactly_once::counter::journal::{Rollup, RollupBatchReport};
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
    }
}

/// The roll-up fed by one mapping (`INSERT`s only, partial batch responses, bisect, a 1-minute
/// tumbling window for the shard id).
pub struct MappingRollup {
    mapping: tokio::sync::Mutex<Mapping>,
    rollup: Rollup,
}

impl MappingRollup {
    /// The mapping of `arn` read with `streams`, on `clock`, invoking `rollup`.
    pub fn new(
        streams: aws_sdk_dynamodbstreams::Client,
        arn: &str,
        rollup: Rollup,
        clock: Clock,
    ) -> Result<Self, String> {
        let config = MappingConfig::builder()
            .batch_size(1000)
            .bisect_batch_on_function_error(true)
            .report_batch_item_failures(true)
            .tumbling_window_secs(60)
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
        let total = Arc::new(Mutex::new(RunReport::default()));
        let (sum, rollup) = (Arc::clone(&total), self.rollup.clone());
        let handler = move |event: Value| {
            let (sum, rollup) = (Arc::clone(&sum), rollup.clone());
            async move { invoke(&rollup, &sum, event).await }
        };
        let mut mapping = self.mapping.lock().await;
        let before = mapping.stats().clone();
        mapping
            .run_until_idle(&handler, 10_000)
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

/// One invocation: the window event's shard and records applied, the partial batch response.
async fn invoke(rollup: &Rollup, sum: &Mutex<RunReport>, event: Value) -> Result<Value, String> {
    let shard = event["shardId"].as_str().unwrap_or_default().to_string();
    let records = event["Records"].as_array().cloned().unwrap_or_default();
    let changes = records
        .iter()
        .map(|r| {
            let body = serde_json::to_vec(r).map_err(|e| e.to_string())?;
            dynamodb_exactly_once_lambda::source::dynamodb::decode_change(&body)
                .map_err(|e| format!("{e:?}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let report = rollup.apply_batch(&shard, &changes).await;
    sum.lock().unwrap_or_else(|p| p.into_inner()).add(&report);
    let failures: Vec<Value> = report
        .retry_from
        .iter()
        .map(|seq| json!({"itemIdentifier": seq}))
        .collect();
    Ok(json!({"batchItemFailures": failures, "state": {}}))
}
