//! Resolving requests to item keys: each table's key schema (`DescribeTable`, cached), the
//! item key of every request, and the global lock order.

use std::collections::BTreeSet;

use aws_sdk_dynamodb::types::KeyType;
use serde_json::Value;

use super::request::TxRequest;
use super::{Coordinator, TxError};
use crate::ddb::error::StoreError;
use crate::ddb::item::{Item, ItemKey};
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
    /// The key attribute names of a table (hash first), from `DescribeTable`, cached.
    async fn key_names(&self, table: &str) -> Result<Vec<String>, StoreError> {
        if let Ok(cache) = self.key_schemas.lock() {
            if let Some(names) = cache.get(table) {
                return Ok(names.clone());
            }
        }
        let out = self
            .client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("DescribeTable", e))?;
        let schema = out
            .table
            .and_then(|t| t.key_schema)
            .ok_or_else(|| StoreError::Inconsistent(format!("table {table}: no key schema")))?;
        let mut names: Vec<(bool, String)> = schema
            .into_iter()
            .map(|k| (k.key_type != KeyType::Hash, k.attribute_name))
            .collect();
        names.sort();
        let names: Vec<String> = names.into_iter().map(|(_, n)| n).collect();
        if let Ok(mut cache) = self.key_schemas.lock() {
            cache.insert(table.to_string(), names.clone());
        }
        Ok(names)
    }

    /// Resolve every request's item key; two requests on one item are refused.
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

    async fn resolve_one(&self, index: usize, request: &TxRequest) -> Result<Resolved, TxError> {
        let invalid_key = |m: String| {
            TxError::Rejected(Rejection::new(
                RejectionCode::InvalidKey,
                format!("request {index}: {m}"),
            ))
        };
        let names = self.key_names(&request.table).await?;
        let key_json = request.key_json(&names).map_err(invalid_key)?;
        let key =
            ItemKey::from_json(&Value::Object(key_json)).map_err(|e| invalid_key(e.into()))?;
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
