//! A mapping tried on an event, without writing anything (`ops mapping try`): each record's
//! mapped body, or the exact rejection, and what the protocol makes of the mapped body.

use dynamodb_exactly_once::{Protocol, Rejection};
use serde_json::Value;

use super::RecordMapping;
use crate::source::{Batch, EventError, SourceKind, SourcePosition};

/// One record of an event through a mapping.
#[non_exhaustive]
#[derive(Debug)]
#[must_use]
pub struct Tried {
    /// Where the record came from.
    pub position: SourcePosition,
    /// The body the protocol would read, or why the record does not fit the mapping.
    pub mapped: Result<Value, Rejection>,
    /// The protocol's verdict on the mapped body (`None`: no protocol given, or the record
    /// did not map).
    pub parsed: Option<Result<(), Rejection>>,
}

impl Tried {
    /// Whether the record maps and (when a protocol was given) parses.
    pub fn fits(&self) -> bool {
        self.mapped.is_ok() && !matches!(self.parsed, Some(Err(_)))
    }
}

impl RecordMapping {
    /// Every Kinesis or SQS record of the Lambda `event` through this mapping, and then through
    /// `protocol`'s parser when given: nothing is written, no DynamoDB call is made.
    pub fn try_event<P: Protocol>(
        &self,
        event: Value,
        protocol: Option<&P>,
    ) -> Result<Vec<Tried>, EventError> {
        let batch = Batch::from_event(event)?;
        if batch.kind == SourceKind::DynamoDb {
            return Err(EventError::UnknownShape(
                "a DynamoDB Streams event: mappings apply to Kinesis and SQS bodies only".into(),
            ));
        }
        Ok(batch
            .records
            .iter()
            .map(|record| {
                let mapped = self.map(record);
                let parsed = match (&mapped, protocol) {
                    (Ok(body), Some(p)) => Some(
                        p.parse_delivered(body, &record.position.delivery_id())
                            .map(drop),
                    ),
                    _ => None,
                };
                Tried {
                    position: record.position.clone(),
                    mapped: mapped.and_then(|body| {
                        serde_json::from_slice(&body).map_err(|e| {
                            Rejection::new(
                                dynamodb_exactly_once::RejectionCode::MappingFailed,
                                e.to_string(),
                            )
                        })
                    }),
                    parsed,
                }
            })
            .collect())
    }
}
