//! The counter journal's roll-up as the handler of the journal table's DynamoDB Streams event
//! source mapping (feature `journal`): [`RollupFunction`], a `tower::Service` applying one
//! shard's batch per invocation ([`Rollup::apply_batch`]), and [`run_rollup`], the whole
//! `main` of the ready `counter-rollup`.
//!
//! The event is the mapping's, with a tumbling window (`TumblingWindowInSeconds` of 1 or
//! more): Lambda names the batch's shard (`shardId`) only in a window's event, and the
//! watermarks that make a batch delivered again count once are per shard. An event without
//! `shardId` fails as a whole with a `Configuration` error (nothing applied; the mapping
//! delivers it again once the window is set). Each invocation applies its keys; with
//! `<PREFIX>_ROLLUP_HOLD_IN_WINDOW=true` a window's keys travel in its `state` and are applied
//! at its final invoke ([`Rollup::apply_window`]): one update per counter item and window. The answer is the partial batch response (at most one failure, the lowest sequence
//! number to deliver again) with the window's state; applying a window's keys that fails is a
//! `Retryable` function error (the mapping invokes again with the same state).

use std::collections::HashMap;
use std::task::{Context, Poll};

use aws_lambda_events::dynamodb::{Event, EventRecord, TimeWindowEvent, TimeWindowEventResponse};
use aws_lambda_events::streams::DynamoDbBatchItemFailure;
use dynamodb_exactly_once::__private::{ANSWER_MARGIN, WINDOW_STATE_ENTRY};
use dynamodb_exactly_once::counter::journal::{
    Rollup, RollupBatchReport, RollupConfig, WindowOutcome,
};
use dynamodb_exactly_once::counter::CounterConfig;
use dynamodb_exactly_once::{ConfigError, Deadline, ItemChange};
use lambda_runtime::{LambdaEvent, Service};
use serde_json::Value;

use super::Invocation;
use crate::error::HandlerError;
use crate::settings::FunctionSpec;
use crate::source::dynamodb::change_of;
use crate::source::EventError;
use crate::telemetry::{invocation_span, traced};

/// The counter journal's roll-up as the handler of the journal's stream (see the module
/// documentation): each invocation's batch applied, its report logged (one summary line,
/// ERROR when records became dead letters) and emitted as metrics, whatever the outcome.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RollupFunction {
    /// The function's name (logs).
    pub function: String,
    /// The roll-up.
    pub rollup: Rollup,
}

/// One invocation's batch as the mapping sent it.
#[derive(Debug)]
struct MappingBatch {
    shard: Option<String>,
    changes: Vec<ItemChange>,
    /// The window's state (its keys in the entry `WINDOW_STATE_ENTRY` names).
    state: HashMap<String, String>,
    /// The window's final invoke (or the first after it ended early).
    final_invoke: bool,
    /// `ApproximateCreationDateTime` of the oldest record, epoch ms.
    oldest_ms: Option<u64>,
}

impl RollupFunction {
    /// The roll-up function named `function` (logs) running `rollup`.
    pub fn new(function: impl Into<String>, rollup: Rollup) -> Self {
        RollupFunction {
            function: function.into(),
            rollup,
        }
    }

    /// Apply this invocation's batch; the answer is the mapping's response (a
    /// `TimeWindowEventResponse`).
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<Value, HandlerError> {
        let span = invocation_span(&event.context, &self.function);
        let deadline = Deadline::from_epoch_ms(event.context.deadline, ANSWER_MARGIN);
        let batch =
            parse(event.payload).inspect_err(|_| crate::metrics::emit_rollup_error_metrics())?;
        let Some(shard) = batch.shard.clone() else {
            crate::metrics::emit_rollup_error_metrics();
            return Err(HandlerError::Config(ConfigError::new(
                "TumblingWindowInSeconds",
                "the roll-up needs the batch's shard, which Lambda sends only with a tumbling \
                 window: set the mapping's TumblingWindowInSeconds to 1 or more",
            )));
        };
        if let Err(e) = self.rollup.check_journal().await {
            tracing::error!(error = %e, "journal roll-up: the journal table cannot be used (nothing applied)");
            crate::metrics::emit_rollup_error_metrics();
            return Err(HandlerError::Config(ConfigError::new(
                "COUNTER_JOURNAL_TABLE",
                e.to_string(),
            )));
        }
        let held = batch.state.get(WINDOW_STATE_ENTRY).map(String::as_str);
        let apply = self
            .rollup
            .apply_window(&shard, &batch.changes, held, batch.final_invoke);
        let run = async {
            match deadline.bound(apply).await {
                Some(outcome) => (outcome, false),
                None => (cut_off(&shard, &batch.changes), true),
            }
        };
        let (outcome, cut) = traced(span, deadline, run).await;
        let age_ms = batch
            .oldest_ms
            .map(|at| dynamodb_exactly_once::__private::epoch_millis().saturating_sub(at));
        let (report, state, retry) = match outcome {
            WindowOutcome::Answer { report, state } => (report, state, false),
            WindowOutcome::Retry { report } => (report, None, true),
            _ => {
                return Err(HandlerError::Retry(
                    "journal roll-up: an unknown outcome".into(),
                ))
            }
        };
        log_batch(&self.function, &report, cut || retry, age_ms);
        let end = crate::metrics::RollupEnd {
            cut,
            error: retry && !cut,
            age_ms,
            state_bytes: report.state_bytes,
        };
        crate::metrics::emit_rollup_metrics(&report, end);
        if retry {
            return Err(HandlerError::Retry(
                "journal roll-up: the window's keys were not all applied (invoked again with the same state)".into(),
            ));
        }
        Ok(response(&report, state))
    }
}

