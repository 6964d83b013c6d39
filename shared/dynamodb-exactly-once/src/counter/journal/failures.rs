//! The on-failure destination's messages of the roll-up's event source mapping, and the UTC
//! days to repair they point at.
//!
//! When Lambda gives up on a batch of the journal's stream (`MaximumRetryAttempts`,
//! `MaximumRecordAgeInSeconds`, records that left the stream unread) it sends the batch's
//! description to the mapping's on-failure destination: an "invocation record" whose
//! `DDBStreamBatchInfo` holds `shardId`, `startSequenceNumber`, `endSequenceNumber`,
//! `approximateArrivalOfFirstRecord`, `approximateArrivalOfLastRecord`, `batchSize` and
//! `streamArn` (Lambda developer guide, `services-dynamodb-errors.html`). The records are not
//! in it: their keys are in the journal table, each with its first put's time `at`, and the
//! repair ([`super::Repair`]) recounts whole UTC days of `at`.
//!
//! A stream record's arrival (`ApproximateCreationDateTime`, DynamoDB's clock, rounded down
//! to the second or, on older streams, the minute) is the `INSERT` that first put the key,
//! whose `at` is the writer's clock when it built the put. They differ by the writer's clock
//! error and the put's latency; the journal's other bounds already take a writer's clock to
//! be within an hour ([`ARRIVAL_MARGIN_MS`]: the journal item's TTL hour, the repair's
//! hour after a day ended). So a message's keys have `at` within
//! `[first arrival − 1 h, last arrival + 1 h]`, and the days to repair are those of that span.

use chrono::DateTime;
use serde::Deserialize;

use super::days::{self, DAY_MS};
use super::repair::RepairDays;

/// How far a key's first put time `at` may be from its stream record's arrival.
pub(crate) const ARRIVAL_MARGIN_MS: u64 = 3_600_000;

/// One batch Lambda gave up on, as its on-failure message describes it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StreamFailure {
    /// Why Lambda gave up (`requestContext.condition`: `RetryAttemptsExhausted`,
    /// `RecordAgeExceeded`, …), if the message says.
    pub condition: Option<String>,
    /// The shard of the batch.
    pub shard_id: String,
    /// The first record's sequence number.
    pub start_sequence_number: String,
    /// The last record's sequence number.
    pub end_sequence_number: String,
    /// The first record's arrival in the stream (epoch ms).
    pub first_arrival_ms: u64,
    /// The last record's arrival in the stream (epoch ms).
    pub last_arrival_ms: u64,
    /// Records in the batch.
    pub batch_size: u64,
    /// The stream (its ARN names the table).
    pub stream_arn: String,
}

/// An on-failure message that is not the description of a DynamoDB Streams batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("on-failure message {message}: {reason}")]
#[non_exhaustive]
pub struct FailureMessageError {
    /// The message (its SQS message id, or its place in a file).
    pub message: String,
    /// What is wrong with it.
    pub reason: String,
}

#[derive(Deserialize)]
struct Message {
    #[serde(rename = "requestContext")]
    request_context: Option<RequestContext>,
    #[serde(rename = "DDBStreamBatchInfo")]
    info: Option<BatchInfo>,
}

#[derive(Deserialize)]
struct RequestContext {
    condition: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BatchInfo {
    shard_id: String,
    start_sequence_number: String,
    end_sequence_number: String,
    approximate_arrival_of_first_record: String,
    approximate_arrival_of_last_record: String,
    batch_size: u64,
    stream_arn: String,
}

impl StreamFailure {
    /// Read one on-failure message's body (JSON); `name` names it in the error.
    pub fn parse(name: &str, body: &str) -> Result<StreamFailure, FailureMessageError> {
        let error = |reason: String| FailureMessageError {
            message: name.to_string(),
            reason,
        };
        let message: Message = serde_json::from_str(body)
            .map_err(|e| error(format!("not an invocation record: {e}")))?;
        let info = message.info.ok_or_else(|| {
            error("no DDBStreamBatchInfo (not a DynamoDB Streams mapping's message)".into())
        })?;
        let time = |field: &str, text: &str| {
            DateTime::parse_from_rfc3339(text)
                .ok()
                .and_then(|t| u64::try_from(t.timestamp_millis()).ok())
                .ok_or_else(|| error(format!("{field} {text:?} is not an RFC 3339 time")))
        };
        let first = time(
            "approximateArrivalOfFirstRecord",
            &info.approximate_arrival_of_first_record,
        )?;
        let last = time(
            "approximateArrivalOfLastRecord",
            &info.approximate_arrival_of_last_record,
        )?;
        if last < first {
            return Err(error(
                "its last record arrived before its first".to_string(),
            ));
        }
        Ok(StreamFailure {
            condition: message.request_context.and_then(|c| c.condition),
            shard_id: info.shard_id,
            start_sequence_number: info.start_sequence_number,
            end_sequence_number: info.end_sequence_number,
            first_arrival_ms: first,
            last_arrival_ms: last,
            batch_size: info.batch_size,
            stream_arn: info.stream_arn,
        })
    }

