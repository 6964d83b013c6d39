//! The counter journal's roll-up as a function (feature `journal`): [`RollupFunction`], a
//! `tower::Service` running one [`Rollup::run`] per invocation, and [`run_rollup`], the whole
//! `main` of the ready `counter-rollup`.

use std::task::{Context, Poll};
use std::time::Duration;

use dynamodb_exactly_once::batch::ANSWER_MARGIN;
use dynamodb_exactly_once::counter::journal::{Rollup, RollupConfig, RollupReport};
use dynamodb_exactly_once::counter::CounterConfig;
use dynamodb_exactly_once::Deadline;
use lambda_runtime::{LambdaEvent, Service};
use serde_json::Value;

use super::Invocation;
use crate::error::HandlerError;
use crate::settings::{env_parse, FunctionSpec};
use crate::telemetry::{invocation_span, traced};

/// The longest roll-up run by default (`<PREFIX>_ROLLUP_SECONDS`): with the function's 70 s
/// timeout, 20 s are left for the work in flight and the answer.
pub const DEFAULT_ROLLUP_SECONDS: u64 = 50;

/// Kept before the invocation deadline when the roll-up's budget comes from the time left:
/// a run finishes the work in flight after its budget (a page of updates, a checkpoint; one
/// call is bounded by the client's operation timeout, 10 s by default).
pub const ROLLUP_MARGIN: Duration = Duration::from_secs(15);

/// The scheduled roll-up of the counter's journal as a function: one
/// [`Rollup::run`] per invocation, for the time left minus [`ROLLUP_MARGIN`] and at most
/// `max_run`; its report answered, logged (one summary line, ERROR when records were lost
/// to the stream's retention) and emitted as metrics. The schedule's payload is not used. An
/// error of the run is the invocation's error (Lambda counts it; the next run starts from the
/// last checkpoint).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RollupFunction {
    /// The function's name (logs).
    pub function: String,
    /// The roll-up.
    pub rollup: Rollup,
    /// The longest run.
    pub max_run: Duration,
}

impl RollupFunction {
    /// The roll-up function named `function` (logs) running `rollup`, each run at most
    /// `max_run`.
    pub fn new(function: impl Into<String>, rollup: Rollup, max_run: Duration) -> Self {
        RollupFunction {
            function: function.into(),
            rollup,
            max_run,
        }
    }

    /// Run the roll-up for this invocation.
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<RollupReport, HandlerError> {
        let span = invocation_span(&event.context, &self.function);
        let deadline = Deadline::from_epoch_ms(event.context.deadline, ANSWER_MARGIN);
        let budget = rollup_budget(deadline.cutoff_in(), self.max_run);
        let run = async {
            let report = deadline
                .bound(self.rollup.run(budget))
                .await
                .ok_or(HandlerError::RollupCutOff)?
                .map_err(|e| {
                    tracing::error!(error = %e, "journal roll-up failed; the next run resumes from the last checkpoint");
                    HandlerError::Rollup(e)
                })?;
            log_rollup(&self.function, budget, &report);
            Ok::<_, HandlerError>(report)
        };
        let report = traced(span, deadline, run).await?;
        crate::metrics::emit_rollup_metrics(&report);
        Ok(report)
    }
}

/// A run's budget: the time left before the cutoff (`None`: no deadline) minus
/// [`ROLLUP_MARGIN`], at most `max_run`.
pub(crate) fn rollup_budget(left: Option<Duration>, max_run: Duration) -> Duration {
    left.map_or(max_run, |left| {
        left.saturating_sub(ROLLUP_MARGIN).min(max_run)
    })
}

fn log_rollup(function: &str, budget: Duration, report: &RollupReport) {
    macro_rules! summary {
        ($level:ident) => {
            tracing::$level!(
                function,
                budget_ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX),
                shards = report.shards,
                records = report.records,
                keys = report.keys,
                applied = report.applied,
                duplicates = report.duplicates,
                item_updates = report.item_updates,
                write_calls = report.write_calls,
                write_units = report.write_units,
                trimmed = report.trimmed,
                failed_items = report.failed_items,
                failed_shards = report.failed_shards,
                dead_letters = report.dead_letters,
                caught_up = report.caught_up,
                iterator_age_ms = report.iterator_age_ms,
                summary = %serde_json::to_string(report).unwrap_or_default(),
                "roll-up summary"
            )
        };
    }
    if report.trimmed > 0 || report.dead_letters > 0 {
        summary!(error);
    } else if report.failed_items > 0 || report.failed_shards > 0 {
        summary!(warn);
    } else {
        summary!(info);
    }
}

impl Service<LambdaEvent<Value>> for RollupFunction {
    type Response = RollupReport;
    type Error = HandlerError;
    type Future = Invocation<RollupReport>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<Value>) -> Self::Future {
        let function = self.clone();
        Box::pin(async move { function.handle(event).await })
    }
}

