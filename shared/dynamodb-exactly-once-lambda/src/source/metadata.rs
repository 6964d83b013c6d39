//! What a source says about a record besides its body and position: SQS attributes and
//! message attributes, the Kinesis encryption type, the DynamoDB Streams event name. Read from
//! the Lambda event next to [`Batch::from_event`](super::Batch::from_event), by record id, for
//! the [processor](crate::processor)'s handlers (the writers do not need it).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::Value;

/// One SQS message attribute.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MessageAttribute {
    /// `String`, `Number`, `Binary`, or a custom type (`Number.int`).
    pub data_type: String,
    /// The value of a `String` or `Number` attribute (a number as its text).
    pub string_value: Option<String>,
    /// The value of a `Binary` attribute, decoded from base64.
    pub binary_value: Option<Vec<u8>>,
}

/// A record's metadata from its source.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordMetadata {
    /// SQS: the message's system attributes (`ApproximateReceiveCount`, `SentTimestamp`,
    /// `ApproximateFirstReceiveTimestamp`, `SenderId`, `MessageGroupId`, ...).
    pub attributes: BTreeMap<String, String>,
    /// SQS: the message attributes the producer set.
    pub message_attributes: BTreeMap<String, MessageAttribute>,
    /// SQS: the body's MD5 as SQS computed it (`md5OfBody`).
    pub md5_of_body: Option<String>,
    /// DynamoDB Streams: `INSERT`, `MODIFY` or `REMOVE`; Kinesis: `aws:kinesis:record`.
    pub event_name: Option<String>,
    /// Kinesis: `KMS` or `NONE`, when the event says.
    pub encryption_type: Option<String>,
}

impl RecordMetadata {
    /// SQS: how many times the message was received, this time included.
    pub fn receive_count(&self) -> Option<u32> {
        self.attributes
            .get("ApproximateReceiveCount")
            .and_then(|n| n.parse().ok())
    }
}

/// The metadata of every record of a Lambda event, by its id (the SQS message id, the Kinesis
/// or DynamoDB Streams sequence number: the `itemIdentifier`); records without an id are left
/// out (the batch refuses them anyway).
pub(crate) fn metadata_of(event: &Value) -> HashMap<String, Arc<RecordMetadata>> {
    let Some(records) = event.get("Records").and_then(Value::as_array) else {
        return HashMap::new();
    };
    records
        .iter()
        .filter_map(|record| {
            let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
            let id = text(record.get("messageId"))
                .or_else(|| text(record.pointer("/kinesis/sequenceNumber")))
                .or_else(|| text(record.pointer("/dynamodb/SequenceNumber")))?;
            let meta = RecordMetadata {
                attributes: strings(record.get("attributes")),
                message_attributes: message_attributes(record.get("messageAttributes")),
                md5_of_body: text(record.get("md5OfBody")),
                event_name: text(record.get("eventName")),
                encryption_type: text(record.pointer("/kinesis/encryptionType")),
            };
            Some((id, Arc::new(meta)))
        })
        .collect()
}

fn strings(map: Option<&Value>) -> BTreeMap<String, String> {
    map.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn message_attributes(map: Option<&Value>) -> BTreeMap<String, MessageAttribute> {
    let Some(map) = map.and_then(Value::as_object) else {
        return BTreeMap::new();
    };
    map.iter()
        .map(|(name, a)| {
            let text = |k: &str| a.get(k).and_then(Value::as_str).map(str::to_string);
            let attribute = MessageAttribute {
                data_type: text("dataType").unwrap_or_default(),
                string_value: text("stringValue"),
                binary_value: text("binaryValue").and_then(|b| BASE64.decode(b).ok()),
            };
            (name.clone(), attribute)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sqs_attributes_and_binary_message_attributes_are_read_by_message_id() {
        let event = json!({"Records": [{"messageId": "m1", "eventSource": "aws:sqs", "body": "x",
            "attributes": {"ApproximateReceiveCount": "2"},
            "messageAttributes": {"blob": {"binaryValue": "AP8=", "dataType": "Binary"}}}]});
        let meta = &metadata_of(&event)["m1"];
        assert_eq!(meta.receive_count(), Some(2));
        assert_eq!(
            meta.message_attributes["blob"].binary_value.as_deref(),
            Some(&[0x00, 0xff][..])
        );
    }
}
