//! A DynamoDB stream record as a typed body: `Record<DynamoDbChange<T, K>>` gets the change's
//! keys and images unmarshalled from DynamoDB's attribute values through `serde_dynamo`, so
//! the handler's `T` is the item's own type, not `{"S": …}` JSON.

use aws_lambda_events::dynamodb::EventRecord;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};

use dynamodb_exactly_once::Item;

/// One item change of a DynamoDB stream: its event, keys and images as your types.
///
/// `T` is the item (`NewImage`, `OldImage`); the key stays DynamoDB's attribute values
/// (exact, whatever their types: [`keys`](Self::keys)), [`keys_as`](Self::keys_as) gives it as
/// your type. An image the stream view does not carry (`KEYS_ONLY`, `NEW_IMAGE` for the old
/// one) or the change does not have (`OldImage` of an `INSERT`, `NewImage` of a `REMOVE`) is
/// `None`. A record whose images do not unmarshal into `T` does not
/// deserialize: it is `invalid_body` (the dead-letter sink), like any body.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct DynamoDbChange<T> {
    /// `INSERT`, `MODIFY` or `REMOVE`.
    pub event_name: String,
    /// The stream record's `eventID`.
    pub event_id: String,
    /// The record's `SequenceNumber` (increasing within the item's shard).
    pub sequence_number: Option<String>,
    /// The item's key, as DynamoDB's attribute values.
    pub keys: Item,
    /// The item after the change.
    pub new_image: Option<T>,
    /// The item before the change.
    pub old_image: Option<T>,
}

impl<T> DynamoDbChange<T> {
    /// The item's key as `K` (a struct of the key attributes).
    pub fn keys_as<K: DeserializeOwned>(&self) -> Result<K, serde_dynamo::Error> {
        serde_dynamo::from_item(self.keys.clone())
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for DynamoDbChange<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let record = EventRecord::deserialize(deserializer)?;
        let change = record.change;
        let image = |item: serde_dynamo::Item, which: &str| -> Result<Option<T>, D::Error> {
            if item.is_empty() {
                return Ok(None);
            }
            serde_dynamo::from_item(item)
                .map(Some)
                .map_err(|e| D::Error::custom(format!("{which}: {e}")))
        };
        Ok(DynamoDbChange {
            keys: change.keys.into(),
            new_image: image(change.new_image, "NewImage")?,
            old_image: image(change.old_image, "OldImage")?,
            event_name: record.event_name,
            event_id: record.event_id,
            sequence_number: change.sequence_number,
        })
    }
}
