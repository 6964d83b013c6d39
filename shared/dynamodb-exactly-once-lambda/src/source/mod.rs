//! Event sources: one Lambda payload, a Kinesis, SQS, DynamoDB Streams or Kafka (Amazon MSK,
//! self-managed) batch, as a list of records with their position in the source, and the
//! matching partial batch response. DynamoDB stream records are item changes: see
//! `dynamodb`; Kafka records and their response: see [`kafka`].
//!
//! The shape is detected from the payload (`Records[*].eventSource`, or the presence of a
//! `kinesis` / `body` field; a Kafka batch by its top-level `eventSource` and its `records`
//! object), so one binary can be wired to every source.
//!
//! Partial batch responses: the `itemIdentifier` of a failed record is its Kinesis sequence
//! number or its SQS message id. For Kinesis, Lambda restarts the shard from the *lowest*
//! reported sequence number, so every record after it is delivered again: harmless for an
//! idempotent protocol; for one that is not ([`Protocol::redelivery`]) the pipeline stops a
//! batch at its first reported record, so that nothing after it was applied.
//!
//! [`Protocol::redelivery`]: dynamodb_exactly_once::Protocol::redelivery
//!
//! Kinesis records in the KPL aggregation format are expanded here into their user records
//! (`kpl.rs`); each keeps its parent's sequence number as its id (what Lambda checkpoints on)
//! and carries its sub-sequence number in [`SourcePosition::sub_record`].

pub(crate) mod dynamodb;
pub mod kafka;
pub mod value;

use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_lambda_events::streams::{DynamoDbEventResponse, KinesisEventResponse};
use serde::{Deserialize, Serialize};

pub(crate) mod kpl;
pub(crate) mod metadata;

pub use kafka::{KafkaHeader, KafkaPosition};
pub use kpl::SubRecord;
pub use metadata::{MessageAttribute, RecordMetadata};

/// Which service delivered a batch.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// A Kinesis data stream (`aws:kinesis`).
    Kinesis,
    /// An SQS queue (`aws:sqs`).
    Sqs,
    /// A DynamoDB stream (`aws:dynamodb`): bodies are item changes.
    #[serde(rename = "dynamodb")]
    DynamoDb,
    /// Apache Kafka: an Amazon MSK cluster (`aws:kafka`) or a self-managed one
    /// (`SelfManagedKafka`).
    Kafka,
}

impl SourceKind {
    /// Every kind.
    pub const ALL: [SourceKind; 4] = [
        SourceKind::Kinesis,
        SourceKind::Sqs,
        SourceKind::DynamoDb,
        SourceKind::Kafka,
    ];

    /// Its name in ids and settings, as serialized: `kinesis`, `sqs`, `dynamodb`, `kafka`.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Kinesis => "kinesis",
            SourceKind::Sqs => "sqs",
            SourceKind::DynamoDb => "dynamodb",
            SourceKind::Kafka => "kafka",
        }
    }
}

impl std::str::FromStr for SourceKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        SourceKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("{s:?}: kinesis, sqs, dynamodb or kafka"))
    }
}

/// Where a record came from: enough to find it again and to replay it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SourcePosition {
    /// The delivering service.
    pub kind: SourceKind,
    /// Stream or queue ARN, when the event carries it.
    pub source_arn: Option<String>,
    /// Kinesis or DynamoDB Streams sequence number, or SQS message id: the `itemIdentifier` of
    /// the record; Kafka: `<topic>-<partition>:<offset>` (its item identifier is the pair).
    pub id: String,
    /// Kinesis: the shard (from `eventID`), when present; Kafka: `<topic>-<partition>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard_id: Option<String>,
    /// Kinesis: the partition key (of the user record, for a KPL sub-record).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_key: Option<String>,
    /// SQS FIFO: the message group (`MessageGroupId`), the unit of ordering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_group_id: Option<String>,
    /// SQS FIFO: the message's `SequenceNumber` (its place in the queue, increasing within a
    /// group): replay restores a group's order by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqs_sequence_number: Option<String>,
    /// Kinesis: the user record's place in a KPL aggregate (`id` is the aggregate's sequence
    /// number). `None` for a record that was not aggregated, or an aggregate kept whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_record: Option<SubRecord>,
    /// DynamoDB Streams: the record's `eventID` (the aggregates' idempotency key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// When the source received the record, epoch ms (Kinesis `approximateArrivalTimestamp`,
    /// SQS `SentTimestamp`, DynamoDB `ApproximateCreationDateTime`): a record older than its protocol can handle safely is kept as a
    /// dead letter (`too_old`) instead of being applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrived_at_ms: Option<u64>,
    /// Kafka: topic, partition, offset, timestamp and its type, key, headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaPosition>,
}

