//! The SQS dead-letter sink (feature `sqs`): each rejected record becomes one message on a
//! queue, an [`SqsLetter`] in JSON.
//!
//! The record is acknowledged only once SQS answered `SendMessage` with success; an error (or
//! the deadline) reports it in `batchItemFailures`, and Lambda delivers it again.
//!
//! **Copies.** A rejected record can be given to the sink more than once: its redelivery after
//! a lost answer or a cut-off invocation, or a Kinesis shard restarted from an earlier record.
//! * On a **FIFO** queue (its URL ends with `.fifo`) every letter carries a
//!   `MessageDeduplicationId` derived from the record's identity (the SHA-256 of its
//!   [`letter_id`]), so SQS drops the copies sent within its 5-minute de-duplication window.
//!   Its `MessageGroupId` is the record's own message group or partition key (their SHA-256
//!   when they are not a valid group id), else `"dead-letters"`.
//! * On a **standard** queue delivery is at least once: a redelivered record can be queued
//!   twice (and SQS itself may deliver a message twice). Every letter carries the record's
//!   [`SqsLetter::id`], the same on each copy: de-duplicate by it.
//!
//! **Size.** A letter is at most the sink's message limit (default
//! 256 KiB, the default `MaximumMessageSize`; raise it with
//! [`SqsDeadLetters::max_message_bytes`] for a queue that accepts more). A body that does not
//! fit is cut, marked `BodyTruncated` with its whole size in `BodyBytes`: a rejected record of
//! any size is kept, never refused for its size. Keep the whole payload with the table sink
//! ([`DeadLetters`](crate::dead_letter::DeadLetters)) when it matters.
//!
//! The ready writer functions keep their dead letters in the table (which `ops dead-letters`
//! lists and replays) unless `<PREFIX>_DEAD_LETTER_SINK=sqs` chooses this sink (see
//! [`writer_from_env`](crate::writer::writer_from_env)); the
//! [`Processor`](crate::processor::Processor) and [`Writer`](crate::writer::Writer) take it
//! with `.dead_letters(..)`.

use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::operation::send_message::SendMessageError;
use aws_sdk_sqs::Client;
use futures::future::BoxFuture;
use sha2::{Digest, Sha256};

use dynamodb_exactly_once::__private::bounded;
use dynamodb_exactly_once::__private::epoch_seconds;
use dynamodb_exactly_once::batch::RecordFailure;
use dynamodb_exactly_once::Rejection;

use super::sink::{DeadLetterSink, Disposal};
use super::{letter_id, MAX_REASON_CHARS};
use crate::source::{SourcePosition, SourceRecord};

mod letter;

pub use letter::SqsLetter;
pub(crate) use letter::DEFAULT_MAX_MESSAGE_BYTES;
pub(crate) use letter::{MAX_MESSAGE_BYTES, MIN_MESSAGE_BYTES};

/// The `MessageGroupId` of a letter (FIFO queue) whose record has no message group or
/// partition key (a DynamoDB stream record).
pub(crate) const DEFAULT_GROUP_ID: &str = "dead-letters";

/// Longest error message kept from an SQS error.
const MAX_ERROR_CHARS: usize = 300;

/// Keeps rejected records as messages on an SQS queue (see the module documentation).
#[derive(Debug, Clone)]
pub struct SqsDeadLetters {
    client: Client,
    queue_url: String,
    function: String,
    deployment: Option<String>,
    max_message_bytes: usize,
}

impl SqsDeadLetters {
    /// Letters of `function` to the queue at `queue_url`, at most
    /// 256 KiB each.
    pub fn new(client: Client, queue_url: impl Into<String>, function: impl Into<String>) -> Self {
        SqsDeadLetters {
            client,
            queue_url: queue_url.into(),
            function: function.into(),
            deployment: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }

    /// The same, naming `deployment` (the Lambda function's name) in each letter and its id,
    /// as the table sink does.
    pub fn for_deployment(mut self, deployment: Option<String>) -> Self {
        self.deployment = deployment.filter(|d| !d.is_empty());
        self
    }

    /// Letters of at most `bytes` (the queue's `MaximumMessageSize`), within
    /// `MIN_MESSAGE_BYTES``..=``MAX_MESSAGE_BYTES` (a value outside is brought to the
    /// nearer bound).
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes.clamp(MIN_MESSAGE_BYTES, MAX_MESSAGE_BYTES);
        self
    }

