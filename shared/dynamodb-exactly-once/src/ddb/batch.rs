//! `BatchWriteItem` puts of up to 25 items, sent again while DynamoDB leaves some unprocessed.

use aws_sdk_dynamodb::types::{ConsumedCapacity, PutRequest, ReturnConsumedCapacity, WriteRequest};
use aws_sdk_dynamodb::Client;

use super::retry::Backoff;
use super::{Cost, Item, StoreError};

/// Items per `BatchWriteItem` (DynamoDB's limit).
pub(crate) const BATCH_WRITE_ITEMS: usize = 25;

/// Waits before writing unprocessed items again.
const UNPROCESSED_BACKOFF: Backoff = Backoff::new(
    std::time::Duration::from_millis(50),
    std::time::Duration::from_millis(1600),
    8,
);

/// Put `items` (at most [`BATCH_WRITE_ITEMS`], distinct keys) into `table`, unconditionally.
/// On failure: the positions of the items not known to be written, and the error.
pub(crate) async fn put_items(
    client: &Client,
    table: &str,
    items: Vec<Item>,
    cost: &Cost,
) -> Result<(), (Vec<usize>, StoreError)> {
    let mut pending: Vec<(usize, WriteRequest)> = Vec::with_capacity(items.len());
    for (at, item) in items.into_iter().enumerate() {
        let put = PutRequest::builder()
            .set_item(Some(item))
            .build()
            .map_err(|e| {
                (
                    vec![at],
                    StoreError::Inconsistent(format!("put request: {e}")),
                )
            })?;
        pending.push((at, WriteRequest::builder().put_request(put).build()));
    }
    let mut delays = UNPROCESSED_BACKOFF.delays();
    let mut attempts = 0;
    while !pending.is_empty() {
        attempts += 1;
        let requests: Vec<WriteRequest> = pending.iter().map(|(_, r)| r.clone()).collect();
        let unprocessed = match send(client, table, requests, cost).await {
            Ok(unprocessed) => unprocessed,
            Err(err) => return Err((pending.iter().map(|(at, _)| *at).collect(), err)),
        };
        pending.retain(|(_, request)| unprocessed.contains(request));
        if pending.is_empty() {
            break;
        }
        let Some(delay) = delays.next() else {
            let err = StoreError::Unprocessed {
                operation: "BatchWriteItem",
                attempts,
            };
            return Err((pending.iter().map(|(at, _)| *at).collect(), err));
        };
        tokio::time::sleep(delay).await;
    }
    Ok(())
}

/// Put `items` (distinct keys, any number) into `table`, unconditionally, in `BatchWriteItem`s
/// of [`BATCH_WRITE_ITEMS`], one after another; the first failure stops it (the journal's
/// roll-up: its checkpoints and dead letters).
#[cfg(feature = "journal")]
pub(crate) async fn put_all(
    client: &Client,
    table: &str,
    items: Vec<Item>,
    cost: &Cost,
) -> Result<(), StoreError> {
    for chunk in items.chunks(BATCH_WRITE_ITEMS) {
        put_items(client, table, chunk.to_vec(), cost)
            .await
            .map_err(|(_, e)| e)?;
    }
    Ok(())
}

/// One `BatchWriteItem`: the unprocessed requests.
async fn send(
    client: &Client,
    table: &str,
    requests: Vec<WriteRequest>,
    cost: &Cost,
) -> Result<Vec<WriteRequest>, StoreError> {
    let result = client
        .batch_write_item()
        .request_items(table, requests)
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await;
    let out = result.map_err(|e| {
        cost.add_failed();
        StoreError::from_sdk("BatchWriteItem", e)
    })?;
    let units: f64 = out
        .consumed_capacity()
        .iter()
        .filter_map(|c| c.capacity_units)
        .sum();
    cost.add(Some(
        &ConsumedCapacity::builder().capacity_units(units).build(),
    ));
    Ok(out
        .unprocessed_items
        .and_then(|mut u| u.remove(table))
        .unwrap_or_default())
}

/// Keys per `BatchGetItem` (DynamoDB's limit).
pub(crate) const BATCH_GET_KEYS: usize = 100;

/// Read `keys` (table, key) with strongly consistent reads, in `BatchGetItem`s of up to 100
/// keys sent at once: the items in the order of `keys` (`None`: absent).
pub(crate) async fn get_items(
    client: &Client,
    keys: &[(&str, &Item)],
) -> Result<Vec<Option<Item>>, StoreError> {
    let chunks: Vec<_> = keys
        .chunks(BATCH_GET_KEYS)
        .enumerate()
        .map(|(n, chunk)| get_chunk(client, n * BATCH_GET_KEYS, chunk))
        .collect();
    let mut out = vec![None; keys.len()];
    for found in futures::future::join_all(chunks).await {
        for (at, item) in found? {
            out[at] = Some(item);
        }
    }
    Ok(out)
}

/// An item's identity: its table and the values of `key`'s attributes in it.
fn identity(table: &str, key_names: &[&String], item: &Item) -> String {
    let mut id = table.to_string();
    for name in key_names {
        id.push('\u{0}');
        id.push_str(&format!("{:?}", item.get(*name)));
    }
    id
}

/// One chunk (positions from `first`) until nothing is unprocessed: (position, item) found.
async fn get_chunk(
    client: &Client,
    first: usize,
    chunk: &[(&str, &Item)],
) -> Result<Vec<(usize, Item)>, StoreError> {
    use aws_sdk_dynamodb::types::KeysAndAttributes;
    use std::collections::HashMap;
    let mut requests: HashMap<String, Vec<Item>> = HashMap::new();
    let mut wanted: HashMap<String, usize> = HashMap::new();
    let mut names: HashMap<String, Vec<&String>> = HashMap::new();
    for (at, (table, key)) in chunk.iter().enumerate() {
        let mut key_names: Vec<&String> = key.keys().collect();
        key_names.sort();
        wanted.insert(identity(table, &key_names, key), first + at);
        names.insert((*table).to_string(), key_names);
        requests
            .entry((*table).to_string())
            .or_default()
            .push((*key).clone());
    }
    let mut pending: HashMap<String, KeysAndAttributes> = HashMap::new();
    for (table, keys) in requests {
        let request = KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .consistent_read(true)
            .build()
            .map_err(|e| StoreError::Inconsistent(format!("batch get request: {e}")))?;
        pending.insert(table, request);
    }
    let mut found = Vec::new();
    let mut delays = UNPROCESSED_BACKOFF.delays();
    let mut attempts = 0;
    while !pending.is_empty() {
        attempts += 1;
        let out = client
            .batch_get_item()
            .set_request_items(Some(std::mem::take(&mut pending)))
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("BatchGetItem", e))?;
        for (table, items) in out.responses.unwrap_or_default() {
            let key_names = names.get(&table).cloned().unwrap_or_default();
            for item in items {
                if let Some(at) = wanted.get(&identity(&table, &key_names, &item)) {
                    found.push((*at, item));
                }
            }
        }
        pending = out.unprocessed_keys.unwrap_or_default();
        if pending.is_empty() {
            break;
        }
        let Some(delay) = delays.next() else {
            return Err(StoreError::Unprocessed {
                operation: "BatchGetItem",
                attempts,
            });
        };
        tokio::time::sleep(delay).await;
    }
    Ok(found)
}
