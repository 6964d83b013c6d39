//! Running a function: [`Writer`] and [`SweeperFunction`] are `tower::Service`s of
//! `LambdaEvent<Value>`, so `lambda_runtime::run(writer)` works and composes with
//! lambda_runtime's layers and the user's own; [`run_writer`] and [`run_sweeper`] are the
//! whole `main` of a ready function.
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
use std::task::{Context, Poll};

use dynamodb_exactly_once::batch::ANSWER_MARGIN;
use dynamodb_exactly_once::config::Configured;
use dynamodb_exactly_once::txn::sweep::{SweepSummary, Sweeper};
use dynamodb_exactly_once::{Deadline, Protocol};
use lambda_runtime::{LambdaEvent, Service};
use serde_json::Value;

use crate::error::HandlerError;
use crate::settings::FunctionSpec;
use crate::source::BatchResponse;
use crate::telemetry::{invocation_span, traced};
use crate::writer::{writer_from_env, Writer};

/// The future of one invocation.
pub type Invocation<T> = Pin<Box<dyn Future<Output = Result<T, HandlerError>> + Send>>;

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
pub struct SweeperFunction {
    /// The function's name (logs).
    pub function: String,
    /// The sweeper.
    pub sweeper: Sweeper,
}

impl SweeperFunction {
    /// Run one sweep for this invocation.
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<SweepSummary, HandlerError> {
        let span = invocation_span(&event.context, &self.function);
        // At least the answer margin: the cutoff (and the trace flush) stays before the deadline.
        let margin = self.sweeper.config().deadline_margin.max(ANSWER_MARGIN);
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
    P: Protocol + Configured + Clone + Send + Sync + 'static,
{
    crate::telemetry::init();
    let client = crate::client::client_from_env().await?;
    let writer: Writer<P> = writer_from_env(client, spec)?;
    lambda_runtime::run(writer).await
}

/// The whole `main` of the sweeper function (see [`run_writer`]).
pub async fn run_sweeper(spec: FunctionSpec) -> Result<(), lambda_runtime::Error> {
    crate::telemetry::init();
    let client = crate::client::client_from_env().await?;
    let function = SweeperFunction {
        function: spec.name.into(),
        sweeper: spec.from_env(client)?,
    };
    lambda_runtime::run(function).await
}