/// An invocation cut off at its deadline: invoked again as it was (what was applied, the
/// watermarks turn away).
fn cut_off(shard: &str, changes: &[ItemChange]) -> WindowOutcome {
    let mut report = RollupBatchReport::default();
    report.shard = shard.to_string();
    report.records = changes.len();
    WindowOutcome::Retry { report }
}

/// The mapping's event: a window's (`window` present) or a plain DynamoDB stream event.
fn parse(payload: Value) -> Result<MappingBatch, HandlerError> {
    let malformed = |e: serde_json::Error| {
        HandlerError::Event(EventError::UnknownShape(format!(
            "not a DynamoDB stream event: {e}"
        )))
    };
    let (records, shard, state, final_invoke) = if payload.get("window").is_some() {
        let event: TimeWindowEvent = serde_json::from_value(payload).map_err(malformed)?;
        let window = event.time_window_properties;
        let last = window.is_final_invoke_for_window || window.is_window_terminated_early;
        (
            event.dynamo_db_event.records,
            window.shard_id,
            window.state,
            last,
        )
    } else {
        let event: Event = serde_json::from_value(payload).map_err(malformed)?;
        (event.records, None, HashMap::new(), false)
    };
    let oldest_ms = records
        .iter()
        .map(|r| r.change.approximate_creation_date_time.timestamp_millis())
        .filter(|ms| *ms > 0)
        .min()
        .and_then(|ms| u64::try_from(ms).ok());
    Ok(MappingBatch {
        shard,
        changes: records.into_iter().filter_map(change).collect(),
        state,
        final_invoke,
        oldest_ms,
    })
}

/// A record's change; one that is not a change (the mapping's filter passes `INSERT`s only)
/// is left out with a warning: nothing in it can count.
fn change(record: EventRecord) -> Option<ItemChange> {
    let id = record.event_id.clone();
    change_of(record)
        .inspect_err(|e| tracing::warn!(event_id = %id, reason = %e.message, "journal roll-up: a record that is not an item change was skipped"))
        .ok()
}

/// The partial batch response: at most one failure, the lowest sequence number to deliver
/// again; the window's `state` (its keys, if any are held).
fn response(report: &RollupBatchReport, state: Option<String>) -> Value {
    let mut response = TimeWindowEventResponse::default();
    response.time_window_event_response_properties.state = state
        .map(|s| HashMap::from([(WINDOW_STATE_ENTRY.to_string(), s)]))
        .unwrap_or_default();
    if let Some(seq) = &report.retry_from {
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = Some(seq.clone());
        response.batch_item_failures.push(failure);
    }
    serde_json::to_value(response).unwrap_or(Value::Null)
}

fn log_batch(function: &str, report: &RollupBatchReport, cut: bool, age_ms: Option<u64>) {
    macro_rules! summary {
        ($level:ident) => {
            tracing::$level!(
                function,
                shard = %report.shard,
                records = report.records,
                keys = report.keys,
                applied = report.applied,
                duplicates = report.duplicates,
                item_updates = report.item_updates,
                write_calls = report.write_calls,
                write_units = report.write_units,
                failed_items = report.failed_items,
                dead_letters = report.dead_letters,
                retry_from = report.retry_from.as_deref().unwrap_or(""),
                cut_off = cut,
                age_ms = age_ms.unwrap_or(0),
                summary = %serde_json::to_string(report).unwrap_or_default(),
                "roll-up batch summary"
            )
        };
    }
    if report.dead_letters > 0 {
        summary!(error);
    } else if report.retry_from.is_some() || cut {
        summary!(warn);
    } else {
        summary!(info);
    }
}

