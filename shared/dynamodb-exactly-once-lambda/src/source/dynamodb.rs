//! DynamoDB Streams (`eventSource = "aws:dynamodb"`): each stream record is one
//! [`SourceRecord`] whose body is the record's JSON as delivered, and an [`ItemChange`] for the
//! protocol ([`decode_change`]).
//!
//! Position: the stream ARN (`eventSourceARN`), the `SequenceNumber` as the record's id (the
//! `itemIdentifier` of the partial batch response, as for Kinesis: Lambda restarts the shard
//! after the lowest reported one), the arrival time from `ApproximateCreationDateTime`. The
//! event id stays in the body (it is the aggregates' idempotency key), so a dead letter keeps
//! it with the rest of the record.
//!
//! Decoding is split so that one bad record never fails the batch: the position is read from
//! a few fields (`records`), the change itself only when the record is parsed, where a
//! malformed record becomes an `invalid_change` rejection and a dead letter.

use aws_lambda_events::dynamodb::EventRecord;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use dynamodb_exactly_once::__private::bounded;
use dynamodb_exactly_once::{ChangeKind, Item, ItemChange, Rejection, RejectionCode};
use serde_json::Value;

use super::{EventError, SourceKind, SourcePosition, SourceRecord};

/// The `eventSource` of DynamoDB stream records.
pub(crate) const EVENT_SOURCE: &str = "aws:dynamodb";

/// The records of a DynamoDB stream event, bodies kept as delivered.
pub(super) fn records(event: Value) -> Result<Vec<SourceRecord>, EventError> {
    let kind = SourceKind::DynamoDb;
    let Some(Value::Array(records)) = event.get("Records").cloned() else {
        return Err(EventError::UnknownShape("no `Records` array".into()));
    };
    records
        .into_iter()
        .map(|record| {
            let field = |path: &[&str]| -> Option<&Value> {
                path.iter().try_fold(&record, |v, name| v.get(name))
            };
            let id = field(&["dynamodb", "SequenceNumber"])
                .or_else(|| field(&["eventID"]))
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| EventError::Malformed {
                    kind,
                    message: "a DynamoDB stream record has neither SequenceNumber nor eventID"
                        .into(),
                })?;
            let position = SourcePosition {
                kind,
                source_arn: field(&["eventSourceARN"])
                    .and_then(Value::as_str)
                    .map(str::to_string),
                id,
                shard_id: None,
                partition_key: None,
                arrived_at_ms: field(&["dynamodb", "ApproximateCreationDateTime"])
                    .and_then(Value::as_f64)
                    .map(|secs| (secs * 1000.0) as u64)
                    .filter(|ms| *ms > 0),
                message_group_id: None,
                sqs_sequence_number: None,
                sub_record: None,
                kafka: None,
                event_id: field(&["eventID"])
                    .and_then(Value::as_str)
                    .map(str::to_string),
            };
            let body = serde_json::to_vec(&record).map_err(|e| EventError::Malformed {
                kind,
                message: e.to_string(),
            })?;
            Ok(SourceRecord { position, body })
        })
        .collect()
}

/// The item change of a record body (a stream record's JSON): `invalid_change` when it is not
/// one.
pub fn decode_change(body: &[u8]) -> Result<ItemChange, Rejection> {
    let invalid = |m: String| Rejection::new(RejectionCode::InvalidChange, bounded(&m, 300));
    let record: EventRecord = serde_json::from_slice(body)
        .map_err(|e| invalid(format!("not a DynamoDB stream record: {e}")))?;
    change_of(record)
}

/// The item change of a DynamoDB stream record as Lambda delivers it: `invalid_change` when
/// its `eventName` is not one of a change or it has no `SequenceNumber`.
pub(crate) fn change_of(record: EventRecord) -> Result<ItemChange, Rejection> {
    let invalid = |m: String| Rejection::new(RejectionCode::InvalidChange, bounded(&m, 300));
    let kind = ChangeKind::from_event_name(&record.event_name).ok_or_else(|| {
        invalid(format!(
            "eventName must be INSERT, MODIFY or REMOVE, got {}",
            dynamodb_exactly_once::rejection::quote(&record.event_name)
        ))
    })?;
    let change = record.change;
    let image = |i: serde_dynamo::Item| -> Option<Item> { (!i.is_empty()).then(|| i.into()) };
    let sequence_number = change
        .sequence_number
        .ok_or_else(|| invalid("the record has no SequenceNumber".into()))?;
    Ok(
        ItemChange::new(record.event_id, kind, change.keys.into(), sequence_number)
            .with_images(image(change.new_image), image(change.old_image)),
    )
}

