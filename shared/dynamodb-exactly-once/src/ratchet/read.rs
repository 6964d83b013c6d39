//! Reads that never return tombstones: [`Ratchet::get`], [`Ratchet::batch_get`] (filtered in
//! code) and [`Ratchet::query_partition`] (filtered by the query's `FilterExpression`). The
//! bulk reads are typed streams, in the style of the SDK's paginators.

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use futures::{stream, Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{Ratchet, FILTER_LIVE, KEY_CONDITION_PARTITION};
use crate::ddb::item::item_to_json;
use crate::ddb::read::{decode, get_item, Read};
use crate::ddb::retry::Backoff;
use crate::ddb::{Item, ItemKey, StoreError};

/// Keys per `BatchGetItem` (DynamoDB's limit).
const BATCH_GET_KEYS: usize = 100;
/// Waits before asking again for unprocessed keys.
const UNPROCESSED_BACKOFF: Backoff = Backoff::new(
    std::time::Duration::from_millis(50),
    std::time::Duration::from_millis(1600),
    8,
);

impl Ratchet {
    pub(crate) fn is_tombstone(&self, item: &Item) -> bool {
        matches!(
            item.get(&self.config.deleted_attribute),
            Some(AttributeValue::Bool(true))
        )
    }

    /// Read one item as `T`; `None` when absent or deleted (a tombstone). The protocol's own
    /// attributes are in the item too: `T` ignores them unless it names them.
    ///
    /// ```no_run
    /// # async fn example(ratchet: dynamodb_exactly_once::ratchet::Ratchet) -> Result<(), Box<dyn std::error::Error>> {
    /// use dynamodb_exactly_once::{ItemKey, Read};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Rating { stars: u8 }
    ///
    /// let key = ItemKey::partition("PK", "user#1")?;
    /// if let Some(rating) = ratchet.get::<Rating>(&key, Read::Consistent).await? {
    ///     println!("{} stars", rating.stars);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get<T: DeserializeOwned>(
        &self,
        key: &ItemKey,
        read: Read,
    ) -> Result<Option<T>, StoreError> {
        self.get_live(key, read).await?.map(decode).transpose()
    }

    /// Read one item as JSON (protocol attributes included); `None` when absent or deleted.
    pub async fn get_json(
        &self,
        key: &ItemKey,
        read: Read,
    ) -> Result<Option<Map<String, Value>>, StoreError> {
        Ok(self
            .get_live(key, read)
            .await?
            .map(item_to_json)
            .transpose()?)
    }

    async fn get_live(&self, key: &ItemKey, read: Read) -> Result<Option<Item>, StoreError> {
        let item = get_item(&self.client, &self.config.table, key, read).await?;
        if let Some(item) = &item {
            self.check_layout(item)?;
        }
        Ok(item.filter(|item| !self.is_tombstone(item)))
    }

    /// An item written under other attribute names is an error, never read as live or absent.
    fn check_layout(&self, item: &Item) -> Result<(), StoreError> {
        match self.layout.foreign(&self.config, item) {
            Some(refused) => Err(StoreError::Inconsistent(refused.to_string())),
            None => Ok(()),
        }
    }

    /// Read many items as `T`, streamed chunk by chunk (100 keys per `BatchGetItem`,
    /// unprocessed keys asked again with backoff; nothing is sent until the stream is polled);
    /// tombstones and absent items are left out. The items come in no particular order.
    ///
    /// ```no_run
    /// # async fn example(ratchet: dynamodb_exactly_once::ratchet::Ratchet) -> Result<(), Box<dyn std::error::Error>> {
    /// use dynamodb_exactly_once::ItemKey;
    /// use futures::TryStreamExt;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Rating { stars: u8 }
    ///
    /// let keys = [ItemKey::partition("PK", "user#1")?, ItemKey::partition("PK", "user#2")?];
    /// let ratings: Vec<Rating> = ratchet.batch_get(&keys).try_collect().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn batch_get<'a, T: DeserializeOwned + 'a>(
        &'a self,
        keys: &'a [ItemKey],
    ) -> impl Stream<Item = Result<T, StoreError>> + 'a {
        stream::iter(keys.chunks(BATCH_GET_KEYS))
            .then(move |chunk| self.batch_get_keys(chunk))
            .flat_map(|chunk| {
                let decoded: Vec<Result<T, StoreError>> = match chunk {
                    Ok(items) => items.into_iter().map(decode).collect(),
                    Err(e) => vec![Err(e)],
                };
                stream::iter(decoded)
            })
    }

    /// The live items of at most [`BATCH_GET_KEYS`] keys.
    async fn batch_get_keys(&self, chunk: &[ItemKey]) -> Result<Vec<Item>, StoreError> {
        let mut request = KeysAndAttributes::builder().consistent_read(true);
        for key in chunk {
            request = request.keys(key.to_item()?);
        }
        let request = request
            .build()
            .map_err(|e| StoreError::Inconsistent(format!("batch get request: {e}")))?;
        self.batch_get_chunk(request).await
    }

    /// One chunk of keys until none is unprocessed; live items only.
    async fn batch_get_chunk(&self, request: KeysAndAttributes) -> Result<Vec<Item>, StoreError> {
        let table = &self.config.table;
        let mut live = Vec::new();
        let mut delays = UNPROCESSED_BACKOFF.delays();
        let mut pending = Some(request);
        let mut attempts = 0;
        while let Some(request) = pending.take() {
            attempts += 1;
            let resp = self
                .client
                .batch_get_item()
                .request_items(table, request)
                .send()
                .await
                .map_err(|e| StoreError::from_sdk("BatchGetItem", e))?;
            let items = resp.responses.unwrap_or_default().remove(table);
            for item in items.unwrap_or_default() {
                self.check_layout(&item)?;
                if !self.is_tombstone(&item) {
                    live.push(item);
                }
            }
            pending = resp.unprocessed_keys.and_then(|mut u| u.remove(table));
            if pending.is_some() {
                let Some(delay) = delays.next() else {
                    return Err(StoreError::Unprocessed {
                        operation: "BatchGetItem",
                        attempts,
                    });
                };
                tokio::time::sleep(delay).await;
            }
        }
        Ok(live)
    }

    /// The live items of one partition (`partition_key` = `value`) as `T`, streamed page by
    /// page as the SDK's paginator reads them (nothing is sent until the stream is polled);
    /// tombstones are filtered out by the query itself.
    ///
    /// ```no_run
    /// # async fn example(ratchet: dynamodb_exactly_once::ratchet::Ratchet) -> Result<(), Box<dyn std::error::Error>> {
    /// use futures::TryStreamExt;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Rating { stars: u8 }
    ///
    /// let mut ratings = std::pin::pin!(ratchet.query_partition::<Rating>("PK", &"user#1".into()));
    /// while let Some(rating) = ratings.try_next().await? {
    ///     println!("{} stars", rating.stars);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn query_partition<'a, T: DeserializeOwned + 'a>(
        &'a self,
        partition_key: &str,
        value: &Value,
    ) -> impl Stream<Item = Result<T, StoreError>> + 'a {
        let pk_value: Result<AttributeValue, StoreError> =
            crate::ddb::item::to_attribute_value(value)
                .map_err(<serde_dynamo::Error as serde::ser::Error>::custom)
                .map_err(StoreError::from);
        let pages = pk_value.map(|pk_value| {
            self.client
                .query()
                .table_name(&self.config.table)
                .key_condition_expression(KEY_CONDITION_PARTITION)
                .filter_expression(FILTER_LIVE)
                .expression_attribute_names("#pk", partition_key)
                .expression_attribute_names("#del", &self.config.deleted_attribute)
                .expression_attribute_values(":pk", pk_value)
                .expression_attribute_values(":true", AttributeValue::Bool(true))
                .consistent_read(true)
                .into_paginator()
                .items()
                .send()
        });
        stream::unfold(Some(pages), move |state| async move {
            match state? {
                Err(e) => Some((Err(e), None)),
                Ok(mut pages) => {
                    let item = pages.next().await?;
                    let decoded =
                        item.map_err(|e| StoreError::from_sdk("Query", e))
                            .and_then(|item| {
                                self.check_layout(&item)?;
                                decode(item)
                            });
                    Some((decoded, Some(Ok(pages))))
                }
            }
        })
    }
}
