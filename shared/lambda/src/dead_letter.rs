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

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use serde::{Deserialize, Serialize};

use dynamodb_exactly_once::ddb::clock::epoch_seconds;
use dynamodb_exactly_once::ddb::error::bounded;
use dynamodb_exactly_once::{Item, Rejection, StoreError};

use crate::source::{SourceKind, SourcePosition, SourceRecord};

/// Partition key of the dead-letter table.
pub const ATTR_ID: &str = "Id";
/// The raw payload (or its first part), as a binary attribute.
pub const ATTR_PAYLOAD: &str = "Payload";
/// On a continuation item: the id of the dead letter it belongs to.
pub const ATTR_PART_OF: &str = "PartOf";
/// On a continuation item: its position (1-based) in the payload.
pub const ATTR_PART: &str = "Part";
/// Attribute naming the function that kept a dead letter.
pub const ATTR_FUNCTION: &str = "Function";
/// Scan filter: this function's dead letters and their payload parts (whose `PartOf` id starts
/// with `<function>|`).
const FILTER_FUNCTION: &str = "#f = :f OR begins_with(#p, :prefix)";
/// Payload bytes per item: larger payloads (Kinesis records reach 1 MB) continue in items
/// `<id>#<n>`, written before the main item so that a listed dead letter is always complete.
pub const PAYLOAD_CHUNK_BYTES: usize = 300 * 1024;

/// Longest reason message stored with a dead letter: with the payload part and the source
/// position it keeps every dead-letter item under DynamoDB's 400 KB (see the unit test).
pub const MAX_REASON_CHARS: usize = 1024;

/// A dead letter's id: the function, the source kind, the stream or queue, the shard and the
/// record's id there (sequence numbers are unique per shard only; message ids per queue):
/// `<function>|kinesis|<stream arn>|<shard>|<sequence number>` or
/// `<function>|sqs|<queue arn>|<message id>` or
/// `<function>|dynamodb|<stream arn>|<sequence number>` (unique per stream) (`-` for what the
/// event did not carry). A user
/// record of a KPL aggregate shares its aggregate's sequence number and adds its
/// sub-sequence number: `…|<sequence number>:<sub-sequence number>` (an aggregate kept whole
/// has none, so the two never collide).
///
/// The id (and so every payload part's `<id>#<n>`) **starts with `<function>|`**: the template
/// scopes each function's `PutItem` on the dead-letter table to its own keys with the IAM
/// condition `dynamodb:LeadingKeys` = `<function>|*`. Keep that prefix.
pub fn letter_id(function: &str, position: &SourcePosition) -> String {
    let arn = position.source_arn.as_deref().unwrap_or("-");
    match position.kind {
        SourceKind::Kinesis => {
            let shard = position.shard_id.as_deref().unwrap_or("-");
            let id = &position.id;
            match &position.sub_record {
                Some(sub) => format!(
                    "{function}|kinesis|{arn}|{shard}|{id}:{}",
                    sub.sub_sequence_number
                ),
                None => format!("{function}|kinesis|{arn}|{shard}|{id}"),
            }
        }
        SourceKind::Sqs => format!("{function}|sqs|{arn}|{}", position.id),
        SourceKind::DynamoDb => format!("{function}|dynamodb|{arn}|{}", position.id),
    }
}

/// The id of a dead letter's continuation item `n` (1-based): `<id>#<n>`.
pub fn part_id(id: &str, n: usize) -> String {
    format!("{id}#{n}")
}

/// One kept record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DeadLetter {
    /// See [`letter_id`].
    pub id: String,
    /// The function that rejected the record.
    pub function: String,
    /// Why.
    pub reason: Rejection,
    /// Where the record came from.
    pub position: SourcePosition,
    /// When it was (last) rejected, epoch seconds.
    pub rejected_at: u64,
    /// How many items hold the payload (1 unless it is larger than [`PAYLOAD_CHUNK_BYTES`]).
    #[serde(default = "one")]
    pub parts: usize,
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

/// Writes, lists and removes dead letters of one function.
#[derive(Debug, Clone)]
pub struct DeadLetters {
    client: Client,
    table: String,
    function: String,
}

impl DeadLetters {
    /// Dead letters of `function` in `table`.
    pub fn new(client: Client, table: impl Into<String>, function: impl Into<String>) -> Self {
        DeadLetters {
            client,
            table: table.into(),
            function: function.into(),
        }
    }