impl Service<LambdaEvent<Value>> for RollupFunction {
    type Response = Value;
    type Error = HandlerError;
    type Future = Invocation<Value>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<Value>) -> Self::Future {
        let function = self.clone();
        Box::pin(async move { function.handle(event).await })
    }
}

/// The roll-up function of `spec`'s variables: the counter's settings exactly as its writer
/// reads them (journal mode required); errors name the variable.
pub(crate) fn rollup_from_env(
    spec: FunctionSpec,
    ddb: aws_sdk_dynamodb::Client,
) -> Result<RollupFunction, ConfigError> {
    let counter: CounterConfig = spec.config_from_env()?;
    let hold =
        crate::settings::env_parse::<bool>(&spec.var("ROLLUP_HOLD_IN_WINDOW"))?.unwrap_or(false);
    let config = RollupConfig::builder(counter)
        .hold_in_window(hold)
        .build()
        .map_err(|e| e.renamed(|s| spec.var(s)))?;
    Ok(RollupFunction {
        function: spec.name.into(),
        rollup: Rollup::new(ddb, config),
    })
}

/// The whole `main` of the counter journal's roll-up function (see
/// [`run_writer`](super::run_writer)): the DynamoDB client from the SDK's configuration, the
/// roll-up from `spec`'s variables (the counter's settings exactly as its writer reads them,
/// journal mode required).
pub async fn run_rollup(spec: FunctionSpec) -> Result<(), lambda_runtime::Error> {
    crate::telemetry::init();
    let config = crate::client::sdk_config_from_env().await?;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let function = rollup_from_env(spec, ddb)?;
    lambda_runtime::run(function).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::offline_client;
    use serde_json::json;

    #[test]
    fn the_rollup_reads_the_counter_settings_and_needs_journal_mode() {
        let spec = FunctionSpec {
            name: "rollup-test",
            env_prefix: "ROLLUPTEST",
        };
        // Variables of this test's own prefix only: nothing else reads them.
        std::env::set_var("ROLLUPTEST_TABLE", "Counters");
        let err = rollup_from_env(spec, offline_client()).expect_err("inline mode has no journal");
        assert_eq!(err.setting, "ROLLUPTEST_MODE");
        std::env::set_var("ROLLUPTEST_JOURNAL_TABLE", "CountersJournal");
        let function = rollup_from_env(spec, offline_client()).expect("journal mode");
        assert_eq!(function.function, "rollup-test");
    }

    fn record(seq: &str) -> Value {
        json!({
            "eventID": format!("e{seq}"), "eventName": "INSERT", "eventVersion": "1.1",
            "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:1:table/j/stream/2026-11-29T00:00:00.000",
            "dynamodb": {"ApproximateCreationDateTime": 1_800_000_000.0, "SequenceNumber": seq,
                "SizeBytes": 10, "StreamViewType": "NEW_IMAGE",
                "Keys": {"pk": {"S": "a"}, "sk": {"S": "b"}}, "NewImage": {"pk": {"S": "a"}}}
        })
    }

    #[test]
    fn a_window_event_names_its_shard_and_a_plain_event_does_not() {
        let window = json!({
            "Records": [record("100"), record("200")],
            "window": {"start": "2026-11-29T00:00:00Z", "end": "2026-11-29T00:01:00Z"},
            "state": {"k": "v"}, "shardId": "shardId-00000001-aa",
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:1:table/j/stream/2026-11-29T00:00:00.000",
            "isFinalInvokeForWindow": false, "isWindowTerminatedEarly": false
        });
        let batch = parse(window).expect("window event");
        assert_eq!(batch.shard.as_deref(), Some("shardId-00000001-aa"));
        assert_eq!(batch.changes.len(), 2);
        assert_eq!(batch.oldest_ms, Some(1_800_000_000_000));
        assert_eq!(batch.state.get("k").map(String::as_str), Some("v"));
        let plain = parse(json!({"Records": [record("100")]})).expect("plain event");
        assert_eq!(plain.shard, None);
        assert!(parse(json!({"nothing": 1})).is_err());
    }

    #[test]
    fn the_response_names_only_the_lowest_failed_record() {
        let mut report = RollupBatchReport::default();
        let ok = response(&report, None);
        assert_eq!(ok["batchItemFailures"], json!([]));
        report.retry_from = Some("200".into());
        let failed = response(&report, Some("v".into()));
        assert_eq!(
            failed["batchItemFailures"],
            json!([{"itemIdentifier": "200"}])
        );
        assert_eq!(failed["state"], json!({ WINDOW_STATE_ENTRY: "v" }));
    }
}
