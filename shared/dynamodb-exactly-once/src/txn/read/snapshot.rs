//! A locked read without locks: one `TransactGetItems` of up to [`SNAPSHOT_MAX_ITEMS`] items.
//!
//! `TransactGetItems` reads its items at one point, serialized with every transactional and
//! plain write. When none of them carries `_txLock`, each holds committed state: a
//! fast-path write (atomic), a lock-path change finalized after its commit, or a value no
//! transaction is changing. And the set is consistent: a lock-path transaction's items are all
//! still before it (none locked yet) or all after it (all finalized or undone), since it locks
//! every item before its decision and unlocks none before it. So the values are the snapshot
//! a locked read returns, for 0 writes and one round trip (the lock path pays 2N + 3 writes
//! and a record kept 15 days). A locked item, a read cancelled by a write in flight
//! (`TransactionConflict`), or one refused as a whole (an answer over 4 MB), falls back to the
//! lock-based read.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{Get, TransactGetItem};
use serde_json::{Map, Value};

use crate::ddb::error::{ErrorClass, StoreError};
use crate::ddb::item::ItemKey;
use crate::txn::item::lock_of;
use crate::txn::{plain_json, Coordinator};

/// Most items `TransactGetItems` reads in one call.
pub(super) const SNAPSHOT_MAX_ITEMS: usize = 100;

/// Values of a locked read, one per key (`None`: absent).
type Values = Vec<Option<Map<String, Value>>>;

impl Coordinator {
    /// The keys' committed values as one snapshot, if no item is locked and DynamoDB did not
    /// cancel the read; `None`: take the lock-based read.
    pub(super) async fn read_snapshot(
        &self,
        keys: &[(String, Map<String, Value>)],
    ) -> Result<Option<Values>, StoreError> {
        if keys.is_empty() || keys.len() > SNAPSHOT_MAX_ITEMS {
            return Ok(None);
        }
        let mut gets = Vec::with_capacity(keys.len());
        for (table, key) in keys {
            let key = ItemKey::from_json(&Value::Object(key.clone()))
                .map_err(|m| StoreError::Inconsistent(format!("read key: {m}")))?;
            let get = Get::builder()
                .table_name(table)
                .set_key(Some(key.to_item()?))
                .build()
                .map_err(|e| StoreError::Inconsistent(format!("snapshot read: {e}")))?;
            gets.push(TransactGetItem::builder().get(get).build());
        }
        let result = self
            .client
            .transact_get_items()
            .set_transact_items(Some(gets))
            .send()
            .await;
        let out = match result {
            Ok(out) => out,
            // Cancelled (a write in flight on an item): the lock-based read waits it out.
            Err(SdkError::ServiceError(e)) if e.err().is_transaction_canceled_exception() => {
                return Ok(None)
            }
            Err(e) => {
                let err = StoreError::from_sdk("TransactGetItems", e);
                // Refused as a whole (an answer over 4 MB): the lock-based read takes it.
                if err.class() == ErrorClass::InvalidRequest {
                    return Ok(None);
                }
                return Err(err);
            }
        };
        let responses = out.responses.unwrap_or_default();
        if responses.len() != keys.len() {
            return Err(StoreError::Inconsistent(format!(
                "TransactGetItems answered {} of {} items",
                responses.len(),
                keys.len()
            )));
        }
        let mut values = Vec::with_capacity(keys.len());
        for response in responses {
            match response.item {
                Some(item) if lock_of(&item).is_some() => return Ok(None),
                Some(item) => values.push(Some(plain_json(item)?)),
                None => values.push(None),
            }
        }
        Ok(Some(values))
    }
}
