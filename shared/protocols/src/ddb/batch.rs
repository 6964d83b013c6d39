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
