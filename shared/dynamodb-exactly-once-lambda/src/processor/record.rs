//! What a record handler receives ([`Record`]) and what it answers when it cannot finish a
//! record ([`RecordError`]).

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_runtime::Context;

use dynamodb_exactly_once::__private::bounded;
use dynamodb_exactly_once::{ErrorClass, Rejection, RejectionCode, StoreError};

use crate::source::{KafkaPosition, MessageAttribute, RecordMetadata, SourceKind, SourcePosition};

/// Longest reason kept from a handler's error (characters): logs stay bounded.
pub const MAX_REASON_CHARS: usize = 300;

/// One record for a handler: its body decoded into `T`, where it came from, its raw bytes,
/// what its source says about it ([`Record::metadata`]) and the invocation's Lambda context.
///
/// The body of an SQS message, of a Kinesis record (a KPL user record on its own), or a
/// DynamoDB stream record's JSON (`{"eventID":…,"dynamodb":{"Keys":…,"NewImage":…}}`; as
/// [`DynamoDbChange<T>`](super::DynamoDbChange) its images arrive typed).
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct Record<T> {
    /// The body: deserialized with serde from JSON ([`Processor::builder`](super::Processor::builder)),
    /// or the bytes, text or your decoder's value (`raw_builder`, `text_builder`,
    /// `decoder_builder`).
    pub body: T,
    /// Where the record came from: source, stream or queue ARN, id, shard, partition key,
    /// message group, arrival time.
    pub position: SourcePosition,
    /// The body as delivered (Kinesis data after base64 decoding).
    pub raw: Vec<u8>,
    /// When the processor abandons this record's handler (epoch ms), if the invocation has a
    /// deadline.
    deadline_ms: Option<u64>,
    /// The source's metadata of the record, when the processor read it from the event.
    metadata: Option<Arc<RecordMetadata>>,
    /// The invocation's Lambda context.
    context: Option<Arc<Context>>,
}

impl<T> Record<T> {
    /// A record (for a handler's unit tests; the processor builds them from the event).
    pub fn new(body: T, position: SourcePosition, raw: Vec<u8>) -> Self {
        Record {
            body,
            position,
            raw,
            deadline_ms: None,
            metadata: None,
            context: None,
        }
    }

    /// The same record with the source's `metadata` (the processor sets it from the event).
    pub fn with_metadata(mut self, metadata: Arc<RecordMetadata>) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// The same record with the invocation's Lambda `context` (the processor sets it).
    pub fn with_context(mut self, context: Arc<Context>) -> Self {
        self.context = Some(context);
        self
    }

    /// The invocation's Lambda context (request id, deadline, function ARN, trace id, client
    /// context, Cognito identity), when the record came through [`Processor::handle`]
    /// (`None` through `handle_batch`).
    ///
    /// [`Processor::handle`]: super::Processor::handle
    pub fn context(&self) -> Option<&Context> {
        self.context.as_deref()
    }

    /// What the source says about the record (SQS attributes and message attributes, the
    /// DynamoDB Streams event name, the Kinesis encryption type), when the record came through
    /// [`Processor::handle`](super::Processor::handle).
    pub fn metadata(&self) -> Option<&RecordMetadata> {
        self.metadata.as_deref()
    }

    /// SQS: a system attribute (`SenderId`, `ApproximateFirstReceiveTimestamp`, ...).
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.metadata()?.attributes.get(name).map(String::as_str)
    }

    /// SQS: a message attribute the producer set.
    pub fn message_attribute(&self, name: &str) -> Option<&MessageAttribute> {
        self.metadata()?.message_attributes.get(name)
    }

    /// SQS: how many times the message was received, this time included
    /// (`ApproximateReceiveCount`).
    pub fn receive_count(&self) -> Option<u32> {
        self.metadata()?.receive_count()
    }

    /// DynamoDB Streams: `INSERT`, `MODIFY` or `REMOVE`.
    pub fn event_name(&self) -> Option<&str> {
        self.metadata()?.event_name.as_deref()
    }

    /// The same record, its handler abandoned at `deadline_ms` (epoch ms; the processor sets
    /// it from the invocation's deadline).
    pub fn with_deadline_ms(mut self, deadline_ms: Option<u64>) -> Self {
        self.deadline_ms = deadline_ms;
        self
    }

    /// When the processor abandons this record's handler, epoch milliseconds: the
    /// invocation's deadline less the time kept to answer (`None`: no deadline). Then the
    /// handler's future is dropped; tasks it spawned (`tokio::spawn`) and requests it already
    /// sent are not stopped, and may still take effect later. The
    /// [idempotency layer](crate::idempotency) holds the record's key in progress until then.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.deadline_ms
    }

    /// The source's id of the record: the SQS message id, or the Kinesis / DynamoDB Streams
    /// sequence number (shared by the user records of one KPL aggregate).
    pub fn id(&self) -> &str {
        &self.position.id
    }

    /// The record's identity in its source, the same on every delivery of it and unique
    /// across sources, shards and KPL user records: an idempotency key for the handler's own
    /// effects (`<kind>|<arn>|<shard>|<id>[:<sub-sequence>]`, see
    /// [`SourcePosition::delivery_id`]).
    pub fn delivery_id(&self) -> String {
        self.position.delivery_id()
    }

    /// Which service delivered it.
    pub fn kind(&self) -> SourceKind {
        self.position.kind
    }

    /// The stream or queue ARN, when the event carries it.
    pub fn source_arn(&self) -> Option<&str> {
        self.position.source_arn.as_deref()
    }

    /// Kinesis: the shard.
    pub fn shard_id(&self) -> Option<&str> {
        self.position.shard_id.as_deref()
    }

    /// Kinesis: the partition key (a KPL user record's own).
    pub fn partition_key(&self) -> Option<&str> {
        self.position.partition_key.as_deref()
    }

    /// SQS FIFO: the message group.
    pub fn message_group_id(&self) -> Option<&str> {
        self.position.message_group_id.as_deref()
    }

    /// Kafka: the record's topic, partition, offset, timestamp and its type, key and headers.
    pub fn kafka(&self) -> Option<&KafkaPosition> {
        self.position.kafka.as_ref()
    }

    /// Kinesis: the user record's sub-sequence number in its KPL aggregate.
    pub fn sub_sequence_number(&self) -> Option<u64> {
        self.position
            .sub_record
            .as_ref()
            .map(|s| s.sub_sequence_number)
    }

    /// When the source received the record (Kinesis `approximateArrivalTimestamp`, SQS
    /// `SentTimestamp`, DynamoDB `ApproximateCreationDateTime`), if the event says.
    pub fn arrived_at(&self) -> Option<SystemTime> {
        self.position
            .arrived_at_ms
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
    }
}

