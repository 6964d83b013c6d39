//! Apache Kafka: Amazon MSK (`eventSource = "aws:kafka"`) and self-managed Kafka
//! (`"SelfManagedKafka"`) batches, as Lambda's Kafka event source mappings deliver them: a
//! `records` object keyed `<topic>-<partition>`, each an array of records with their topic,
//! partition, offset, timestamp and its type, base64 key and value, and headers (arrays of
//! byte values).
//!
//! Each Kafka record is one [`SourceRecord`]: its body is the value, decoded from base64 (a
//! record without a value, a compacted topic's tombstone, has an empty body); its position
//! names the record in its partition: `shard_id` = `<topic>-<partition>` (the unit of order,
//! as a Kinesis shard), `id` = `<topic>-<partition>:<offset>` (unique in the cluster: a topic
//! name never holds `:`), the cluster ARN (MSK; a self-managed cluster has none), the
//! timestamp as the arrival time, and [`KafkaPosition`] with the rest (key, headers).
//!
//! Decoding never fails the batch for one record: a record whose value, key or headers cannot
//! be read (not base64, a header byte out of range, more than `MAX_KEY_AND_HEADER_BYTES` of
//! key and headers) keeps its JSON as its body and the reason in
//! [`KafkaPosition::defect`]; the pipeline dead-letters it (`bad_kafka_record`) before
//! parsing, so the partition goes on. Only an envelope that is not a Kafka batch at all (no
//! `records` object, a record without topic, partition or offset: nothing to answer with) is
//! refused whole.
//!
//! Partial batch response, in the form Lambda's Kafka mappings read (the Lambda developer
//! guide's "error handling controls for Kafka event sources", and Powertools for Python's
//! batch processor, `EventType.Kafka`, which this follows): each failed record is
//! `{"itemIdentifier": {"partition": "<topic>-<partition>", "offset": <offset>}}`.
//!
//! We read the event with our own small structs rather than `aws_lambda_events`' `kafka`
//! types: those take header bytes as `i8` (a byte above 127, as Java's unsigned view writes
//! it, would refuse the whole batch) and fail the batch on any one malformed record.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use dynamodb_exactly_once::{Rejection, RejectionCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{EventError, SourceKind, SourcePosition, SourceRecord};

/// The `eventSource` of an Amazon MSK batch.
pub(crate) const MSK_EVENT_SOURCE: &str = "aws:kafka";
/// The `eventSource` of a self-managed Apache Kafka batch (`aws:SelfManagedKafka` is read
/// too).
pub(crate) const SELF_MANAGED_EVENT_SOURCE: &str = "SelfManagedKafka";

/// Most bytes of key and headers a record's position keeps (they travel with its dead letter,
/// which must stay under DynamoDB's 400 KB item size); a record with more is a dead letter.
pub(crate) const MAX_KEY_AND_HEADER_BYTES: usize = 16 * 1024;

/// Whether an `eventSource` names a Kafka batch.
pub(crate) fn is_kafka_source(event_source: &str) -> bool {
    matches!(
        event_source,
        MSK_EVENT_SOURCE | SELF_MANAGED_EVENT_SOURCE | "aws:SelfManagedKafka"
    )
}

/// One Kafka record header: its name and its value's bytes.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaHeader {
    /// The header's name.
    pub name: String,
    /// The header's value, as bytes (base64 when serialized).
    #[serde(with = "base64_bytes")]
    pub value: Vec<u8>,
}

impl KafkaHeader {
    /// A header `name` with `value`.
    pub fn new(name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        KafkaHeader {
            name: name.into(),
            value: value.into(),
        }
    }
}

/// Where a Kafka record was, and what it carried besides its value.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaPosition {
    /// The topic.
    pub topic: String,
    /// The partition (of the topic).
    pub partition: i64,
    /// The record's offset in its partition.
    pub offset: i64,
    /// The record's timestamp, epoch ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_ms: Option<i64>,
    /// `CREATE_TIME` (the producer's clock) or `LOG_APPEND_TIME` (the broker's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_type: Option<String>,
    /// The record's key, as bytes (`None`: no key).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "base64_opt")]
    pub key: Option<Vec<u8>>,
    /// The headers, in record order (a name may repeat).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<KafkaHeader>,
    /// Why the record could not be read (its body is then the record's JSON): it is kept as a
    /// dead letter, `bad_kafka_record`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defect: Option<String>,
}