    /// The dead-letter table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Keep a rejected record.
    pub async fn keep(&self, record: &SourceRecord, reason: &Rejection) -> Result<(), StoreError> {
        let letter = DeadLetter {
            id: letter_id(&self.function, &record.position),
            function: self.function.clone(),
            reason: Rejection::new(reason.code, bounded(&reason.message, MAX_REASON_CHARS)),
            position: record.position.clone(),
            rejected_at: epoch_seconds(),
            parts: record.body.len().div_ceil(PAYLOAD_CHUNK_BYTES).max(1),
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

    /// Every dead letter of this function (a paginated Scan: the table only holds failures).
    pub async fn list(&self) -> Result<Vec<DeadLetter>, StoreError> {
        let mut letters = Vec::new();
        let mut parts: HashMap<String, Vec<(usize, Vec<u8>)>> = HashMap::new();
        for mut item in self.scan_all().await? {
            let payload = match item.remove(ATTR_PAYLOAD) {
                Some(AttributeValue::B(b)) => b.into_inner(),
                _ => Vec::new(),
            };
            if let Some(AttributeValue::S(owner)) = item.get(ATTR_PART_OF) {
                let part = item.get(ATTR_PART).and_then(|p| p.as_n().ok());
                let part = part.and_then(|n| n.parse().ok()).unwrap_or(0);
                parts
                    .entry(owner.clone())
                    .or_default()
                    .push((part, payload));
                continue;
            }
            let mut letter: DeadLetter = serde_dynamo::from_item(item)?;
            letter.payload = payload;
            letters.push(letter);
        }
        for letter in &mut letters {
            join_parts(letter, parts.remove(&letter.id).unwrap_or_default())?;
        }
        letters.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(letters)
    }

    /// This function's dead letters and payload parts (a paginated scan).
    async fn scan_all(&self) -> Result<Vec<Item>, StoreError> {
        self.client
            .scan()
            .table_name(&self.table)
            .filter_expression(FILTER_FUNCTION)
            .expression_attribute_names("#f", ATTR_FUNCTION)
            .expression_attribute_names("#p", ATTR_PART_OF)
            .expression_attribute_values(":f", AttributeValue::S(self.function.clone()))
            .expression_attribute_values(
                ":prefix",
                AttributeValue::S(format!("{}|", self.function)),
            )
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| StoreError::from_sdk("Scan", e))
    }

    /// Remove one dead letter and its payload parts (after a successful replay).
    pub async fn remove(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        let ids = std::iter::once(letter.id.clone())
            .chain((1..letter.parts).map(|n| part_id(&letter.id, n)));
        for id in ids {
            self.client
                .delete_item()
                .table_name(&self.table)
                .key(ATTR_ID, AttributeValue::S(id))
                .send()
                .await
                .map_err(|e| StoreError::from_sdk("DeleteItem", e))?;
        }
        Ok(())
    }
}

/// Append a dead letter's continuation parts (in order) to its payload.
fn join_parts(letter: &mut DeadLetter, mut rest: Vec<(usize, Vec<u8>)>) -> Result<(), StoreError> {
    rest.sort_by_key(|(n, _)| *n);
    if rest.len() + 1 != letter.parts {
        return Err(StoreError::Inconsistent(format!(
            "dead letter {} has {} of {} payload parts",
            letter.id,
            rest.len() + 1,
            letter.parts
        )));
    }
    for (_, chunk) in rest {
        letter.payload.extend(chunk);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynamodb_exactly_once::ddb::item::{item_size, MAX_ITEM_BYTES};
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
            sub_record: Some(crate::source::SubRecord {
                sub_sequence_number: u64::MAX,
                explicit_hash_key: Some("9".repeat(39)),
            }),
            event_id: None,
            arrived_at_ms: None,
        };
        let letter = DeadLetter {
            id: letter_id(&"f".repeat(64), &position),
            function: "f".repeat(64),
            reason: Rejection::new(RejectionCode::InvalidItem, "é".repeat(MAX_REASON_CHARS)),
            position,
            rejected_at: u64::MAX,
            parts: 4,
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
            sub_record: None,
            event_id: None,
            arrived_at_ms: None,
        };
        assert_eq!(letter_id("f", &kinesis), "f|kinesis|arn:s|shardId-1|49");
        let sub = |n| SourcePosition {
            sub_record: Some(crate::source::SubRecord {
                sub_sequence_number: n,
                explicit_hash_key: None,
            }),
            event_id: None,
            ..kinesis.clone()
        };
        assert_eq!(letter_id("f", &sub(0)), "f|kinesis|arn:s|shardId-1|49:0");
        assert_ne!(letter_id("f", &sub(1)), letter_id("f", &sub(0)));
        let sqs = SourcePosition {
            kind: SourceKind::Sqs,
            source_arn: None,
            id: "m1".into(),
            shard_id: None,
            partition_key: None,
            message_group_id: None,
            sub_record: None,
            event_id: None,
            arrived_at_ms: None,
        };
        assert_eq!(letter_id("f", &sqs), "f|sqs|-|m1");
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
            sub_record: None,
            event_id: None,
            arrived_at_ms: None,
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
                let id = letter_id(function, position);
                let part = part_id(&id, 2);
                for key in [&id, &part] {
                    assert!(key.starts_with(&format!("{function}|")), "{key}");
                }
            }
            assert!(letter_id(function, &stream).starts_with(&format!("{function}|dynamodb|")));
        }
    }
}
