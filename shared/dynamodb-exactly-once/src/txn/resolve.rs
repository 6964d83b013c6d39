//! Resolving requests to item keys: each table's key schema (`DescribeTable`, cached: names,
//! types), the item key of every request checked against it, and the global lock order.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use super::request::TxRequest;
use super::{Coordinator, TxError};
use crate::ddb::error::StoreError;
use crate::ddb::item::{Item, ItemKey};
use crate::ddb::schema::KeySchema;
use crate::rejection::{Rejection, RejectionCode};

/// A request with its resolved item key.
#[derive(Debug, Clone)]
pub(super) struct Resolved {
    /// The request's index in its message.
    pub(super) index: usize,
    pub(super) request: TxRequest,
    /// The item key as attribute values.
    pub(super) key: Item,
    /// The table's first key attribute (for `attribute_not_exists`).
    pub(super) key_attribute: String,
    /// The place in the global lock order: table, canonical key.
    pub(super) order: (String, String),
}

impl Coordinator {
    /// A table's key schema (names and types, hash first), from `DescribeTable`, cached per
    /// coordinator (not process-wide like the writers': each coordinator describes its tables
    /// once, which the crash-point tests count as calls).
    async fn key_schema(&self, table: &str) -> Result<Arc<KeySchema>, StoreError> {
        if let Ok(cache) = self.key_schemas.lock() {
            if let Some(schema) = cache.get(table) {
                return Ok(Arc::clone(schema));
            }
        }
        let schema = Arc::new(KeySchema::describe(&self.client, table).await?);
        if let Ok(mut cache) = self.key_schemas.lock() {
            cache.insert(table.to_string(), Arc::clone(&schema));
        }
        Ok(schema)
    }

    /// Resolve every request's item key; two requests on one item are refused, and so is a
    /// key the table would refuse (its type, its size, a binary-keyed table): before any
    /// write, so nothing is left that a read of the key would fail on.
    pub(super) async fn resolve(&self, requests: &[TxRequest]) -> Result<Vec<Resolved>, TxError> {
        let mut out = Vec::with_capacity(requests.len());
        let mut seen = BTreeSet::new();
        for (index, request) in requests.iter().enumerate() {
            let resolved = self.resolve_one(index, request).await?;
            if !seen.insert(resolved.order.clone()) {
                return Err(TxError::Rejected(Rejection::new(
                    RejectionCode::DuplicateItem,
                    format!("request {index}: another request already names this item"),
                )));
            }
            out.push(resolved);
        }
        Ok(out)
    }

    /// The requests of a recorded transaction, resolved to finish it: a request whose key the
    /// table refuses is left out (no lock can be on it: every write of that key is refused),
    /// and the check for two requests on one item is not made again (the record was accepted
    /// under the rules of its time; its locks are on the keys it resolved to).
    /// Also returns the first refused request's index and why it is refused.
    pub(super) async fn resolve_recorded(
        &self,
        tx_id: &str,
        requests: &[TxRequest],
    ) -> Result<(Vec<Resolved>, Option<(usize, Rejection)>), TxError> {
        let mut out = Vec::with_capacity(requests.len());
        let mut refused = None;
        for (index, request) in requests.iter().enumerate() {
            match self.resolve_one(index, request).await {
                Ok(resolved) => out.push(resolved),
                Err(TxError::Rejected(why)) => {
                    tracing::warn!(tx_id, request = index, rejection = %why,
                        "a recorded request names a key the table refuses: no lock to finish there");
                    refused = refused.or(Some((index, why)));
                }
                Err(other) => return Err(other),
            }
        }
        Ok((out, refused))
    }

    async fn resolve_one(&self, index: usize, request: &TxRequest) -> Result<Resolved, TxError> {
        let invalid_key = |m: String| {
            TxError::Rejected(Rejection::new(
                RejectionCode::InvalidKey,
                format!("request {index}: {m}"),
            ))
        };
        let schema = self.key_schema(&request.table).await?;
        let names = schema.names();
        let key_json = request.key_json(&names).map_err(invalid_key)?;
        let key =
            ItemKey::from_json(&Value::Object(key_json)).map_err(|e| invalid_key(e.into()))?;
        schema.check(&key).map_err(invalid_key)?;
        Ok(Resolved {
            index,
            request: request.clone(),
            order: (request.table.clone(), key.canonical().to_string()),
            key: key.to_item().map_err(StoreError::from)?,
            key_attribute: names.first().cloned().unwrap_or_default(),
        })
    }

    /// The item of a request (strongly consistent).
    pub(super) async fn get_item(&self, r: &Resolved) -> Result<Option<Item>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&r.request.table)
            .set_key(Some(r.key.clone()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        Ok(out.item)
    }
}

/// A resolved request on table `Accounts`, item `{"PK":"a"}`, for unit tests of the writes.
#[cfg(test)]
pub(crate) fn resolved_for_test(request: Value) -> Resolved {
    use crate::txn::request::parse_message;
    let body = serde_json::json!({"txId":"t","requests":[request]});
    let allowed = BTreeSet::from(["Accounts".to_string()]);
    let mut message = parse_message(body.to_string().as_bytes(), &allowed).expect("valid");
    Resolved {
        index: 0,
        request: message.requests.remove(0),
        key: Item::from([(
            "PK".to_string(),
            aws_sdk_dynamodb::types::AttributeValue::S("a".into()),
        )]),
        key_attribute: "PK".into(),
        order: ("Accounts".into(), "{\"PK\":\"a\"}".into()),
    }
}