impl KafkaPosition {
    /// The record at `offset` of `topic`'s `partition`, nothing else known.
    pub fn new(topic: impl Into<String>, partition: i64, offset: i64) -> Self {
        KafkaPosition {
            topic: topic.into(),
            partition,
            offset,
            timestamp_ms: None,
            timestamp_type: None,
            key: None,
            headers: Vec::new(),
            defect: None,
        }
    }

    /// `<topic>-<partition>`: the key of Lambda's `records` object, and the `partition` of an
    /// item identifier.
    pub fn topic_partition(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// The record's id: `<topic>-<partition>:<offset>`.
    pub fn record_id(&self) -> String {
        format!("{}:{}", self.topic_partition(), self.offset)
    }

    /// The last header named `name` (Kafka's `lastHeader`), if any.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .rev()
            .find(|h| h.name == name)
            .map(|h| h.value.as_slice())
    }

    /// The position of a Kafka record: its shard is its topic-partition, its id
    /// [`record_id`](Self::record_id), its arrival time its timestamp.
    pub fn into_position(self, source_arn: Option<String>) -> SourcePosition {
        let mut position = SourcePosition::new(SourceKind::Kafka, self.record_id());
        position.source_arn = source_arn;
        position.shard_id = Some(self.topic_partition());
        position.arrived_at_ms = self
            .timestamp_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .filter(|ms| *ms > 0);
        position.kafka = Some(self);
        position
    }
}

/// The records of a Kafka event, partitions in key order, each partition's in offset order.
pub(super) fn records(event: &Value) -> Result<Vec<SourceRecord>, EventError> {
    let malformed = |message: String| EventError::Malformed {
        kind: SourceKind::Kafka,
        message,
    };
    let arn = event
        .get("eventSourceArn")
        .and_then(Value::as_str)
        .map(str::to_string);
    let Some(partitions) = event.get("records").and_then(Value::as_object) else {
        return Err(malformed("a Kafka event without a `records` object".into()));
    };
    let mut out = Vec::new();
    for (key, records) in partitions {
        let records = records
            .as_array()
            .ok_or_else(|| malformed(format!("`records.{key}` is not an array")))?;
        let mut decoded = records
            .iter()
            .map(|r| decode(r).map_err(&malformed))
            .collect::<Result<Vec<_>, _>>()?;
        decoded.sort_by_key(|(p, _)| p.offset);
        out.extend(
            decoded
                .into_iter()
                .map(|(p, body)| SourceRecord::new(p.into_position(arn.clone()), body)),
        );
    }
    Ok(out)
}

/// One record: its position and body. Only a record that cannot be placed (no topic,
/// partition or offset) is an error; any other defect keeps the record whole. The record is
/// read where it lies in the event (nothing of it copied but what the position keeps).
fn decode(record: &Value) -> Result<(KafkaPosition, Vec<u8>), String> {
    let unplaced =
        |what: &str| format!("a Kafka record without topic, partition or offset: {what}");
    let topic = record
        .get("topic")
        .and_then(Value::as_str)
        .ok_or_else(|| unplaced("no `topic` string"))?;
    let partition =
        integer(record.get("partition")).ok_or_else(|| unplaced("`partition` is no integer"))?;
    let offset = integer(record.get("offset")).ok_or_else(|| unplaced("`offset` is no integer"))?;
    let mut position = KafkaPosition::new(topic, partition, offset);
    position.timestamp_ms = record.get("timestamp").and_then(Value::as_i64);
    position.timestamp_type = record
        .get("timestampType")
        .and_then(Value::as_str)
        .map(str::to_owned);
    match Contents::read(record) {
        Ok(contents) => {
            position.key = contents.key;
            position.headers = contents.headers;
            Ok((position, contents.value))
        }
        Err(defect) => {
            position.defect = Some(defect);
            let body = serde_json::to_vec(record).map_err(|e| e.to_string())?;
            Ok((position, body))
        }
    }
}

/// A number, or a string of one (some producers of test events write `"partition": "0"`).
fn integer(value: Option<&Value>) -> Option<i64> {
    match value? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// The base64 text of field `what` (`None`: absent or null).
fn base64_field<'a>(record: &'a Value, what: &str) -> Result<Option<&'a str>, String> {
    match record.get(what) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(format!("its {what} is not a base64 string")),
    }
}

/// What a record carries: key, headers, value (empty when it has none).
struct Contents {
    key: Option<Vec<u8>>,
    headers: Vec<KafkaHeader>,
    value: Vec<u8>,
}

