//! The glue every writer function shares: a protocol, its dead letters and its deadline margin,
//! behind one `handle(LambdaEvent<Value>)`.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde_json::Value;

use crate::config::{env_parse, env_required, ConfigError};
use crate::dead_letter::{DeadLetter, DeadLetters, Rejection};
use crate::error::StoreError;
use crate::pipeline::{process_batch, BatchReport, Protocol, RecordResult};
use crate::ratchet::{Ratchet, RatchetConfig};
use crate::source::{Batch, BatchResponse, Deadline, EventError, SourceKind, SourceRecord};

/// Default time kept in reserve before the invocation deadline.
pub const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_millis(2000);

/// The invocation failed as a whole (Lambda retries the entire batch).
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The payload is not a Kinesis or SQS batch.
    #[error(transparent)]
    Event(#[from] EventError),
}

impl From<HandlerError> for Diagnostic {
    fn from(err: HandlerError) -> Self {
        let error_type = match err {
            HandlerError::Event(_) => "InvalidEvent",
        };
        Diagnostic {
            error_type: error_type.into(),
            error_message: err.to_string(),
        }
    }
}

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
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<BatchResponse, HandlerError> {
        let deadline = Deadline::from_epoch_ms(event.context.deadline, self.deadline_margin);
        tracing::debug!(
            request_id = %event.context.request_id,
            deadline_ms = event.context.deadline,
            now_ms = crate::source::epoch_millis(),
            "invocation"
        );
        Ok(self
            .handle_batch(&Batch::from_event(event.payload)?, deadline)
            .await
            .response)
    }

    /// Process an already decoded batch (also used to replay dead letters).
    pub async fn handle_batch(&self, batch: &Batch, deadline: Deadline) -> BatchReport<P::Outcome> {
        process_batch(
            &self.function,
            batch,
            &self.protocol,
            &self.dead_letters,
            deadline,
        )
        .await
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
}

impl<P: Protocol> Writer<P> {
    /// Run every kept record of this function through the protocol again (after a producer or
    /// configuration fix). Records that now succeed are removed from the dead-letter table;
    /// the others stay, with their latest reason.
    pub async fn replay_dead_letters(&self) -> Result<ReplayReport, StoreError> {
        let kept = self.dead_letters.list().await?;
        let mut report = ReplayReport::default();
        for kind in [SourceKind::Kinesis, SourceKind::Sqs] {
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
            let results = self.handle_batch(&batch, Deadline::none()).await.results;
            for (letter, result) in group.into_iter().zip(results) {
                match result {
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

/// The ratchet writer from `RATCHET_*` variables (see [`RatchetConfig::from_env`]) plus
/// `RATCHET_DEAD_LETTER_TABLE` (required) and `RATCHET_DEADLINE_MARGIN_MS`.
pub fn ratchet_writer_from_env(client: Client) -> Result<Writer<Ratchet>, ConfigError> {
    let config = RatchetConfig::from_env()?;
    let dead_letters = DeadLetters::new(
        client.clone(),
        env_required("RATCHET_DEAD_LETTER_TABLE")?,
        "ratchet-writer",
    );
    let margin = env_parse::<u64>("RATCHET_DEADLINE_MARGIN_MS")?
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_DEADLINE_MARGIN);
    Ok(Writer {
        function: "ratchet-writer".into(),
        protocol: Ratchet::new(client, config),
        dead_letters,
        deadline_margin: margin,
    })
}