    /// The table of the stream (`…:table/<name>/stream/<label>`), if the ARN names one.
    pub fn table(&self) -> Option<&str> {
        let (_, rest) = self.stream_arn.split_once(":table/")?;
        rest.split_once("/stream/").map(|(table, _)| table)
    }

    /// The first and last UTC day (days since the epoch) of its keys' first puts.
    pub(super) fn days(&self) -> (u64, u64) {
        let first = self.first_arrival_ms.saturating_sub(ARRIVAL_MARGIN_MS);
        let last = self.last_arrival_ms.saturating_add(ARRIVAL_MARGIN_MS);
        (days::day_of_ms(first), days::day_of_ms(last))
    }
}

impl RepairDays {
    /// The days holding every key of `failures` (the first day of the earliest, the last of
    /// the latest: one scan of the journal covers them; a day in between with nothing missing
    /// is left as it is). `journal_table` is the table whose stream they must describe.
    /// `None`: no messages.
    pub fn of_failures(
        journal_table: &str,
        failures: &[(String, StreamFailure)],
    ) -> Result<Option<RepairDays>, FailureMessageError> {
        let mut span: Option<RepairDays> = None;
        for (name, failure) in failures {
            if failure.table() != Some(journal_table) {
                return Err(FailureMessageError {
                    message: name.clone(),
                    reason: format!(
                        "it describes stream {}, not one of the journal table {journal_table}",
                        failure.stream_arn
                    ),
                });
            }
            let (first, last) = failure.days();
            span = Some(match span {
                None => RepairDays { first, last },
                Some(s) => RepairDays {
                    first: s.first.min(first),
                    last: s.last.max(last),
                },
            });
        }
        Ok(span)
    }

    /// The first day, `YYYY-MM-DD`.
    pub fn first(&self) -> String {
        days::date(self.first)
    }

    /// The last day, `YYYY-MM-DD`.
    pub fn last(&self) -> String {
        days::date(self.last)
    }

    /// Epoch ms at which the last day has ended an hour ago (the repair's condition).
    pub fn repairable_from_ms(&self) -> u64 {
        (self.last + 1) * DAY_MS + ARRIVAL_MARGIN_MS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(first: &str, last: &str) -> String {
        serde_json::json!({
            "requestContext": {"requestId": "r", "functionArn": "f",
                "condition": "RetryAttemptsExhausted", "approximateInvokeCount": 3},
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "version": "1.0",
            "timestamp": "2026-11-27T00:40:00.000Z",
            "DDBStreamBatchInfo": {
                "shardId": "shardId-00000001",
                "startSequenceNumber": "100",
                "endSequenceNumber": "200",
                "approximateArrivalOfFirstRecord": first,
                "approximateArrivalOfLastRecord": last,
                "batchSize": 2,
                "streamArn": "arn:aws:dynamodb:us-east-1:123456789012:table/journal/stream/2026-11-01T00:00:00.000"
            }
        })
        .to_string()
    }

    #[test]
    fn a_message_names_its_days_with_an_hour_either_side() {
        let f = StreamFailure::parse("m1", &body("2026-11-27T00:30:00Z", "2026-11-27T12:00:00Z"))
            .expect("message");
        assert_eq!(f.condition.as_deref(), Some("RetryAttemptsExhausted"));
        assert_eq!(f.table(), Some("journal"));
        let days = RepairDays::of_failures("journal", &[("m1".into(), f.clone())])
            .expect("days")
            .expect("some");
        assert_eq!((days.first(), days.last()), ("2026-11-26".into(), "2026-11-27".into()));
        let g = StreamFailure::parse("m2", &body("2026-11-28T22:59:59Z", "2026-11-28T23:30:00Z"))
            .expect("message");
        let days = RepairDays::of_failures("journal", &[("m1".into(), f), ("m2".into(), g)])
            .expect("days")
            .expect("some");
        assert_eq!((days.first(), days.last()), ("2026-11-26".into(), "2026-11-29".into()));
        assert_eq!(RepairDays::of_failures("journal", &[]).expect("none"), None);
    }

    #[test]
    fn a_malformed_message_is_an_error_naming_it() {
        for (bad, why) in [
            ("not json".to_string(), "not an invocation record"),
            ("{}".to_string(), "no DDBStreamBatchInfo"),
            (body("yesterday", "2026-11-27T12:00:00Z"), "approximateArrivalOfFirstRecord"),
            (body("2026-11-27T12:00:00Z", "2026-11-27T11:00:00Z"), "before its first"),
            (body("2026-11-27T12:00:00Z", "2026-11-27T12:00:00Z").replace("\"batchSize\":2", "\"batchSize\":-1"), "not an invocation record"),
        ] {
            let e = StreamFailure::parse("msg-7", &bad).expect_err(why);
            assert_eq!(e.message, "msg-7");
            assert!(e.to_string().contains(why), "{e}");
        }
        let f = StreamFailure::parse("m", &body("2026-11-27T00:30:00Z", "2026-11-27T00:30:00Z"))
            .expect("message");
        let e = RepairDays::of_failures("other", &[("m".into(), f)]).expect_err("other table");
        assert!(e.to_string().contains("other"), "{e}");
    }
}
