//! Dead letters: malformed records are kept, never dropped and never retried forever.
//!
//! A record that can never succeed (bad JSON, unknown op, an item over 400 KB, a key DynamoDB
//! rejects) is written to a dead-letter **table** with its raw payload, the reason (a stable
//! code and a message) and its source position (stream/queue ARN, shard, sequence number or
//! message id), and is then reported to Lambda as *successful*, so the shard moves on.
//!
//! Why a table and not a queue: the same mechanism serves Kinesis and SQS sources, entries can
//! be listed, inspected and replayed selectively (`ops dead-letters list|export|replay|delete`),
//! and a redelivered malformed record overwrites its own entry (the id is derived from the
//! source position) instead of piling up copies.
//!
//! Failure mode: if the dead-letter write itself fails, the record is reported in
//! `batchItemFailures` and Lambda delivers it again: it is never acknowledged before it is kept.
//!
//! Each letter names the **deployment** that kept it (the Lambda function's name, or the
//! `<PREFIX>_DEPLOYMENT` setting), so two deployments of one binary (a main writer and a
//! replica) keep, list and replay only their own letters.
//!
//! # Layout
//!
//! * this file: the letter, its id, `keep`;
//! * `sink`: the [`DeadLetterSink`] trait the pipeline keeps rejected records through, with
//!   this table ([`DeadLetters`]) and [`ReportOnly`] (leave them to the source's own
//!   dead-letter queue) as implementations;
//! * `sqs` (feature `sqs`): `SqsDeadLetters`, a sink that sends each letter to an SQS queue as
//!   JSON (`SqsLetter`: the fields of this table's letters, the body cut to the message size);
//! * `retired`: the TX records the sweeper retires on a refused key, kept as the
//!   coordinator's letters (`KeepRetired` for [`DeadLetters`]);
//! * `list`: listing in source order (Kinesis and DynamoDB sequence numbers numerically, KPL
//!   sub-records by sub-sequence number, SQS FIFO by `SequenceNumber`), filters, incomplete
//!   letters reported apart, removal and the marks a replay or an export leaves.

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use serde::{Deserialize, Serialize};

use dynamodb_exactly_once::__private::bounded;
use dynamodb_exactly_once::__private::epoch_seconds;
use dynamodb_exactly_once::{Item, Rejection, StoreError};

use crate::source::{SourceKind, SourcePosition, SourceRecord};

mod format;
mod list;
mod retired;
mod sink;
#[cfg(feature = "sqs")]
mod sqs;

use format::{ATTR_ID, ATTR_PART, ATTR_PART_OF, ATTR_PAYLOAD};
pub use list::{LetterFilter, Listing};
pub use sink::{DeadLetterSink, Disposal, ReportOnly};
#[cfg(feature = "sqs")]
pub use sqs::{SqsDeadLetterError, SqsDeadLetters, SqsLetter};

/// Payload bytes per item: larger payloads (Kinesis records reach 1 MB) continue in items
/// `<id>#<n>`, written before the main item so that a listed dead letter is always complete.
pub(crate) const PAYLOAD_CHUNK_BYTES: usize = 300 * 1024;

/// Longest reason message stored with a dead letter: with the payload part and the source
/// position it keeps every dead-letter item under DynamoDB's 400 KB (see the unit test).
pub(crate) const MAX_REASON_CHARS: usize = 1024;

/// A dead letter's id: the function, the source kind, the deployment (when known), the stream
/// or queue, the shard and the record's id there (sequence numbers are unique per shard only;
/// message ids per queue):
/// `<function>|kinesis|<deployment>|<stream arn>|<shard>|<sequence number>` or
/// `<function>|sqs|<deployment>|<queue arn>|<message id>` or
/// `<function>|dynamodb|<deployment>|<stream arn>|<sequence number>` (unique per stream) or
/// `<function>|kafka|<deployment>|<cluster arn>|<topic>-<partition>:<offset>` (`-`
/// for what the event did not carry; without a deployment ([`DeadLetters::new`] alone), its
/// segment is absent). A user
/// record of a KPL aggregate shares its aggregate's sequence number and adds its
/// sub-sequence number: `…|<sequence number>:<sub-sequence number>` (an aggregate kept whole
/// has none, so the two never collide).
///
/// The id (and so every payload part's `<id>#<n>`) **starts with `<function>|<kind>|`**: the
/// template scopes each function's `PutItem` on the dead-letter table to its own keys with the
/// IAM condition `dynamodb:LeadingKeys` = `<function>|*` (`<function>|dynamodb|*` for the
/// DynamoDB Streams wirings). Keep that prefix.
#[doc(hidden)]
pub fn letter_id(function: &str, deployment: Option<&str>, position: &SourcePosition) -> String {
    let arn = position.source_arn.as_deref().unwrap_or("-");
    let kind = position.kind.as_str();
    let kind = match deployment {
        Some(deployment) => format!("{kind}|{deployment}"),
        None => kind.to_string(),
    };
    match position.kind {
        SourceKind::Kinesis => {
            let shard = position.shard_id.as_deref().unwrap_or("-");
            let id = &position.id;
            match &position.sub_record {
                Some(sub) => format!(
                    "{function}|{kind}|{arn}|{shard}|{id}:{}",
                    sub.sub_sequence_number
                ),
                None => format!("{function}|{kind}|{arn}|{shard}|{id}"),
            }
        }
        SourceKind::Sqs | SourceKind::DynamoDb | SourceKind::Kafka => {
            format!("{function}|{kind}|{arn}|{}", position.id)
        }
    }
}

