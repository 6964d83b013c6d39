//! The glue every writer function shares: a protocol, its dead letters and its deadline margin,
//! behind one `handle(LambdaEvent<Value>)`.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde_json::Value;

use crate::config::{env_parse, env_required, ConfigError};
use crate::dead_letter::DeadLetters;
use crate::pipeline::{process_batch, BatchReport, Protocol};
use crate::ratchet::{Ratchet, RatchetConfig};
use crate::source::{Batch, BatchResponse, Deadline, EventError};

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