    /// The queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Whether the queue is a FIFO queue (its name ends with `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.queue_url.ends_with(".fifo")
    }

    /// The message body that keeps `record`, rejected for `reason`: an [`SqsLetter`] in JSON,
    /// at most the message limit.
    pub fn message(
        &self,
        record: &SourceRecord,
        reason: &Rejection,
    ) -> Result<String, SqsDeadLetterError> {
        let letter = SqsLetter {
            id: letter_id(&self.function, self.deployment.as_deref(), &record.position),
            function: self.function.clone(),
            deployment: self.deployment.clone(),
            reason: Rejection::new(reason.code, bounded(&reason.message, MAX_REASON_CHARS)),
            position: record.position.clone(),
            rejected_at: epoch_seconds(),
            body: None,
            body_base64: None,
            body_bytes: 0,
            body_truncated: false,
        };
        Ok(letter::message(
            letter,
            &record.body,
            self.max_message_bytes,
        )?)
    }

    /// Send the letter of `record`: `Ok` once SQS accepted it.
    pub async fn send(
        &self,
        record: &SourceRecord,
        reason: &Rejection,
    ) -> Result<(), SqsDeadLetterError> {
        let mut request = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(self.message(record, reason)?);
        if self.is_fifo() {
            let id = letter_id(&self.function, self.deployment.as_deref(), &record.position);
            request = request
                .message_group_id(fifo_group_id(&record.position))
                .message_deduplication_id(fifo_deduplication_id(&id));
        }
        let sent = request
            .send()
            .await
            .map_err(|source| SqsDeadLetterError::Send {
                queue_url: self.queue_url.clone(),
                message: describe(&source),
                source: Box::new(source),
            })?;
        tracing::debug!(record_id = %record.position.id, queue_url = %self.queue_url,
            message_id = sent.message_id().unwrap_or_default(), "dead letter queued");
        Ok(())
    }
}

impl DeadLetterSink for SqsDeadLetters {
    fn keep<'a>(
        &'a self,
        record: &'a SourceRecord,
        reason: &'a Rejection,
    ) -> BoxFuture<'a, Result<Disposal, RecordFailure>> {
        Box::pin(async move {
            self.send(record, reason)
                .await
                .map(|()| Disposal::Kept)
                .map_err(|err| RecordFailure::External(Box::new(err)))
        })
    }

    fn target(&self) -> &str {
        self.queue_url()
    }
}

/// A letter that could not be queued.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SqsDeadLetterError {
    /// The letter could not be written as JSON.
    #[error("the dead letter could not be encoded: {0}")]
    Encode(#[from] serde_json::Error),
    /// `SendMessage` failed (or its answer was lost).
    #[error("SendMessage to the dead-letter queue {queue_url} failed: {message}")]
    Send {
        /// The queue.
        queue_url: String,
        /// The error's code and message, bounded.
        message: String,
        /// The SDK's error.
        #[source]
        source: Box<SdkError<SendMessageError>>,
    },
}

/// The `MessageGroupId` of a record's letter on a FIFO queue: its SQS message group or
/// Kinesis partition key when that is a valid group id (1 to 128 ASCII letters, digits and
/// punctuation), else `sha256-<hex>` of it (so the letters of one key stay in one group), else
/// `dead-letters`.
pub(crate) fn fifo_group_id(position: &SourcePosition) -> String {
    let key = position
        .message_group_id
        .as_deref()
        .or(position.partition_key.as_deref());
    match key {
        Some(key) if is_fifo_token(key) => key.to_string(),
        Some(key) => format!("sha256-{}", hex::encode(Sha256::digest(key))),
        None => DEFAULT_GROUP_ID.to_string(),
    }
}

/// The `MessageDeduplicationId` of a letter: the SHA-256 (64 hex digits) of its
/// [`letter_id`], the same on every delivery of the record.
pub(crate) fn fifo_deduplication_id(letter_id: &str) -> String {
    hex::encode(Sha256::digest(letter_id))
}

/// Whether SQS takes `s` as a `MessageGroupId` or `MessageDeduplicationId`.
fn is_fifo_token(s: &str) -> bool {
    (1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic())
}

/// An SDK error as one bounded line: the service's code and message, or the cause.
fn describe(err: &SdkError<SendMessageError>) -> String {
    let text = match err.as_service_error() {
        Some(service) => format!(
            "{}: {}",
            service.code().unwrap_or("Unknown"),
            service.message().unwrap_or_default()
        ),
        None => DisplayErrorContext(err).to_string(),
    };
    bounded(&text, MAX_ERROR_CHARS)
}

#[cfg(test)]
mod tests;