/// The roll-up function of `spec`'s variables: the counter's settings exactly as its writer
/// reads them (journal mode required), `<PREFIX>_ROLLUP_SECONDS` (default
/// [`DEFAULT_ROLLUP_SECONDS`]) and `<PREFIX>_ROLLUP_HOLD_SECONDS` (`RollupConfig::hold`,
/// default 0); errors name the variable.
pub fn rollup_from_env(
    spec: FunctionSpec,
    ddb: aws_sdk_dynamodb::Client,
    streams: aws_sdk_dynamodbstreams::Client,
) -> Result<RollupFunction, dynamodb_exactly_once::ConfigError> {
    let counter: CounterConfig = spec.config_from_env()?;
    let hold = env_parse::<u64>(&spec.var("rollup_hold_seconds"))?;
    let config = RollupConfig::builder(counter)
        .hold(Duration::from_secs(hold.unwrap_or(0)))
        .build()
        .map_err(|e| e.renamed(|s| spec.var(s)))?;
    let seconds = spec.var("rollup_seconds");
    let max_run = match env_parse::<u64>(&seconds)? {
        Some(0) => {
            return Err(dynamodb_exactly_once::ConfigError::new(
                &seconds,
                "must be at least 1",
            ))
        }
        Some(s) => Duration::from_secs(s),
        None => Duration::from_secs(DEFAULT_ROLLUP_SECONDS),
    };
    Ok(RollupFunction {
        function: spec.name.into(),
        rollup: Rollup::new(ddb, streams, config),
        max_run,
    })
}

/// The whole `main` of the counter journal's roll-up function (see [`run_writer`](super::run_writer)): the
/// DynamoDB and DynamoDB Streams clients from one SDK configuration
/// ([`crate::client::streams_client`]), the roll-up from `spec`'s variables
/// ([`rollup_from_env`]).
pub async fn run_rollup(spec: FunctionSpec) -> Result<(), lambda_runtime::Error> {
    crate::telemetry::init();
    let config = crate::client::sdk_config_from_env().await?;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let streams = crate::client::streams_client(&config);
    let function = rollup_from_env(spec, ddb, streams)?;
    lambda_runtime::run(function).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_leaves_the_margin_and_is_capped() {
        let max = Duration::from_secs(50);
        assert_eq!(rollup_budget(None, max), max);
        assert_eq!(rollup_budget(Some(Duration::from_secs(69)), max), max);
        assert_eq!(
            rollup_budget(Some(Duration::from_secs(30)), max),
            Duration::from_secs(15)
        );
        assert_eq!(
            rollup_budget(Some(Duration::from_secs(3)), max),
            Duration::ZERO
        );
    }

    fn offline_clients() -> (aws_sdk_dynamodb::Client, aws_sdk_dynamodbstreams::Client) {
        let ddb = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        let streams = aws_sdk_dynamodbstreams::Config::builder()
            .behavior_version(aws_sdk_dynamodbstreams::config::BehaviorVersion::latest())
            .build();
        (
            aws_sdk_dynamodb::Client::from_conf(ddb),
            aws_sdk_dynamodbstreams::Client::from_conf(streams),
        )
    }
    #[test]
    fn the_rollup_reads_the_counter_settings_and_needs_journal_mode() {
        let spec = FunctionSpec {
            name: "rollup-test",
            env_prefix: "ROLLUPTEST",
        };
        // Variables of this test's own prefix only: nothing else reads them.
        std::env::set_var("ROLLUPTEST_TABLE", "Counters");
        let (ddb, streams) = offline_clients();
        let err = rollup_from_env(spec, ddb.clone(), streams.clone())
            .expect_err("inline mode has no journal");
        assert_eq!(err.setting, "ROLLUPTEST_MODE");
        std::env::set_var("ROLLUPTEST_JOURNAL_TABLE", "CountersJournal");
        let function = rollup_from_env(spec, ddb.clone(), streams.clone()).expect("journal mode");
        assert_eq!(
            function.max_run,
            Duration::from_secs(DEFAULT_ROLLUP_SECONDS)
        );
        assert_eq!(function.function, "rollup-test");
        std::env::set_var("ROLLUPTEST_ROLLUP_SECONDS", "20");
        let function = rollup_from_env(spec, ddb.clone(), streams.clone()).expect("20 s");
        assert_eq!(function.max_run, Duration::from_secs(20));
        std::env::set_var("ROLLUPTEST_ROLLUP_SECONDS", "soon");
        let err = rollup_from_env(spec, ddb, streams).expect_err("not a number");
        assert_eq!(err.setting, "ROLLUPTEST_ROLLUP_SECONDS");
    }
}
