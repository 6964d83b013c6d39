//! What a transaction leaves on the items it touches: the protocol attributes, and fresh
//! version tokens.

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Map, Value};

use super::format::{ATTR_LOCK, ATTR_VERSION_TOKEN, ITEM_PROTOCOL_ATTRIBUTES};
use crate::ddb::error::StoreError;
use crate::ddb::item::{item_to_json, Item};

/// `_txLock` of an item.
pub(super) fn lock_of(item: &Item) -> Option<&str> {
    item.get(ATTR_LOCK)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// `_txVer` of an item.
pub(super) fn token_of(item: &Item) -> Option<&str> {
    item.get(ATTR_VERSION_TOKEN)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// Whether a boolean marker (`_txDelete`, `_txTransient`) is set.
pub(super) fn flag(item: &Item, name: &str) -> bool {
    matches!(item.get(name), Some(AttributeValue::Bool(true)))
}

/// A string attribute value.
pub(super) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// A fresh, never reused version token: 128 random bits as 32 hex characters.
pub(super) fn new_token() -> String {
    hex::encode(rand::random::<u128>().to_be_bytes())
}

/// Remove the protocol attributes from an item read from a table.
pub(crate) fn strip_protocol(mut item: Item) -> Item {
    for name in ITEM_PROTOCOL_ATTRIBUTES {
        item.remove(name);
    }
    item
}

/// An item as plain JSON without protocol attributes.
pub(crate) fn plain_json(item: Item) -> Result<Map<String, Value>, StoreError> {
    Ok(item_to_json(strip_protocol(item))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fresh() {
        assert_ne!(new_token(), new_token());
        let token = new_token();
        assert_eq!(token.len(), 32);
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
