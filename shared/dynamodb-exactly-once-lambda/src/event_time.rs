//! The producer's event time as a record's age: for sources whose arrival time an operator's
//! re-injection resets.
//!
//! A record's age guard (`too_old`) measures from the source's arrival time (Kinesis
//! `approximateArrivalTimestamp`, SQS `SentTimestamp`). Moving a message back from a
//! redrive queue (`StartMessageMoveTask`) or sending an exported record again gives it a new
//! arrival time, so a record kept longer than the protocol's window would pass the guard.
//! When the producer stamps the event time into the body, `<PREFIX>_EVENT_TIME_POINTER`
//! (a JSON pointer such as `/eventTime`, to epoch milliseconds as a number or a string of
//! digits) makes the guard measure from the earlier of the two: a re-injected record keeps
//! its age. A record without a readable event time keeps its arrival time. A Kafka value in
//! Avro or Protobuf (`<PREFIX>_KAFKA_VALUE_FORMAT`) is read as it decodes to JSON.

use serde_json::Value;

use crate::source::value::KafkaValues;
use crate::source::{Batch, SourceKind};
use dynamodb_exactly_once::ConfigError;

/// Where a record body holds its event time (epoch milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTime {
    pointer: String,
}

impl EventTime {
    /// The event time at JSON pointer `pointer` (RFC 6901, e.g. `/eventTime` or
    /// `/meta/sentAt`); `setting` names the setting in the error.
    pub fn new(setting: &str, pointer: &str) -> Result<Self, ConfigError> {
        if !pointer.starts_with('/') {
            return Err(ConfigError::new(
                setting,
                format!(
                    "{pointer:?} is not a JSON pointer (it starts with `/`, e.g. `/eventTime`)"
                ),
            ));
        }
        Ok(EventTime {
            pointer: pointer.to_string(),
        })
    }

    /// The event time of one body, when it has a readable one.
    pub fn of(&self, body: &[u8]) -> Option<u64> {
        let value: Value = serde_json::from_slice(body).ok()?;
        match value.pointer(&self.pointer)? {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// Date every record of `batch` by the earlier of its arrival and its event time.
    pub fn stamp(&self, batch: &mut Batch) {
        self.stamp_decoded(batch, None);
    }

    /// [`stamp`](Self::stamp), reading the event time of a Kafka record in its value as
    /// `values` decode it (Avro, Protobuf); a value that does not decode keeps its arrival
    /// (the unit of work rejects it, `undecodable_value`).
    pub(crate) fn stamp_decoded(&self, batch: &mut Batch, values: Option<&KafkaValues>) {
        for record in &mut batch.records {
            let event_ms = match values {
                Some(values) if record.position.kind == SourceKind::Kafka => values
                    .decode(&record.body)
                    .ok()
                    .and_then(|json| self.of(&json)),
                _ => self.of(&record.body),
            };
            if let Some(event_ms) = event_ms {
                let arrived = record.position.arrived_at_ms.unwrap_or(u64::MAX);
                record.position.arrived_at_ms = Some(arrived.min(event_ms));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_time_is_read_from_numbers_and_digit_strings() {
        let t = EventTime::new("X", "/meta/at").expect("pointer");
        assert_eq!(
            t.of(br#"{"meta":{"at":1700000000000}}"#),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            t.of(br#"{"meta":{"at":"1700000000000"}}"#),
            Some(1_700_000_000_000)
        );
        assert_eq!(t.of(br#"{"meta":{"at":"yesterday"}}"#), None);
        assert_eq!(t.of(b"not json"), None);
        assert!(EventTime::new("X", "eventTime").is_err());
    }
}