impl Contents {
    fn read(record: &Value) -> Result<Contents, String> {
        let key = base64_field(record, "key")?
            .map(|k| bytes("key", k))
            .transpose()?;
        let headers = headers(record.get("headers"))?;
        let size = key.as_ref().map_or(0, Vec::len)
            + headers
                .iter()
                .map(|h| h.name.len() + h.value.len())
                .sum::<usize>();
        if size > MAX_KEY_AND_HEADER_BYTES {
            return Err(format!(
                "its key and headers hold {size} bytes, more than the {MAX_KEY_AND_HEADER_BYTES} \
                 a record's position keeps"
            ));
        }
        let value = base64_field(record, "value")?
            .map(|v| bytes("value", v))
            .transpose()?;
        Ok(Contents {
            key,
            headers,
            value: value.unwrap_or_default(),
        })
    }
}

fn bytes(what: &str, text: &str) -> Result<Vec<u8>, String> {
    BASE64
        .decode(text)
        .map_err(|e| format!("its {what} is not base64: {e}"))
}

/// Lambda's headers: an array of one-entry objects, `{"name": [byte, ...]}` (bytes as
/// unsigned 0–255 or Java's signed −128–127).
fn headers(value: Option<&Value>) -> Result<Vec<KafkaHeader>, String> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let entries = value
        .as_array()
        .ok_or("its headers are not an array of objects")?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry
            .as_object()
            .ok_or("its headers are not an array of objects")?;
        for (name, bytes) in entry {
            let bytes = bytes
                .as_array()
                .ok_or_else(|| format!("header {name:?} is not an array of bytes"))?;
            let value = bytes
                .iter()
                .map(|b| {
                    b.as_i64()
                        .filter(|n| (-128..=255).contains(n))
                        .map(|n| n as u8)
                        .ok_or_else(|| format!("header {name:?} holds a value that is not a byte"))
                })
                .collect::<Result<Vec<u8>, String>>()?;
            out.push(KafkaHeader::new(name.clone(), value));
        }
    }
    Ok(out)
}

/// Why a Kafka record cannot be read: the `bad_kafka_record` rejection it is kept with.
/// `None` for every other record.
pub(crate) fn defect(record: &SourceRecord) -> Option<Rejection> {
    let defect = record.position.kafka.as_ref()?.defect.as_ref()?;
    Some(Rejection::new(
        RejectionCode::BadKafkaRecord,
        format!("the Kafka record cannot be read: {defect}"),
    ))
}

/// The partial batch response of a Kafka batch.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaEventResponse {
    /// The records to deliver again.
    pub batch_item_failures: Vec<KafkaBatchItemFailure>,
}

/// One failed record of a Kafka batch.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaBatchItemFailure {
    /// Its partition and offset.
    pub item_identifier: KafkaItemIdentifier,
}

/// A Kafka record as Lambda's partial batch response names it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaItemIdentifier {
    /// `<topic>-<partition>`.
    pub partition: String,
    /// The record's offset.
    pub offset: i64,
}

impl KafkaEventResponse {
    /// The response naming the records whose ids ([`KafkaPosition::record_id`]) are given; an
    /// id of another form is skipped (it names no Kafka record).
    pub(super) fn from_ids<I, S>(ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let batch_item_failures = ids
            .into_iter()
            .filter_map(|id| {
                let id: String = id.into();
                let (partition, offset) = id.rsplit_once(':')?;
                Some(KafkaBatchItemFailure {
                    item_identifier: KafkaItemIdentifier {
                        partition: partition.to_string(),
                        offset: offset.parse().ok()?,
                    },
                })
            })
            .collect();
        KafkaEventResponse {
            batch_item_failures,
        }
    }

    /// The ids of the records named (`<topic>-<partition>:<offset>`).
    pub(super) fn ids(&self) -> Vec<String> {
        self.batch_item_failures
            .iter()
            .map(|f| {
                format!(
                    "{}:{}",
                    f.item_identifier.partition, f.item_identifier.offset
                )
            })
            .collect()
    }
}

mod base64_bytes {
    use base64::engine::general_purpose::STANDARD as BASE64;
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&BASE64.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        BASE64.decode(text).map_err(serde::de::Error::custom)
    }
}

mod base64_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        bytes: &Option<Vec<u8>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => super::base64_bytes::serialize(b, s),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "super::base64_bytes")] Vec<u8>);
        Ok(Option::<Wrap>::deserialize(d)?.map(|Wrap(b)| b))
    }
}

#[cfg(test)]
mod tests;