/// The id of a dead letter's continuation item `n` (1-based): `<id>#<n>`.
#[doc(hidden)]
pub fn part_id(id: &str, n: usize) -> String {
    format!("{id}#{n}")
}

/// One kept record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct DeadLetter {
    /// See [`letter_id`].
    pub id: String,
    /// The function that rejected the record.
    pub function: String,
    /// The deployment (Lambda function name) that rejected it; `None` when the sink was not
    /// given one ([`DeadLetters::for_deployment`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// Why.
    pub reason: Rejection,
    /// Where the record came from.
    pub position: SourcePosition,
    /// When it was (last) rejected, epoch seconds.
    pub rejected_at: u64,
    /// How many items hold the payload (1 unless it is larger than `PAYLOAD_CHUNK_BYTES`).
    #[serde(default = "one")]
    pub parts: usize,
    /// When a replay applied the record but could not remove the letter (epoch s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_at: Option<u64>,
    /// When `ops dead-letters export` wrote the letter out (epoch s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exported_at: Option<u64>,
    /// The raw payload (not serialized through serde: stored as binary attributes).
    #[serde(skip)]
    pub payload: Vec<u8>,
}

fn one() -> usize {
    1
}

impl DeadLetter {
    /// The payload as text, when it is UTF-8.
    pub fn payload_text(&self) -> Option<&str> {
        std::str::from_utf8(&self.payload).ok()
    }
}

/// Writes, lists and removes dead letters of one function (of one deployment, when named).
#[derive(Debug, Clone)]
pub struct DeadLetters {
    client: Client,
    table: String,
    function: String,
    deployment: Option<String>,
}

impl DeadLetters {
    /// Dead letters of `function` in `table`, of any deployment.
    pub fn new(client: Client, table: impl Into<String>, function: impl Into<String>) -> Self {
        DeadLetters {
            client,
            table: table.into(),
            function: function.into(),
            deployment: None,
        }
    }

    /// The same, keeping letters as `deployment` (the Lambda function's name) and listing
    /// only that deployment's letters.
    pub fn for_deployment(mut self, deployment: Option<String>) -> Self {
        self.deployment = deployment.filter(|d| !d.is_empty());
        self
    }

    /// The deployment whose letters these are, if named.
    pub fn deployment(&self) -> Option<&str> {
        self.deployment.as_deref()
    }

    /// The dead-letter table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Keep a rejected record.
    pub async fn keep(&self, record: &SourceRecord, reason: &Rejection) -> Result<(), StoreError> {
        let letter = DeadLetter {
            id: letter_id(&self.function, self.deployment(), &record.position),
            function: self.function.clone(),
            deployment: self.deployment.clone(),
            reason: Rejection::new(reason.code, bounded(&reason.message, MAX_REASON_CHARS)),
            position: record.position.clone(),
            rejected_at: epoch_seconds(),
            parts: record.body.len().div_ceil(PAYLOAD_CHUNK_BYTES).max(1),
            replayed_at: None,
            exported_at: None,
            payload: Vec::new(),
        };
        let mut chunks = record.body.chunks(PAYLOAD_CHUNK_BYTES);
        let first = chunks.next().unwrap_or_default();
        for (n, chunk) in chunks.enumerate() {
            let part = n + 1;
            let item = Item::from([
                (
                    ATTR_ID.to_string(),
                    AttributeValue::S(part_id(&letter.id, part)),
                ),
                (
                    ATTR_PART_OF.to_string(),
                    AttributeValue::S(letter.id.clone()),
                ),
                (ATTR_PART.to_string(), AttributeValue::N(part.to_string())),
                (
                    ATTR_PAYLOAD.to_string(),
                    AttributeValue::B(Blob::new(chunk)),
                ),
            ]);
            self.put(item).await?;
        }
        let mut item: Item = serde_dynamo::to_item(&letter)?;
        item.insert(
            ATTR_PAYLOAD.to_string(),
            AttributeValue::B(Blob::new(first)),
        );
        self.put(item).await
    }