impl SourcePosition {
    /// The record `id` (a sequence number or message id) of `kind`, nothing else known; the
    /// other fields are set as the source tells them.
    pub fn new(kind: SourceKind, id: impl Into<String>) -> Self {
        SourcePosition {
            kind,
            source_arn: None,
            id: id.into(),
            shard_id: None,
            partition_key: None,
            message_group_id: None,
            sqs_sequence_number: None,
            sub_record: None,
            event_id: None,
            arrived_at_ms: None,
            kafka: None,
        }
    }

    /// The record's identity in its source, the same on every delivery of it:
    /// `<kind>|<stream or queue ARN>|<shard>|<sequence number or message id>[:<sub-sequence>]`
    /// (a protocol that is not idempotent derives its op tokens from it).
    pub fn delivery_id(&self) -> String {
        let kind = self.kind.as_str();
        let arn = self.source_arn.as_deref().unwrap_or("-");
        let shard = self.shard_id.as_deref().unwrap_or("-");
        match &self.sub_record {
            Some(sub) => format!(
                "{kind}|{arn}|{shard}|{}:{}",
                self.id, sub.sub_sequence_number
            ),
            None => format!("{kind}|{arn}|{shard}|{}", self.id),
        }
    }
}

/// One record of a batch: its raw body and its position.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SourceRecord {
    /// Where the record came from.
    pub position: SourcePosition,
    /// The SQS body, the Kinesis data after base64 decoding, or a DynamoDB stream record's
    /// JSON.
    pub body: Vec<u8>,
}

impl SourceRecord {
    /// The record at `position` with `body`.
    pub fn new(position: SourcePosition, body: impl Into<Vec<u8>>) -> Self {
        SourceRecord {
            position,
            body: body.into(),
        }
    }
}

/// A decoded batch.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Batch {
    /// The delivering service.
    pub kind: SourceKind,
    /// The records, in delivery order.
    pub records: Vec<SourceRecord>,
}

impl Batch {
    /// A batch of `records` from `kind`.
    pub fn new(kind: SourceKind, records: Vec<SourceRecord>) -> Self {
        Batch { kind, records }
    }
}

/// The payload is not a Kinesis or SQS event at all.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// Neither shape matched.
    #[error("the event is neither a Kinesis nor an SQS batch: {0}")]
    UnknownShape(String),
    /// The shape was recognised but a record could not be decoded.
    #[error("malformed {kind:?} event: {message}")]
    Malformed {
        /// The recognised source.
        kind: SourceKind,
        /// The decoder's message.
        message: String,
    },
}

impl Batch {
    /// Detect the source and decode the records of a Lambda payload.
    pub fn from_event(event: serde_json::Value) -> Result<Batch, EventError> {
        let top_source = event.get("eventSource").and_then(|s| s.as_str());
        if top_source.is_some_and(kafka::is_kafka_source)
            || (event.get("Records").is_none()
                && event.get("records").is_some_and(|r| r.is_object()))
        {
            let records = kafka::records(&event)?;
            return Ok(Batch::new(SourceKind::Kafka, records));
        }
        let records = event
            .get("Records")
            .and_then(|r| r.as_array())
            .ok_or_else(|| EventError::UnknownShape("no `Records` array".into()))?;
        let Some(first) = records.first() else {
            // An empty batch: nothing to do, and either response shape is the same JSON.
            return Ok(Batch {
                kind: SourceKind::Sqs,
                records: Vec::new(),
            });
        };
        let kind = match first.get("eventSource").and_then(|s| s.as_str()) {
            Some("aws:kinesis") => SourceKind::Kinesis,
            Some("aws:sqs") => SourceKind::Sqs,
            Some(dynamodb::EVENT_SOURCE) => SourceKind::DynamoDb,
            _ if first.get("kinesis").is_some() => SourceKind::Kinesis,
            _ if first.get("dynamodb").is_some() => SourceKind::DynamoDb,
            _ if first.get("body").is_some() || first.get("messageId").is_some() => SourceKind::Sqs,
            other => {
                return Err(EventError::UnknownShape(format!("eventSource {other:?}")));
            }
        };
        let records = match kind {
            SourceKind::Kinesis => kinesis_records(event)?,
            SourceKind::Sqs => sqs_records(event)?,
            SourceKind::DynamoDb => dynamodb::records(event)?,
            SourceKind::Kafka => kafka::records(&event)?,
        };
        Ok(Batch { kind, records })
    }
}

