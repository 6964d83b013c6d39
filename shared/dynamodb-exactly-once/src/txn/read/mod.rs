//! Reads at three isolation levels.
//!
//! | level | a locked item reads as | cost |
//! |---|---|---|
//! | [`Isolation::Uncommitted`] | its current value (a pending `Delete` or a transient item reads as absent) | 1 read |
//! | [`Isolation::Committed`] | its saved image (under a keep lock, a check's or a pending delete's, its value), unless its holder committed with this item's token (then the new value) | 1 read, + 1 when locked |
//! | [`Isolation::Locked`] | a consistent snapshot of several items: one `TransactGetItems` when none is locked (up to 100 items, 4 MB), else taken under a lock (a read-only transaction of `ConditionCheck`s) | 1 read (2 read units per 4 KB per item); under a lock, a transaction (2N + 3 writes) |
//!
//! A committed read never returns a change that is not committed: the new value is returned
//! only when the holder's TX record says `committed` *and* lists the item's token (invariant 5
//! of the module docs: other locks of the holder are orphans whose change is undone).

mod snapshot;

use crate::txn::format::{ATTR_DELETE, ATTR_IMAGE, ATTR_TRANSIENT};
use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use aws_sdk_dynamodb::types::AttributeValue;

use super::item::{flag, lock_of, new_token, token_of};
use super::lock::LockPhase;
use super::record::{keeps_values, lock_value, parse_owner, RollbackReason, TxHeader, TxState};
use super::request::{Operation, TxMessage, TxRequest};
use super::resolve::Resolved;
use super::{plain_json, Coordinator, Cost, TxError};
use crate::batch::Deadline;
use crate::ddb::error::StoreError;
use crate::ddb::item::{Item, ItemKey};

/// How many lock patiences ([`TxConfig::lock_patience`](super::TxConfig::lock_patience)) a
/// locked read may spend locking its items before it gives up (`Contention`, retryable): 4 s
/// with the default patience.
pub(crate) const READ_PATIENCES: u32 = 4;

/// How a read treats items locked by a transaction.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Whatever is stored now (changes of undecided transactions included).
    Uncommitted,
    /// Only committed values.
    Committed,
    /// Under a lock (a read-only transaction).
    Locked,
}

/// The value a locked item would have if its holder's change stays: none for a pending
/// `Delete` or a transient item.
fn new_value(item: Item) -> Result<Option<Map<String, Value>>, StoreError> {
    if flag(&item, ATTR_DELETE) || flag(&item, ATTR_TRANSIENT) {
        Ok(None)
    } else {
        Ok(Some(plain_json(item)?))
    }
}

/// A read-only transaction of `ConditionCheck`s that always hold, one per key.
fn read_message(keys: &[(String, Map<String, Value>)]) -> TxMessage {
    let mut raw = Vec::with_capacity(keys.len());
    let mut requests = Vec::with_capacity(keys.len());
    for (table, key) in keys {
        let first = key.keys().next().cloned().unwrap_or_default();
        let names = BTreeMap::from([("#k".to_string(), first)]);
        let condition = "attribute_exists(#k) OR attribute_not_exists(#k)".to_string();
        raw.push(json!({"ConditionCheck":{"TableName":table,"Key":key,
            "ConditionExpression":condition,"ExpressionAttributeNames":names}}));
        requests.push(TxRequest {
            table: table.clone(),
            op: Operation::ConditionCheck { key: key.clone() },
            condition_expression: Some(condition),
            names,
            values: Map::new(),
        });
    }
    TxMessage {
        tx_id: format!("read-{}", new_token()),
        requests,
        raw_requests: raw,
        issued_at_ms: None,
    }
}

impl Coordinator {
    /// Read one item of `table` by `key` (plain JSON) at the given isolation level; protocol
    /// attributes are removed. `None`: absent (or, uncommitted, deleted by a pending change).
    pub async fn read(
        &self,
        table: &str,
        key: &Map<String, Value>,
        isolation: Isolation,
    ) -> Result<Option<Map<String, Value>>, TxError> {
        if isolation == Isolation::Locked {
            let mut out = self
                .read_locked(&[(table.to_string(), key.clone())])
                .await?;
            return Ok(out.pop().flatten());
        }
        let Some(item) = self.get_by_json_key(table, key).await? else {
            return Ok(None);
        };
        let Some(lock) = lock_of(&item).map(String::from) else {
            return Ok(Some(plain_json(item)?));
        };
        if isolation == Isolation::Uncommitted || self.holder_committed(&lock, &item).await? {
            return Ok(new_value(item)?);
        }
        match item.get(ATTR_IMAGE) {
            Some(AttributeValue::M(image)) => Ok(Some(plain_json(image.clone())?)),
            // A lock that left the values as they were (a check, a pending delete).
            _ if keeps_values(&lock) && !flag(&item, ATTR_TRANSIENT) => Ok(Some(plain_json(item)?)),
            _ => Ok(None),
        }
    }

