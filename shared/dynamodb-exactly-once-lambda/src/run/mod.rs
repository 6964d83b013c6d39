//! Running a function: [`Writer`], [`SweeperFunction`] and [`RollupFunction`] are
//! `tower::Service`s of `LambdaEvent<Value>`, so `lambda_runtime::run(writer)` works and
//! composes with lambda_runtime's layers and the user's own; [`run_writer`], [`run_sweeper`]
//! and [`run_rollup`] are the whole `main` of a ready function.
//!
//! [`RollupFunction`] and [`run_rollup`] need the crate's `journal` feature (the counter
//! journal's roll-up).
//!
//! ```no_run
//! use dynamodb_exactly_once::ratchet::Ratchet;
//! use dynamodb_exactly_once_lambda::settings::functions::RATCHET_WRITER;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), lambda_runtime::Error> {
//!     dynamodb_exactly_once_lambda::run_writer::<Ratchet>(RATCHET_WRITER).await
//! }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use dynamodb_exactly_once::__private::ANSWER_MARGIN;
use dynamodb_exactly_once::config::Configured;
use dynamodb_exactly_once::txn::sweep::{SweepSummary, Sweeper};
use dynamodb_exactly_once::{Deadline, Protocol};
use lambda_runtime::{LambdaEvent, Service};
use serde_json::Value;

use crate::dead_letter::DeadLetters;
use crate::error::HandlerError;
use crate::settings::functions::TX_COORDINATOR;
use crate::settings::{env_opt, FunctionSpec};
use crate::source::BatchResponse;
use crate::telemetry::{invocation_span, traced};
use crate::writer::{writer_from_env, Writer};

#[cfg(feature = "journal")]
mod rollup;
#[cfg(feature = "journal")]
pub use rollup::{run_rollup, RollupFunction};

/// The future of one invocation.
pub(crate) type Invocation<T> = Pin<Box<dyn Future<Output = Result<T, HandlerError>> + Send>>;

impl<P> Service<LambdaEvent<Value>> for Writer<P>
where
    P: Protocol + Clone + Send + Sync + 'static,
{
    type Response = BatchResponse;
    type Error = HandlerError;
    type Future = Invocation<BatchResponse>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<Value>) -> Self::Future {
        let writer = self.clone();
        Box::pin(async move { writer.handle(event).await })
    }
}

/// The scheduled sweeper as a function: one sweep per invocation, stopping cleanly before the
/// deadline, its summary answered, logged and emitted as metrics. The schedule's payload is
/// not used.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SweeperFunction {
    /// The function's name (logs).
    pub function: String,
    /// The sweeper.
    pub sweeper: Sweeper,
}

impl SweeperFunction {
    /// The sweeper function named `function` (logs) running `sweeper`.
    pub fn new(function: impl Into<String>, sweeper: Sweeper) -> Self {
        SweeperFunction {
            function: function.into(),
            sweeper,
        }
    }

    /// Run one sweep for this invocation.
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<SweepSummary, HandlerError> {
        let span = invocation_span(&event.context, &self.function);
        // At least the answer margin: the cutoff (and the trace flush) stays before the deadline.
        let margin = self.sweeper.config().deadline_margin().max(ANSWER_MARGIN);
        let deadline = Deadline::from_epoch_ms(event.context.deadline, margin);
        let summary = traced(span, deadline, self.sweeper.sweep(deadline)).await?;
        crate::metrics::emit_sweep_metrics(&summary);
        Ok(summary)
    }
}

impl Service<LambdaEvent<Value>> for SweeperFunction {
    type Response = SweepSummary;
    type Error = HandlerError;
    type Future = Invocation<SweepSummary>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<Value>) -> Self::Future {
        let function = self.clone();
        Box::pin(async move { function.handle(event).await })
    }
}

/// The whole `main` of a writer function: JSON logs (and traces when configured), the
/// DynamoDB client from the standard AWS environment, the writer from `spec`'s variables
/// (start-up fails with a message naming the variable at fault), then the Lambda runtime.
pub async fn run_writer<P>(spec: FunctionSpec) -> Result<(), lambda_runtime::Error>
where
    P: Protocol + Configured + crate::mapping::RecordShape + Clone + Send + Sync + 'static,
{
    crate::telemetry::init();
    let client = crate::client::client_from_env().await?;
    let writer: Writer<P> = writer_from_env(client, spec).await?;
    lambda_runtime::run(writer).await
}

/// The whole `main` of the sweeper function (see [`run_writer`] and [`sweeper_from_env`]).
pub async fn run_sweeper(spec: FunctionSpec) -> Result<(), lambda_runtime::Error> {
    crate::telemetry::init();
    let client = crate::client::client_from_env().await?;
    let function = sweeper_from_env(spec, client)?;
    lambda_runtime::run(function).await
}

/// The sweeper function of `spec`'s variables: the sweeper's settings and, when
/// `<PREFIX>_DEAD_LETTER_TABLE` is set, the dead letters it keeps the records it retires on a
/// key the table refuses in: the coordinator's ([`TX_COORDINATOR`]), as deployment
/// `<PREFIX>_DEPLOYMENT` (the template names the coordinator's function; default this
/// function's name, `AWS_LAMBDA_FUNCTION_NAME`). Without it such records are only logged
/// (WARN). Errors name the variable.
pub fn sweeper_from_env(
    spec: FunctionSpec,
    client: aws_sdk_dynamodb::Client,
) -> Result<SweeperFunction, dynamodb_exactly_once::ConfigError> {
    let mut sweeper: Sweeper = spec.from_env(client.clone())?;
    if let Some(table) = env_opt(&spec.var("DEAD_LETTER_TABLE")) {
        let deployment =
            env_opt(&spec.var("DEPLOYMENT")).or_else(|| env_opt("AWS_LAMBDA_FUNCTION_NAME"));
        let letters =
            DeadLetters::new(client, table, TX_COORDINATOR.name).for_deployment(deployment);
        sweeper = sweeper.keeping_retired(Arc::new(letters));
    }
    Ok(SweeperFunction {
        function: spec.name.into(),
        sweeper,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::offline_client;

    #[test]
    fn the_sweeper_keeps_retired_records_only_with_a_dead_letter_table() {
        let spec = FunctionSpec {
            name: "sweeper-test",
            env_prefix: "SWEEPERTEST",
        };
        // Variables of this test's own prefix only: nothing else reads them.
        std::env::set_var("SWEEPERTEST_TABLE", "Tx");
        let ddb = offline_client();
        let plain = sweeper_from_env(spec, ddb.clone()).expect("valid");
        assert!(format!("{:?}", plain.sweeper).contains("keeper: None"));
        std::env::set_var("SWEEPERTEST_DEAD_LETTER_TABLE", "Letters");
        std::env::set_var("SWEEPERTEST_DEPLOYMENT", "coordinator-fn");
        let keeping = format!("{:?}", sweeper_from_env(spec, ddb).expect("valid").sweeper);
        for part in [
            "\"Letters\"",
            "\"tx-coordinator\"",
            "Some(\"coordinator-fn\")",
        ] {
            assert!(keeping.contains(part), "{part}: {keeping}");
        }
    }
}