/// The partial batch response of a DynamoDB stream batch.
pub(super) fn response<I, S>(failed_ids: I) -> DynamoDbEventResponse
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut response = DynamoDbEventResponse::default();
    for id in failed_ids {
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = Some(id.into());
        response.batch_item_failures.push(failure);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{Batch, BatchResponse};
    use serde_json::json;

    fn event() -> Value {
        json!({"Records":[
            {"eventID":"e1","eventName":"INSERT","eventVersion":"1.1","eventSource":"aws:dynamodb",
             "awsRegion":"us-east-1","eventSourceARN":"arn:aws:dynamodb:us-east-1:1:table/T/stream/x",
             "dynamodb":{"ApproximateCreationDateTime":1763769600.0,"Keys":{"PK":{"S":"a"}},
                         "NewImage":{"PK":{"S":"a"},"tags":{"SS":["x","y"]},"n":{"N":"12345678901234567890123456789012345678"}},
                         "SequenceNumber":"111100000000000000000000000000000000001","SizeBytes":26,"StreamViewType":"NEW_AND_OLD_IMAGES"}},
            {"eventID":"e2","eventName":"REMOVE","eventSource":"aws:dynamodb","awsRegion":"us-east-1",
             "dynamodb":{"Keys":{"PK":{"S":"a"}},"SequenceNumber":"222","SizeBytes":10}},
            {"eventID":"e3","eventName":"TRUNCATE","eventSource":"aws:dynamodb",
             "dynamodb":{"SequenceNumber":"333"}}
        ]})
    }

    #[test]
    fn detects_dynamodb_streams_with_positions() {
        let batch = Batch::from_event(event()).expect("dynamodb event");
        assert_eq!(batch.kind, SourceKind::DynamoDb);
        let first = &batch.records[0].position;
        assert_eq!(first.id, "111100000000000000000000000000000000001");
        assert_eq!(
            first.source_arn.as_deref(),
            Some("arn:aws:dynamodb:us-east-1:1:table/T/stream/x")
        );
        assert_eq!(first.arrived_at_ms, Some(1_763_769_600_000));
        assert_eq!(first.event_id.as_deref(), Some("e1"));
        assert_eq!(batch.records[1].position.arrived_at_ms, None);
    }

    #[test]
    fn decodes_changes_with_typed_images_and_rejects_bad_ones() {
        let batch = Batch::from_event(event()).expect("dynamodb event");
        let insert = decode_change(&batch.records[0].body).expect("insert");
        assert_eq!(insert.kind, ChangeKind::Insert);
        assert_eq!(insert.event_id, "e1");
        let image = insert.new_image.expect("new image");
        assert!(
            matches!(&image["tags"], aws_sdk_dynamodb::types::AttributeValue::Ss(s) if s.len() == 2)
        );
        assert_eq!(
            image["n"].as_n().ok().map(String::as_str),
            Some("12345678901234567890123456789012345678")
        );
        let remove = decode_change(&batch.records[1].body).expect("remove");
        assert_eq!((remove.kind, remove.new_image), (ChangeKind::Remove, None));
        // A record that is not a change is one dead letter, not a failed batch.
        let bad = decode_change(&batch.records[2].body).expect_err("truncate");
        assert_eq!(bad.code, RejectionCode::InvalidChange);
    }

    #[test]
    fn answers_failures_by_sequence_number() {
        let response = BatchResponse::new(SourceKind::DynamoDb, ["222"]);
        assert_eq!(
            serde_json::to_value(&response).expect("json"),
            json!({"batchItemFailures":[{"itemIdentifier":"222"}]})
        );
        assert_eq!(response.failed_ids(), ["222"]);
    }
}