    /// The item of `table` with the key `key` (plain JSON), strongly consistent.
    async fn get_by_json_key(
        &self,
        table: &str,
        key: &Map<String, Value>,
    ) -> Result<Option<Item>, StoreError> {
        let item_key = ItemKey::from_json(&Value::Object(key.clone()))
            .map_err(|m| StoreError::Inconsistent(format!("read key: {m}")))?;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .set_key(Some(item_key.to_item()?))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        Ok(out.item)
    }

    /// Whether the holder of `lock` committed `item`'s change: its current attempt, decided
    /// `committed` (completed or not: the header keeps its commit tokens), with this item's
    /// token among its commit tokens.
    ///
    /// The header is read after the item. If the holder completed in between, the item
    /// read still shows the lock, and the change is committed: answering from the header's
    /// decision rather than from its state keeps committed reads monotonic (an earlier
    /// read may already have returned the new value).
    async fn holder_committed(&self, lock: &str, item: &Item) -> Result<bool, StoreError> {
        let Some((tx_id, attempt)) = parse_owner(lock) else {
            return Ok(false);
        };
        let Some(h) = self.tx.get(tx_id).await? else {
            return Ok(false);
        };
        Ok(h.attempt == attempt
            && h.decision() == Some(TxState::Committed)
            && token_of(item).is_some_and(|t| h.tokens.values().any(|v| v == t)))
    }

    /// Read several items together as one snapshot: one `TransactGetItems` when none of them
    /// is locked (see `read/snapshot.rs`), else under locks: a read-only transaction of
    /// `ConditionCheck` requests, released (rolled back) once read. The values are a consistent snapshot: each
    /// is read while the item still carries this read's lock (so it is the item's state at
    /// the lock, unchanged since); when a contender took a lock over meanwhile (it rolled the
    /// silent read back after its patience), the read ends in [`TxError::Contention`]
    /// (retryable) rather than mixing states; so does a read that could not lock its items
    /// within four lock patiences (4 s with the default patience).
    pub async fn read_locked(
        &self,
        keys: &[(String, Map<String, Value>)],
    ) -> Result<Vec<Option<Map<String, Value>>>, TxError> {
        if let Some(values) = self.read_snapshot(keys).await? {
            return Ok(values);
        }
        let message = read_message(keys);
        let cost = Cost::default();
        let resolved = self.resolve(&message.requests).await?;
        let header = self
            .tx
            .create(&message.tx_id, &message.requests_json(), None, &cost)
            .await?
            .into_header();
        // Bounded: a read that cannot lock its items within a few patiences (holders that
        // stay alive, writes refused by conflicts) gives up, released, as `Contention`.
        let bound = Deadline::after(self.config.lock_patience * READ_PATIENCES);
        let phase = self
            .lock_all(&header, &resolved, None, &cost, bound)
            .await?;
        let values = match phase {
            LockPhase::Locked(_) => {
                let lock = lock_value(&header.owner(), true);
                self.read_held(&lock, &resolved).await?
            }
            _ => None,
        };
        self.release(&header, &resolved, &cost).await?;
        values.ok_or(TxError::Contention {
            tx_id: header.tx_id,
            attempts: 1,
        })
    }

    /// The values of items this read holds under `owner`'s locks (a transient item reads as
    /// absent); `None` once an item no longer carries the lock (taken over: its value may be
    /// later than the others').
    async fn read_held(
        &self,
        owner: &str,
        resolved: &[Resolved],
    ) -> Result<Option<Vec<Option<Map<String, Value>>>>, StoreError> {
        let mut values = Vec::with_capacity(resolved.len());
        for r in resolved {
            let Some(item) = self.get_item(r).await? else {
                return Ok(None); // a locked item always exists (a transient one if absent)
            };
            if lock_of(&item) != Some(owner) {
                return Ok(None);
            }
            values.push(match flag(&item, ATTR_TRANSIENT) {
                true => None,
                false => Some(plain_json(item)?),
            });
        }
        Ok(Some(values))
    }

    /// Release a read: it changes nothing, so it ends as a rollback (final reason `read`).
    async fn release(
        &self,
        header: &TxHeader,
        resolved: &[Resolved],
        cost: &Cost,
    ) -> Result<(), StoreError> {
        let transition = self
            .roll_back(header, RollbackReason::Read, None, cost)
            .await?;
        let decided = self.header_after(transition, &header.tx_id).await?;
        self.complete(&decided, resolved, cost).await?;
        Ok(())
    }
}
