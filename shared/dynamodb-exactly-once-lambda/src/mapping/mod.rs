//! Record mappings: the ready functions on events that already exist.
//!
//! The writers read records in their own JSON shapes (`{"key":…,"ts":…,"item":…}` for the
//! ratchet, `{"key":…,"add":…,"idempotencyKey":…}` for the counter, …). A team with an existing
//! stream of, say, `{"customer":"c1","eventTime":1700000000000,"amount":250}` sets
//! `<PREFIX>_RECORD_MAPPING` to a **template** of the writer's shape whose leaves say where
//! each value comes from, and every Kinesis or SQS record body is rewritten through it before
//! the protocol reads it:
//!
//! ```json
//! {"key": {"PK": "=customer#{/customer}", "SK": "=totals"},
//!  "add": {"amount": "/amount", "events": 1},
//!  "idempotencyKey": "$id"}
//! ```
//!
//! A template is JSON; objects and arrays are copied with their values mapped; numbers,
//! booleans and `null` are copied as they are; a **string** is one of:
//!
//! | form | value |
//! |---|---|
//! | `/a/b` | the body's value at that JSON pointer (RFC 6901: `~1` is `/`, `~0` is `~`), of any type |
//! | `$id` | the record's id in its source: the SQS message id, the Kinesis sequence number (`<seq>:<sub>` for a KPL user record) |
//! | `$sequenceNumber` | the Kinesis sequence number (a KPL user record: `<seq>:<sub>`) or the SQS FIFO `SequenceNumber` |
//! | `$messageId` | the SQS message id |
//! | `$partitionKey` | the Kinesis partition key |
//! | `$messageGroupId` | the SQS FIFO message group id |
//! | `$arrivalTime` | when the source received the record, epoch milliseconds (a number); with `<PREFIX>_EVENT_TIME_POINTER` set, the earlier of that and the body's event time |
//! | `$deliveryId` | the record's whole delivery identity (source, stream or queue, shard, id) |
//! | `$body` | the whole body |
//! | `=text` | the text after `=`, where `{/pointer}` and `{$field}` are replaced by those values (strings as they are, numbers in their canonical spelling, `1.0` and `1e0` as `1`; `{{` and `}}` are braces) |
//!
//! Any other string is refused at start-up, so a literal can never be mistaken for a
//! pointer. Numbers pass through as the same value (their spelling is not kept: `1.50`
//! arrives as `1.5`, which the protocols, comparing numbers by value, do not distinguish), and
//! `$id` gives a redelivered record the same value every time: an idempotency key or a
//! tie-break that the source already guarantees.
//!
//! A leaf may be followed by typed filters (`/Message|json|/customer`, `/amount|number`,
//! `/time|epoch_ms`, `/x|default(0)`, `/amount|neg`, `|string`); an object key starting with
//! `=` is computed like a text (`"={/type}": 1`); `{"$match": leaf, "cases": {…}, "else": …}`
//! chooses a value (a conditional `op`). `docs/mapping.md` describes each.
//! [`RecordMapping::for_protocol`] (what `writer_from_env` uses) checks the template against
//! the protocol's record [`Shape`] when the function starts.
//!
//! # Failure modes
//! * A template that is not JSON, or holds a string of none of the forms above, or a `$`
//!   name or filter this version does not know, or (checked against a protocol) a field its
//!   record does not have, a required field missing, a literal of the wrong type or value:
//!   the function refuses to start ([`ConfigError`] naming the setting and the place in the
//!   template).
//! * A body that is not JSON, a pointer that reads nothing, a `$` field the record does not
//!   have (`$messageId` on Kinesis), a filter that cannot apply, a `$match` value no case
//!   names, or an interpolated value that is an object, array, boolean or `null`: the record is rejected with `mapping_failed` (kept as a dead letter,
//!   the original body kept; nothing is written).
//! * DynamoDB stream records are item changes, not bodies: the mapping does not apply to
//!   them (the protocols' `*_CHANGE*` settings do).
//!
//! * A body holding a number the parsed value does not carry exactly anywhere, read by the
//!   template or not: `invalid_number` (it would be rounded on the way; send such values as
//!   strings). 64-bit integers and numbers of at most 15 significant digits always pass.
//!
//! Cost: one JSON parse and one serialisation per record, no DynamoDB call.

mod dry_run;
mod leaf;
mod shape;
mod template;
mod work;

pub use dry_run::Tried;
pub use shape::{FieldShape, Kind, RecordShape, Shape};
pub(crate) use template::{Field, Node};
pub(crate) use work::Mapped;

use dynamodb_exactly_once::__private::check_json_numbers;
use dynamodb_exactly_once::{ConfigError, Rejection, RejectionCode};
use serde_json::Value;

use crate::source::SourceRecord;

/// A validated record mapping (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordMapping {
    setting: String,
    root: Node,
}

impl RecordMapping {
    /// The mapping of a JSON `template`; `setting` names it in errors.
    pub fn new(setting: &str, template: &str) -> Result<Self, ConfigError> {
        let value: Value = serde_json::from_str(template)
            .map_err(|e| ConfigError::new(setting, format!("the mapping is not JSON: {e}")))?;
        let root = Node::compile(&value, "")
            .map_err(|(at, why)| ConfigError::new(setting, format!("at `{at}`: {why}")))?;
        Ok(RecordMapping {
            setting: setting.to_string(),
            root,
        })
    }

    /// The mapping of a JSON `template` for protocol `P`: [`RecordMapping::new`], then
    /// [`RecordMapping::check`] against `P`'s record shape.
    pub fn for_protocol<P: RecordShape>(
        setting: &str,
        template: &str,
    ) -> Result<Self, ConfigError> {
        let mapping = RecordMapping::new(setting, template)?;
        match P::record_shape() {
            Some(shape) => mapping.check(&shape).map(|()| mapping),
            None => Ok(mapping),
        }
    }

    /// Whether the template gives records of `shape`: only its fields (a misspelled
    /// `idempotency_key` is refused, naming the field meant), every required one, and
    /// literals of the types and values the fields take (`"op": "=upsert"` is refused).
    /// Values read from the body are the protocol's to check, record by record.
    pub fn check(&self, shape: &Shape) -> Result<(), ConfigError> {
        shape::check(&self.root, shape, "")
            .map_err(|(at, why)| ConfigError::new(&self.setting, format!("at `{at}`: {why}")))
    }

    /// The body `record` becomes: the template filled from its body and position, as JSON
    /// bytes; `mapping_failed` when the body does not fit.
    pub fn map(&self, record: &SourceRecord) -> Result<Vec<u8>, Rejection> {
        let body: Value = serde_json::from_slice(&record.body).map_err(|e| {
            failed(format!(
                "the body is not JSON ({e}): the record mapping reads JSON bodies"
            ))
        })?;
        // Parsed numbers are 64-bit integers or f64: one the parse rounded would be written
        // rounded (the protocols check the text they read, which is ours after mapping).
        check_json_numbers(&record.body)
            .map_err(|e| Rejection::new(RejectionCode::InvalidNumber, e.to_string()))?;
        let mapped = self.root.fill(&body, &record.position).map_err(failed)?;
        serde_json::to_vec(&mapped).map_err(|e| failed(e.to_string()))
    }
}

fn failed(message: String) -> Rejection {
    Rejection::new(RejectionCode::MappingFailed, message)
}

#[cfg(test)]
mod tests;