fn malformed(kind: SourceKind) -> impl Fn(serde_json::Error) -> EventError {
    move |e| EventError::Malformed {
        kind,
        message: e.to_string(),
    }
}

fn kinesis_records(event: serde_json::Value) -> Result<Vec<SourceRecord>, EventError> {
    let kind = SourceKind::Kinesis;
    let event: KinesisEvent = serde_json::from_value(event).map_err(malformed(kind))?;
    Ok(event
        .records
        .into_iter()
        .map(|r| SourceRecord {
            position: SourcePosition {
                kind,
                source_arn: r.event_source_arn,
                id: r.kinesis.sequence_number,
                shard_id: r
                    .event_id
                    .as_deref()
                    .and_then(|id| id.split_once(':'))
                    .map(|(shard, _)| shard.to_string()),
                partition_key: Some(r.kinesis.partition_key),
                message_group_id: None,
                sqs_sequence_number: None,
                sub_record: None,
                event_id: None,
                kafka: None,
                arrived_at_ms: u64::try_from(
                    r.kinesis.approximate_arrival_timestamp.0.timestamp_millis(),
                )
                .ok()
                .filter(|ms| *ms > 0),
            },
            body: r.kinesis.data.0,
        })
        .flat_map(kpl::expand)
        .collect())
}

fn sqs_records(event: serde_json::Value) -> Result<Vec<SourceRecord>, EventError> {
    let kind = SourceKind::Sqs;
    let event: SqsEvent = serde_json::from_value(event).map_err(malformed(kind))?;
    event
        .records
        .into_iter()
        .map(|m| {
            let id = m.message_id.ok_or_else(|| EventError::Malformed {
                kind,
                message: "an SQS message has no messageId".into(),
            })?;
            Ok(SourceRecord {
                position: SourcePosition {
                    kind,
                    source_arn: m.event_source_arn,
                    id,
                    shard_id: None,
                    partition_key: None,
                    message_group_id: m.attributes.get("MessageGroupId").cloned(),
                    sqs_sequence_number: m.attributes.get("SequenceNumber").cloned(),
                    sub_record: None,
                    event_id: None,
                    kafka: None,
                    arrived_at_ms: m
                        .attributes
                        .get("SentTimestamp")
                        .and_then(|t| t.parse().ok()),
                },
                body: m.body.unwrap_or_default().into_bytes(),
            })
        })
        .collect()
}

/// The partial batch response matching the source of the batch.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
#[must_use = "the partial batch response must be answered to Lambda"]
pub enum BatchResponse {
    /// Response to a Kinesis batch.
    Kinesis(KinesisEventResponse),
    /// Response to an SQS batch.
    Sqs(SqsBatchResponse),
    /// Response to a DynamoDB Streams batch (failures by sequence number).
    DynamoDb(DynamoDbEventResponse),
    /// Response to a Kafka batch (failures by partition and offset).
    Kafka(kafka::KafkaEventResponse),
}