/// Why a handler did not finish a record: delivered again, or kept as a dead letter.
///
/// Build it with [`RecordError::retry`], [`RecordError::transient`] or
/// [`RecordError::reject`]; a [`Rejection`] converts into `Reject`, a [`StoreError`] by its
/// class (`?` works on both).
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Transient: the record is reported in `batchItemFailures` and delivered again (in an
    /// ordered batch, the later records of its group, key or shard are held back).
    #[error("retry: {reason}")]
    Retry {
        /// Why, for logs (bounded to [`MAX_REASON_CHARS`]).
        reason: String,
        /// The error behind it, if any.
        #[source]
        source: Option<Box<dyn Error + Send + Sync>>,
    },
    /// The record can never succeed: it goes to the dead-letter sink (kept and acknowledged,
    /// or reported for the source's own dead-letter queue by
    /// [`ReportOnly`](crate::dead_letter::ReportOnly)).
    #[error("rejected: {0}")]
    Reject(Rejection),
    /// The record's work completed in an earlier delivery, whose result cannot be given here
    /// (the idempotency layer's [`IdempotencyError::Completed`]): acknowledged, nothing ran
    /// (the processor counts it `completed_earlier`).
    ///
    /// [`IdempotencyError::Completed`]: crate::idempotency::IdempotencyError::Completed
    #[error("completed earlier: {reason}")]
    Completed {
        /// Why, for logs (bounded to [`MAX_REASON_CHARS`]).
        reason: String,
    },
}

impl RecordError {
    /// Acknowledge the record: its work completed in an earlier delivery, for `reason`.
    pub fn completed(reason: impl Into<String>) -> Self {
        RecordError::Completed {
            reason: bounded(&reason.into(), MAX_REASON_CHARS),
        }
    }

    /// Deliver the record again, for `reason`.
    pub fn retry(reason: impl Into<String>) -> Self {
        RecordError::Retry {
            reason: bounded(&reason.into(), MAX_REASON_CHARS),
            source: None,
        }
    }

    /// Deliver the record again because of `err` (kept as the source).
    pub fn transient(err: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        let err = err.into();
        RecordError::Retry {
            reason: bounded(&err.to_string(), MAX_REASON_CHARS),
            source: Some(err),
        }
    }

    /// The record can never succeed (code `rejected_by_handler`); `reason` is kept with the
    /// dead letter (bounded). Describe what is wrong without repeating the payload.
    pub fn reject(reason: impl Into<String>) -> Self {
        RecordError::Reject(Rejection::new(RejectionCode::RejectedByHandler, reason))
    }

    /// Whether the record is delivered again.
    pub fn is_retry(&self) -> bool {
        matches!(self, RecordError::Retry { .. })
    }
}

impl From<Rejection> for RecordError {
    fn from(rejection: Rejection) -> Self {
        RecordError::Reject(rejection)
    }
}

/// A DynamoDB error by its class: an invalid request (`ValidationException`, an item too
/// large) can never succeed and is rejected (`rejected_by_dynamodb`); a transient error is
/// retried, and so is a fatal one (a missing table, a permission): not the record's fault, it
/// is delivered again while an operator fixes the configuration.
impl From<StoreError> for RecordError {
    fn from(err: StoreError) -> Self {
        match err.class() {
            ErrorClass::InvalidRequest => RecordError::Reject(Rejection::new(
                RejectionCode::RejectedByDynamodb,
                err.to_string(),
            )),
            _ => RecordError::transient(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_retry_unless_the_request_is_invalid() {
        let invalid = RecordError::from(StoreError::ReservedAttribute("pk".into()));
        let RecordError::Reject(rejection) = invalid else {
            panic!("an invalid request is rejected");
        };
        assert_eq!(rejection.code, "rejected_by_dynamodb");
        let contended = RecordError::from(StoreError::Contention {
            what: "item".into(),
            attempts: 3,
        });
        assert!(contended.is_retry());
        assert!(
            Error::source(&contended).is_some(),
            "the store error is kept"
        );
        let fatal = RecordError::from(StoreError::Inconsistent("x".into()));
        assert!(fatal.is_retry());
    }

    #[test]
    fn reasons_are_bounded_and_rejections_carry_the_handler_code() {
        let long = RecordError::retry("x".repeat(10_000));
        assert!(long.to_string().len() < 400, "{}", long.to_string().len());
        let RecordError::Reject(r) = RecordError::reject("amount must be positive") else {
            panic!("rejected");
        };
        assert_eq!(
            r.to_string(),
            "rejected_by_handler: amount must be positive"
        );
    }
}
