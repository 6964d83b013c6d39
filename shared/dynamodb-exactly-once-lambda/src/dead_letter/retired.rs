//! The sweeper's retired TX records as dead letters of the coordinator: a record rolled back
//! final because one of its requests names a key the table refuses is kept like a message the
//! coordinator refuses `invalid_key`, so `ops dead-letters list --function tx-coordinator`
//! shows it, and a replay through the coordinator refuses it again with its reason (the key
//! is refused by the table's schema: nothing a replay could apply).
//!
//! The letter's position is an SQS one without a queue (`-`) and with the message id
//! `swept:<txId>`: its id is `tx-coordinator|sqs|<deployment>|-|swept:<txId>` (a sweep that
//! keeps it again overwrites it), which the template's IAM `dynamodb:LeadingKeys` condition
//! allows the sweeper alone.

use dynamodb_exactly_once::__private::bounded;
use dynamodb_exactly_once::txn::sweep::{KeepRetired, Retired};
use dynamodb_exactly_once::StoreError;
use futures::future::BoxFuture;

use crate::source::{SourceKind, SourcePosition, SourceRecord};

use super::DeadLetters;

/// The message id of a retired record's letter: `swept:<txId>`.
pub(crate) const SWEPT_ID_PREFIX: &str = "swept:";

/// Longest payload kept for a retired record, in characters (the coordinator's messages are
/// at most 1 MiB, SQS's largest): a longer one is cut, and a replay then refuses it as
/// malformed JSON.
pub(crate) const MAX_RETIRED_PAYLOAD_CHARS: usize = 1024 * 1024;

/// The record a retired TX record is kept as: its transaction as a coordinator's message.
pub(crate) fn retired_record(retired: &Retired) -> SourceRecord {
    let message = retired.message().to_string();
    let body = bounded(&message, MAX_RETIRED_PAYLOAD_CHARS).into_bytes();
    SourceRecord {
        position: SourcePosition {
            kind: SourceKind::Sqs,
            source_arn: None,
            id: format!("{SWEPT_ID_PREFIX}{}", retired.tx_id),
            shard_id: None,
            partition_key: None,
            message_group_id: None,
            sqs_sequence_number: None,
            sub_record: None,
            event_id: None,
            arrived_at_ms: None,
            kafka: None,
        },
        body,
    }
}

impl KeepRetired for DeadLetters {
    fn keep_retired<'a>(&'a self, retired: &'a Retired) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.keep(&retired_record(retired), &retired.reason).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dead_letter::letter_id;
    use dynamodb_exactly_once::{Rejection, RejectionCode};
    use serde_json::json;

    #[test]
    fn a_retired_record_is_the_coordinators_message_under_the_swept_id() {
        // stacks/transactions.yaml, KeepRetiredRecords: LeadingKeys
        // "tx-coordinator|sqs|<coordinator>|-|swept:*".
        let reason = Rejection::new(RejectionCode::InvalidKey, "request 1: a number");
        let retired = Retired::new("t-1".into(), reason, vec![json!({"Update": {}})]);
        let record = retired_record(&retired);
        assert_eq!(
            letter_id("tx-coordinator", Some("coord-fn"), &record.position),
            "tx-coordinator|sqs|coord-fn|-|swept:t-1"
        );
        let body: serde_json::Value = serde_json::from_slice(&record.body).expect("JSON");
        assert_eq!(body, json!({"txId": "t-1", "requests": [{"Update": {}}]}));
    }
}
