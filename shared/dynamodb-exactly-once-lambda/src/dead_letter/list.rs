//! Listing dead letters in source order, and the writes a replay or an export leaves on them.

use crate::dead_letter::format::{
    ATTR_EXPORTED_AT, ATTR_FUNCTION, ATTR_ID, ATTR_PART, ATTR_PART_OF, ATTR_PAYLOAD,
    ATTR_REPLAYED_AT,
};
use std::cmp::Ordering;
use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynamodb_exactly_once::__private::epoch_seconds;
use dynamodb_exactly_once::{Item, StoreError};

use super::{part_id, DeadLetter, DeadLetters};
use crate::source::{SourceKind, SourcePosition};

/// Scan filter: this function's dead letters and their payload parts (whose `PartOf` id starts
/// with `<function>|`).
const FILTER_FUNCTION: &str = "#f = :f OR begins_with(#p, :prefix)";
/// Only an existing letter is marked (a mark never creates an item).
const CONDITION_EXISTS: &str = "attribute_exists(#id)";

/// Which letters to list: all of the handle's function (and deployment, when the handle names
/// one), narrowed by source.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LetterFilter {
    /// Only letters of this source kind.
    pub kind: Option<SourceKind>,
    /// Only letters of this stream or queue ARN.
    pub source_arn: Option<String>,
}

impl LetterFilter {
    /// Every letter.
    pub fn all() -> Self {
        LetterFilter::default()
    }

    /// Only letters of `kind`.
    pub fn kind(mut self, kind: Option<SourceKind>) -> Self {
        self.kind = kind;
        self
    }

    /// Only letters of the stream or queue `arn`.
    pub fn source_arn(mut self, arn: Option<String>) -> Self {
        self.source_arn = arn;
        self
    }

    fn admits(&self, letter: &DeadLetter) -> bool {
        self.kind.is_none_or(|k| k == letter.position.kind)
            && self
                .source_arn
                .as_ref()
                .is_none_or(|arn| letter.position.source_arn.as_ref() == Some(arn))
    }
}

/// The letters of a listing, in source order, and the ones that cannot be read whole.
#[non_exhaustive]
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct Listing {
    /// Complete letters, in source order (`source_order`).
    pub letters: Vec<DeadLetter>,
    /// Letters some of whose payload parts are missing (a listing that raced a `keep`, or
    /// parts left behind): `(id, what is missing)`. They are not replayed or exported.
    pub incomplete: Vec<(String, String)>,
}

impl DeadLetters {
    /// This function's complete letters (of the handle's deployment, when it names one), in
    /// source order; see [`DeadLetters::listing`] for the incomplete ones.
    pub async fn list(&self) -> Result<Vec<DeadLetter>, StoreError> {
        Ok(self.listing(&LetterFilter::all()).await?.letters)
    }

    /// The letters `filter` admits, in source order, and apart from them the incomplete ones:
    /// one letter whose parts are missing never hides the others.
    pub async fn listing(&self, filter: &LetterFilter) -> Result<Listing, StoreError> {
        let mut listing = Listing::default();
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
            let mine = self.deployment.is_none() || letter.deployment == self.deployment;
            if mine && filter.admits(&letter) {
                letters.push(letter);
            }
        }
        for mut letter in letters {
            let rest = parts.remove(&letter.id).unwrap_or_default();
            match join_parts(&mut letter, rest) {
                Ok(()) => listing.letters.push(letter),
                Err(missing) => listing.incomplete.push((letter.id, missing)),
            }
        }
        listing.letters.sort_by(source_order);
        Ok(listing)
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