    async fn put(&self, item: Item) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("PutItem", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynamodb_exactly_once::__private::{item_size, MAX_ITEM_BYTES};
    use dynamodb_exactly_once::RejectionCode;

    #[test]
    fn the_largest_dead_letter_item_fits_in_dynamodb() {
        // The longest values the sources produce: ARNs ≤ 2 KB, partition keys ≤ 256 bytes,
        // sequence numbers 56 digits, shard ids ~20; the reason at its bound.
        let position = SourcePosition {
            kind: SourceKind::Kinesis,
            source_arn: Some("a".repeat(2048)),
            id: "9".repeat(128),
            shard_id: Some("s".repeat(128)),
            partition_key: Some("p".repeat(256)),
            message_group_id: Some("g".repeat(128)),
            sqs_sequence_number: Some("9".repeat(20)),
            sub_record: Some(crate::source::SubRecord {
                sub_sequence_number: u64::MAX,
                explicit_hash_key: Some("9".repeat(39)),
            }),
            event_id: None,
            arrived_at_ms: None,
            kafka: None,
        };
        let letter = DeadLetter {
            id: letter_id(&"f".repeat(64), Some(&"d".repeat(64)), &position),
            function: "f".repeat(64),
            deployment: Some("d".repeat(64)),
            reason: Rejection::new(RejectionCode::InvalidItem, "é".repeat(MAX_REASON_CHARS)),
            position,
            rejected_at: u64::MAX,
            parts: 4,
            replayed_at: Some(u64::MAX),
            exported_at: Some(u64::MAX),
            payload: Vec::new(),
        };
        let mut item: Item = serde_dynamo::to_item(&letter).expect("marshals");
        item.insert(
            ATTR_PAYLOAD.to_string(),
            AttributeValue::B(Blob::new(vec![0u8; PAYLOAD_CHUNK_BYTES])),
        );
        assert!(item_size(&item) < MAX_ITEM_BYTES, "{}", item_size(&item));
    }

    #[test]
    fn ids_name_the_stream_and_shard_or_the_queue() {
        let kinesis = SourcePosition {
            kind: SourceKind::Kinesis,
            source_arn: Some("arn:s".into()),
            id: "49".into(),
            shard_id: Some("shardId-1".into()),
            partition_key: None,
            message_group_id: None,
            sqs_sequence_number: None,
            sub_record: None,
            event_id: None,
            arrived_at_ms: None,
            kafka: None,
        };
        assert_eq!(
            letter_id("f", None, &kinesis),
            "f|kinesis|arn:s|shardId-1|49"
        );
        let sub = |n| SourcePosition {
            sub_record: Some(crate::source::SubRecord {
                sub_sequence_number: n,
                explicit_hash_key: None,
            }),
            event_id: None,
            ..kinesis.clone()
        };
        assert_eq!(
            letter_id("f", None, &sub(0)),
            "f|kinesis|arn:s|shardId-1|49:0"
        );
        assert_ne!(letter_id("f", None, &sub(1)), letter_id("f", None, &sub(0)));
        let sqs = SourcePosition {
            kind: SourceKind::Sqs,
            source_arn: None,
            id: "m1".into(),
            shard_id: None,
            partition_key: None,
            message_group_id: None,
            sqs_sequence_number: None,
            sub_record: None,
            event_id: None,
            arrived_at_ms: None,
            kafka: None,
        };
        assert_eq!(letter_id("f", None, &sqs), "f|sqs|-|m1");
        assert_eq!(letter_id("f", Some("d"), &sqs), "f|sqs|d|-|m1");
    }

    #[test]
    fn every_key_written_starts_with_the_function_for_iam_leading_keys() {
        // template.yaml: dynamodb:LeadingKeys "<function>|*" (and "<function>|dynamodb|*" for
        // the DynamoDB Streams wirings) on the dead-letter table.
        let sqs = SourcePosition {
            kind: SourceKind::Sqs,
            source_arn: Some("arn:aws:sqs:eu-west-1:1:q".into()),
            id: "m1".into(),
            shard_id: None,
            partition_key: None,
            message_group_id: None,
            sqs_sequence_number: None,
            sub_record: None,
            event_id: None,
            arrived_at_ms: None,
            kafka: None,
        };
        let kinesis = SourcePosition {
            kind: SourceKind::Kinesis,
            shard_id: Some("shardId-1".into()),
            ..sqs.clone()
        };
        let stream = SourcePosition {
            kind: SourceKind::DynamoDb,
            ..sqs.clone()
        };
        for function in [
            "ratchet-writer",
            "counter-writer",
            "tx-coordinator",
            "document-writer",
        ] {
            for position in [&sqs, &kinesis, &stream] {
                let id = letter_id(function, Some("Stack-Fn-1A2B"), position);
                let part = part_id(&id, 2);
                for key in [&id, &part] {
                    assert!(key.starts_with(&format!("{function}|")), "{key}");
                }
            }
            for deployment in [None, Some("Stack-Fn-1A2B")] {
                let id = letter_id(function, deployment, &stream);
                assert!(id.starts_with(&format!("{function}|dynamodb|")), "{id}");
            }
        }
    }
}