impl BatchResponse {
    /// A response reporting the given records (by `itemIdentifier`) as failed.
    pub fn new<I, S>(kind: SourceKind, failed_ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        match kind {
            SourceKind::Kinesis => {
                let mut r = KinesisEventResponse::default();
                for id in failed_ids {
                    r.add_failure(id);
                }
                BatchResponse::Kinesis(r)
            }
            SourceKind::Sqs => {
                let mut r = SqsBatchResponse::default();
                for id in failed_ids {
                    r.add_failure(id);
                }
                BatchResponse::Sqs(r)
            }
            SourceKind::DynamoDb => BatchResponse::DynamoDb(dynamodb::response(failed_ids)),
            SourceKind::Kafka => {
                BatchResponse::Kafka(kafka::KafkaEventResponse::from_ids(failed_ids))
            }
        }
    }

    /// The identifiers reported as failed (Kafka: `<topic>-<partition>:<offset>`).
    pub fn failed_ids(&self) -> Vec<String> {
        match self {
            BatchResponse::Kinesis(r) => r
                .batch_item_failures
                .iter()
                .filter_map(|f| f.item_identifier.clone())
                .collect(),
            BatchResponse::Sqs(r) => r
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.clone())
                .collect(),
            BatchResponse::DynamoDb(r) => r
                .batch_item_failures
                .iter()
                .filter_map(|f| f.item_identifier.clone())
                .collect(),
            BatchResponse::Kafka(r) => r.ids(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_kinesis_and_decodes_base64() {
        let event = serde_json::json!({"Records":[{"eventSource":"aws:kinesis","eventID":"shardId-000:49","eventSourceARN":"arn:aws:kinesis:us-east-1:1:stream/s","kinesis":{"data":"aGVsbG8=","partitionKey":"p","sequenceNumber":"49","approximateArrivalTimestamp":1.0,"kinesisSchemaVersion":"1.0"}}]});
        let batch = Batch::from_event(event).expect("kinesis event");
        assert_eq!(batch.kind, SourceKind::Kinesis);
        assert_eq!(batch.records[0].body, b"hello");
        assert_eq!(batch.records[0].position.id, "49");
        assert_eq!(
            batch.records[0].position.shard_id.as_deref(),
            Some("shardId-000")
        );
        assert_eq!(batch.records[0].position.arrived_at_ms, Some(1000));
    }

    #[test]
    fn detects_sqs_and_answers_in_its_shape() {
        let event = serde_json::json!({"Records":[{"eventSource":"aws:sqs","messageId":"m1","body":"{}","attributes":{"SentTimestamp":"1545082649183"}}]});
        let batch = Batch::from_event(event).expect("sqs event");
        assert_eq!(batch.kind, SourceKind::Sqs);
        assert_eq!(batch.records[0].position.arrived_at_ms, Some(1545082649183));
        let response = serde_json::to_value(BatchResponse::new(batch.kind, ["m1"])).expect("json");
        assert_eq!(
            response,
            serde_json::json!({"batchItemFailures":[{"itemIdentifier":"m1"}]})
        );
    }

    #[test]
    fn fifo_batches_carry_their_message_groups() {
        let event = serde_json::json!({"Records":[
            {"eventSource":"aws:sqs","messageId":"m1","body":"{}","eventSourceARN":"arn:aws:sqs:us-east-1:1:q.fifo","attributes":{"MessageGroupId":"g1"}},
            {"eventSource":"aws:sqs","messageId":"m2","body":"{}","eventSourceARN":"arn:aws:sqs:us-east-1:1:q.fifo","attributes":{"MessageGroupId":"g2"}}]});
        let batch = Batch::from_event(event).expect("sqs event");
        let groups: Vec<_> = batch
            .records
            .iter()
            .map(|r| r.position.message_group_id.as_deref())
            .collect();
        assert_eq!(groups, [Some("g1"), Some("g2")]);
        assert!(crate::pipeline::is_fifo(&batch));
        let standard = serde_json::json!({"Records":[{"eventSource":"aws:sqs","messageId":"m1","body":"{}","eventSourceARN":"arn:aws:sqs:us-east-1:1:q"}]});
        let standard = Batch::from_event(standard).expect("sqs event");
        assert!(!crate::pipeline::is_fifo(&standard));
    }

    #[test]
    fn rejects_unknown_shapes() {
        assert!(Batch::from_event(serde_json::json!({"detail":{}})).is_err());
    }
}