    /// Remove one dead letter and its payload parts (after a successful replay): the parts
    /// first, so that a letter that is listed is always whole.
    pub async fn remove(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        let ids = (1..letter.parts)
            .map(|n| part_id(&letter.id, n))
            .chain(std::iter::once(letter.id.clone()));
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

    /// Mark a letter whose record a replay applied (when removing it failed): the next replay
    /// removes it without applying it again.
    pub async fn mark_replayed(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        self.mark(letter, ATTR_REPLAYED_AT).await
    }

    /// Mark a letter as written out by an export.
    pub async fn mark_exported(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        self.mark(letter, ATTR_EXPORTED_AT).await
    }

    async fn mark(&self, letter: &DeadLetter, attribute: &str) -> Result<(), StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(ATTR_ID, AttributeValue::S(letter.id.clone()))
            .update_expression("SET #m = :now")
            .condition_expression(CONDITION_EXISTS)
            .expression_attribute_names("#m", attribute)
            .expression_attribute_names("#id", ATTR_ID)
            .expression_attribute_values(":now", AttributeValue::N(epoch_seconds().to_string()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // Removed meanwhile: nothing left to mark.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(StoreError::from_sdk("UpdateItem", e)),
        }
    }
}

/// Append a dead letter's continuation parts (in order) to its payload, or say what is missing.
fn join_parts(letter: &mut DeadLetter, mut rest: Vec<(usize, Vec<u8>)>) -> Result<(), String> {
    rest.sort_by_key(|(n, _)| *n);
    let numbered = rest.iter().enumerate().all(|(i, (n, _))| *n == i + 1);
    if rest.len() + 1 != letter.parts || !numbered {
        return Err(format!(
            "{} of {} payload parts",
            rest.len() + 1,
            letter.parts
        ));
    }
    for (_, chunk) in rest {
        letter.payload.extend(chunk);
    }
    Ok(())
}

/// The order records had in their source: by source (kind, ARN), then per shard by sequence
/// number compared as a number (KPL user records of one aggregate by sub-sequence number),
/// SQS FIFO messages by `SequenceNumber`, Kafka records per topic-partition by offset, and letters without a position order (standard SQS)
/// by when they were rejected. Ties by id.
pub(crate) fn source_order(a: &DeadLetter, b: &DeadLetter) -> Ordering {
    let (pa, pb) = (&a.position, &b.position);
    kind_rank(pa.kind)
        .cmp(&kind_rank(pb.kind))
        .then_with(|| pa.source_arn.cmp(&pb.source_arn))
        .then_with(|| pa.shard_id.cmp(&pb.shard_id))
        .then_with(|| match (sequence(pa), sequence(pb)) {
            (Some(x), Some(y)) => numeric(x)
                .cmp(&numeric(y))
                .then_with(|| sub(pa).cmp(&sub(pb))),
            _ => a.rejected_at.cmp(&b.rejected_at),
        })
        .then_with(|| a.id.cmp(&b.id))
}

fn kind_rank(kind: SourceKind) -> u8 {
    match kind {
        SourceKind::Kinesis => 0,
        SourceKind::DynamoDb => 1,
        SourceKind::Sqs => 2,
        SourceKind::Kafka => 3,
    }
}

/// The position's place in its source's order, when it has one.
fn sequence(p: &SourcePosition) -> Option<&str> {
    match p.kind {
        SourceKind::Kinesis | SourceKind::DynamoDb => Some(&p.id),
        SourceKind::Sqs => p.sqs_sequence_number.as_deref(),
        // `<topic>-<partition>:<offset>`, the shard being `<topic>-<partition>`.
        SourceKind::Kafka => p.id.rsplit_once(':').map(|(_, offset)| offset),
    }
}

/// A decimal string ordered as the number it spells (shorter is smaller; no leading zeros in
/// sequence numbers, but they are ignored if present).
fn numeric(s: &str) -> (usize, &str) {
    let digits = s.trim_start_matches('0');
    (digits.len(), digits)
}

fn sub(p: &SourcePosition) -> Option<u64> {
    p.sub_record.as_ref().map(|s| s.sub_sequence_number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SubRecord;
    use dynamodb_exactly_once::{Rejection, RejectionCode};

    fn letter(
        kind: SourceKind,
        seq: &str,
        sub_n: Option<u64>,
        sqs_seq: Option<&str>,
    ) -> DeadLetter {
        DeadLetter {
            id: format!("f|{seq}|{sub_n:?}"),
            function: "f".into(),
            deployment: None,
            reason: Rejection::new(RejectionCode::BadJson, "x"),
            position: SourcePosition {
                kind,
                source_arn: Some("arn".into()),
                id: seq.into(),
                shard_id: Some("s".into()),
                partition_key: None,
                message_group_id: None,
                sqs_sequence_number: sqs_seq.map(str::to_string),
                sub_record: sub_n.map(|n| SubRecord {
                    sub_sequence_number: n,
                    explicit_hash_key: None,
                }),
                event_id: None,
                arrived_at_ms: None,
                kafka: None,
            },
            rejected_at: 0,
            parts: 1,
            replayed_at: None,
            exported_at: None,
            payload: Vec::new(),
        }
    }

    #[test]
    fn sequence_numbers_and_sub_records_sort_as_numbers() {
        let mut letters = [
            letter(SourceKind::Kinesis, "10", None, None),
            letter(SourceKind::Kinesis, "9", Some(10), None),
            letter(SourceKind::Kinesis, "9", Some(2), None),
            letter(SourceKind::Kinesis, "100", None, None),
        ];
        letters.sort_by(source_order);
        let order: Vec<(String, Option<u64>)> = letters
            .iter()
            .map(|l| (l.position.id.clone(), sub(&l.position)))
            .collect();
        let expected = [("9", Some(2)), ("9", Some(10)), ("10", None), ("100", None)];
        let expected: Vec<(String, Option<u64>)> =
            expected.iter().map(|(s, n)| (s.to_string(), *n)).collect();
        assert_eq!(order, expected);
    }

    #[test]
    fn fifo_messages_sort_by_their_sequence_number_not_their_id() {
        let mut letters = [
            letter(
                SourceKind::Sqs,
                "a-random-id",
                None,
                Some("18850000000000000010"),
            ),
            letter(
                SourceKind::Sqs,
                "z-random-id",
                None,
                Some("18850000000000000002"),
            ),
        ];
        letters.sort_by(source_order);
        assert_eq!(letters[0].position.id, "z-random-id");
    }
}
