//! The glue every writer function shares: a protocol, its dead letters and its deadline margin,
//! behind one `handle(LambdaEvent<Value>)`.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::config::Configured;
use dynamodb_exactly_once::ddb::clock::epoch_millis;
use dynamodb_exactly_once::{
    ConfigError, Deadline, Outcome, Protocol, RecordResult, Rejection, StoreError,
};
use lambda_runtime::LambdaEvent;
use serde_json::Value;
use tracing::Instrument;

use crate::dead_letter::{DeadLetter, DeadLetters};
use crate::error::HandlerError;
use crate::otel::batch_span;
use crate::pipeline::{process_batch, AgeCheck, BatchReport};
use crate::settings::{env_parse, env_required, FunctionSpec};
use crate::source::{Batch, BatchResponse, SourceKind, SourceRecord};
use crate::telemetry::{invocation_span, traced};

/// Default time kept in reserve before the invocation deadline.
pub const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_millis(2000);

/// A writer function: a protocol plus where its rejected records go.
#[derive(Debug, Clone)]
pub struct Writer<P> {
    /// The function's name, recorded with dead letters and logs.
    pub function: String,
    /// The write protocol.
    pub protocol: P,
    /// Where malformed records are kept.
    pub dead_letters: DeadLetters,
    /// Stop starting writes this long before the invocation deadline.
    pub deadline_margin: Duration,
}

impl<P: Protocol> Writer<P> {
    /// Handle one invocation: the partial batch response.
    /// Every line it logs carries the invocation's request id, trace id and function name.
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<BatchResponse, HandlerError> {
        let span = invocation_span(&event.context, &self.function);
        traced(span, async {
            let deadline = Deadline::from_epoch_ms(event.context.deadline, self.deadline_margin);
            tracing::debug!(
                deadline_ms = event.context.deadline,
                now_ms = epoch_millis(),
                "invocation"
            );
            let batch = Batch::from_event(event.payload).inspect_err(|err| {
                tracing::error!(error = %err, "the payload is not a Kinesis or SQS batch");
            })?;
            Ok(self.handle_batch(&batch, deadline).await.response)
        })
        .await
    }

    /// Process an already decoded batch (also used to replay dead letters): the report, its
    /// summary logged and emitted as metrics.
    pub async fn handle_batch(&self, batch: &Batch, deadline: Deadline) -> BatchReport<P::Outcome> {
        self.run_batch(batch, deadline, AgeCheck::Enforce).await
    }

    async fn run_batch(
        &self,
        batch: &Batch,
        deadline: Deadline,
        ages: AgeCheck,
    ) -> BatchReport<P::Outcome> {
        let span = batch_span(&self.function, batch.kind, batch.records.len());
        let report = process_batch(
            &self.function,
            batch,
            &self.protocol,
            &self.dead_letters,
            deadline,
            ages,
        )
        .instrument(span)
        .await;
        report.summary.log(&self.function, batch.kind);
        crate::metrics::emit_batch_metrics(&self.function, &report.summary);
        report
    }
}

/// What a dead-letter replay did.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReplayReport {
    /// Dead letters whose records now succeeded; they were removed.
    pub replayed: Vec<String>,
    /// Dead letters still rejected, with the current reason; they stay.
    pub still_rejected: Vec<(String, Rejection)>,
    /// Dead letters that failed transiently or were deferred; they stay, try again.
    pub failed: Vec<String>,
    /// Dead letters whose record ended in `conflict` (decided, not applied); they stay, for
    /// an operator to look at.
    pub conflicted: Vec<String>,
}

impl<P: Protocol> Writer<P> {
    /// Run every kept record of this function through the protocol again (after a producer or
    /// configuration fix). Records that now succeed are removed from the dead-letter table;
    /// the others stay, with their latest reason, and so do records that end in `conflict`
    /// (not applied). Records older than the protocol applies
    /// safely stay `too_old` (see [`Writer::replay_dead_letters_forced`]).
    pub async fn replay_dead_letters(&self) -> Result<ReplayReport, StoreError> {
        self.replay(AgeCheck::Enforce).await
    }

    /// Like [`Writer::replay_dead_letters`], applying records however old they are: for an
    /// operator who checked that a `too_old` record cannot undo anything (e.g. its item was
    /// never deleted, its key never applied).
    pub async fn replay_dead_letters_forced(&self) -> Result<ReplayReport, StoreError> {
        self.replay(AgeCheck::Skip).await
    }

    async fn replay(&self, ages: AgeCheck) -> Result<ReplayReport, StoreError> {
        let kept = self.dead_letters.list().await?;
        let mut report = ReplayReport::default();
        for kind in [SourceKind::Kinesis, SourceKind::Sqs, SourceKind::DynamoDb] {
            let group: Vec<&DeadLetter> = kept.iter().filter(|l| l.position.kind == kind).collect();
            if group.is_empty() {
                continue;
            }
            let batch = Batch {
                kind,
                records: group
                    .iter()
                    .map(|l| SourceRecord {
                        position: l.position.clone(),
                        body: l.payload.clone(),
                    })
                    .collect(),
            };
            let results = self.run_batch(&batch, Deadline::none(), ages).await.results;
            for (letter, result) in group.into_iter().zip(results) {
                match result {
                    RecordResult::Done(outcome) if outcome.label() == "conflict" => {
                        report.conflicted.push(letter.id.clone())
                    }
                    RecordResult::Done(_) => {
                        self.dead_letters.remove(letter).await?;
                        report.replayed.push(letter.id.clone());
                    }
                    RecordResult::Rejected(reason) => {
                        report.still_rejected.push((letter.id.clone(), reason))
                    }
                    RecordResult::Failed(_) | RecordResult::Deferred => {
                        report.failed.push(letter.id.clone())
                    }
                }
            }
        }
        Ok(report)
    }
}

/// The writer function of protocol `P` from its environment: the protocol's settings
/// (`<PREFIX>_<SETTING>`, see [`crate::settings`]), `<PREFIX>_DEAD_LETTER_TABLE` (required)
/// and `<PREFIX>_DEADLINE_MARGIN_MS` (default [`DEFAULT_DEADLINE_MARGIN`]).
pub fn writer_from_env<P: Protocol + Configured>(
    client: Client,
    spec: FunctionSpec,
) -> Result<Writer<P>, ConfigError> {
    let dead_letters = DeadLetters::new(
        client.clone(),
        env_required(&spec.var("DEAD_LETTER_TABLE"))?,
        spec.name,
    );
    let margin = env_parse::<u64>(&spec.var("DEADLINE_MARGIN_MS"))?
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_DEADLINE_MARGIN);
    Ok(Writer {
        function: spec.name.into(),
        protocol: spec.from_env(client)?,
        dead_letters,
        deadline_margin: margin,
    })
}
