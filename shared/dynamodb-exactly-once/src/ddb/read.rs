//! Reading one item: [`Read`] (consistent or eventual, never a bare `bool`), the one `GetItem`
//! every protocol's `get` stands on, and typed decoding through `serde_dynamo`.

use aws_sdk_dynamodb::Client;
use serde::de::DeserializeOwned;

use super::item::{Item, ItemKey};
use super::StoreError;

/// How a read sees the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Read {
    /// Strongly consistent: every write acknowledged before the read is seen (twice the read
    /// units of an eventual read).
    #[default]
    Consistent,
    /// Eventually consistent: may miss writes of the last second.
    Eventual,
}

impl Read {
    fn consistent(self) -> bool {
        matches!(self, Read::Consistent)
    }
}

/// One item of `table` by `key`, `None` when absent.
pub(crate) async fn get_item(
    client: &Client,
    table: &str,
    key: &ItemKey,
    read: Read,
) -> Result<Option<Item>, StoreError> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(key.to_item()?))
        .consistent_read(read.consistent())
        .send()
        .await
        .map_err(|e| StoreError::from_sdk("GetItem", e))?;
    Ok(out.item)
}

/// An item as `T` (attributes `T` does not name are ignored, unless `T` says otherwise), read
/// through its exact JSON ([`crate::ddb::item::item_to_json`]: numbers keep every digit).
pub(crate) fn decode<T: DeserializeOwned>(item: Item) -> Result<T, StoreError> {
    let inconsistent = |e: &dyn std::fmt::Display| {
        StoreError::Inconsistent(format!("the item does not decode: {e}"))
    };
    let json = crate::ddb::item::item_to_json(item).map_err(|e| inconsistent(&e))?;
    serde_json::from_value(serde_json::Value::Object(json)).map_err(|e| inconsistent(&e))
}
