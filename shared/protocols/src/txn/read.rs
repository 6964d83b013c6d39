//! Reads at three isolation levels.
//!
//! | level | a locked item reads as | cost |
//! |---|---|---|
//! | [`Isolation::Uncommitted`] | its current value (a pending `Delete` or a transient item reads as absent) | 1 read |
//! | [`Isolation::Committed`] | its saved image, unless its holder committed with this item's token (then the new value) | 1 read, + 1 when locked |
//! | [`Isolation::Locked`] | taken under a lock: a read-only transaction of `ConditionCheck`s, so several items read together are a consistent snapshot | a transaction (2N + 3 writes) |
//!
//! A committed read never returns a change that is not committed: the new value is returned
//! only when the holder's TX record says `committed` *and* lists the item's token (invariant 5
//! of the module docs: other locks of the holder are orphans whose change is undone).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::record::{parse_owner, reason, TxState};
use super::request::{RequestKind, TxMessage, TxRequest};
use super::{
    flag, lock_of, new_token, plain_json, token_of, Coordinator, Cost, LockPhase, TxError,
    ATTR_DELETE, ATTR_IMAGE, ATTR_TRANSIENT,
};
use crate::batch::Deadline;
use crate::ddb::error::StoreError;
use crate::ddb::item::{Item, ItemKey};

/// How a read treats items locked by a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Whatever is stored now (changes of undecided transactions included).
    Uncommitted,
    /// Only committed values.
    Committed,
    /// Under a lock (a read-only transaction).
    Locked,
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
        let item_key = ItemKey::from_json(&Value::Object(key.clone()))
            .map_err(|m| StoreError::Inconsistent(format!("read key: {m}")))?;
        let item = self
            .client
            .get_item()
            .table_name(table)
            .set_key(Some(item_key.to_item().map_err(StoreError::from)?))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?
            .item;
        let Some(item) = item else {
            return Ok(None);
        };
        let Some(lock) = lock_of(&item).map(String::from) else {
            return Ok(Some(plain_json(item)?));
        };
        let new_value = |item: Item| -> Result<Option<Map<String, Value>>, TxError> {
            if flag(&item, ATTR_DELETE) || flag(&item, ATTR_TRANSIENT) {
                Ok(None)
            } else {
                Ok(Some(plain_json(item)?))
            }
        };
        match isolation {
            Isolation::Uncommitted | Isolation::Locked => new_value(item),
            Isolation::Committed => {
                let committed = match parse_owner(&lock) {
                    Some((tx_id, attempt)) => match self.tx.get(tx_id).await? {
                        Some(h) => {
                            h.attempt == attempt
                                && h.decision() == Some(TxState::Committed)
                                && h.state != TxState::Completed
                                && token_of(&item)
                                    .is_some_and(|t| h.tokens.values().any(|v| v == t))
                        }
                        None => false,
                    },
                    None => false,
                };
                if committed {
                    return new_value(item);
                }
                match item.get(ATTR_IMAGE) {
                    Some(aws_sdk_dynamodb::types::AttributeValue::M(image)) => {
                        Ok(Some(plain_json(image.clone())?))
                    }
                    _ => Ok(None),
                }
            }
        }
    }

    /// Read several items together under locks: a read-only transaction of `ConditionCheck`
    /// requests, released (rolled back) once read. The values are a consistent snapshot.
    pub async fn read_locked(
        &self,
        keys: &[(String, Map<String, Value>)],
    ) -> Result<Vec<Option<Map<String, Value>>>, TxError> {
        let tx_id = format!("read-{}", new_token("read", keys.len()));
        let mut raw = Vec::with_capacity(keys.len());
        let mut requests = Vec::with_capacity(keys.len());
        for (table, key) in keys {
            let first = key.keys().next().cloned().unwrap_or_default();
            let names = BTreeMap::from([("#k".to_string(), first)]);
            let condition = "attribute_exists(#k) OR attribute_not_exists(#k)".to_string();
            raw.push(json!({"ConditionCheck":{"TableName":table,"Key":key,
                "ConditionExpression":condition,"ExpressionAttributeNames":names}}));
            requests.push(TxRequest {
                kind: RequestKind::ConditionCheck,
                table: table.clone(),
                key: Some(key.clone()),
                item: None,
                update_expression: None,
                condition_expression: Some(condition),
                names,
                values: Map::new(),
            });
        }
        let message = TxMessage {
            tx_id,
            requests,
            raw_requests: raw,
        };
        let cost = Cost::default();
        let resolved = self.resolve(&message.requests).await?;
        let header = match self
            .tx
            .create(
                &message.tx_id,
                &message.requests_json(),
                message.requests.len(),
                &cost,
            )
            .await?
        {
            Ok(h) | Err(h) => h,
        };
        let phase = self
            .lock_all(&header, &resolved, &cost, Deadline::none())
            .await?;
        let mut values = Vec::with_capacity(resolved.len());
        if let Some(LockPhase::Locked(_)) = phase {
            for r in &resolved {
                values.push(match self.get_item(r).await? {
                    Some(item) if !flag(&item, ATTR_TRANSIENT) => Some(plain_json(item)?),
                    _ => None,
                });
            }
        }
        // Release: a read changes nothing, so it ends as a rollback (final reason `read`).
        let decided = match self.roll_back(&header, reason::READ, None, &cost).await? {
            Ok(h) | Err(Some(h)) => h,
            Err(None) => self.reload(&header.tx_id).await?,
        };
        self.complete(&decided, &resolved, &cost).await?;
        if values.len() != resolved.len() {
            return Err(TxError::Contention {
                tx_id: header.tx_id,
                attempts: 1,
            });
        }
        Ok(values)
    }
}
