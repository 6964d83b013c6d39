//! A table's real key schema (names and types, from `DescribeTable`, once per process), so
//! that a record whose key the table would refuse is a dead letter (`invalid_key`, with its
//! reason) before anything is written for it. Every writer checks its records against it
//! (`split_fitting`): the ratchet, the counter (both modes), the document writer and
//! versioned writes. A writer that does not write the item itself (the counter's journal)
//! would otherwise accept a record no later step can apply; the others would spend a call
//! and get `rejected_by_dynamodb` (or a whole failed batch write) instead of the reason.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use aws_sdk_dynamodb::types::{KeyType, ScalarAttributeType};
use aws_sdk_dynamodb::Client;
use serde_json::Value;

use super::{ItemKey, StoreError};
use crate::text::quote;

/// DynamoDB's limits on key values (bytes): a partition key, a sort key.
const MAX_PARTITION_KEY_BYTES: usize = 2048;
const MAX_SORT_KEY_BYTES: usize = 1024;

/// The key attributes of a table: the partition key, then the sort key if any.
#[derive(Debug, Clone, PartialEq)]
pub struct KeySchema {
    table: String,
    attributes: Vec<(String, ScalarAttributeType)>,
}

impl KeySchema {
    /// The schema of `table`.
    pub async fn describe(client: &Client, table: &str) -> Result<KeySchema, StoreError> {
        let out = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("DescribeTable", e))?;
        let description = out
            .table()
            .ok_or_else(|| StoreError::Inconsistent(format!("table {table}: no description")))?;
        let kind = |name: &str| {
            description
                .attribute_definitions()
                .iter()
                .find(|d| d.attribute_name() == name)
                .map(|d| d.attribute_type().clone())
        };
        let mut attributes = Vec::new();
        for wanted in [KeyType::Hash, KeyType::Range] {
            for element in description.key_schema() {
                if *element.key_type() == wanted {
                    let name = element.attribute_name();
                    let t = kind(name).ok_or_else(|| {
                        StoreError::Inconsistent(format!("table {table}: key {name} has no type"))
                    })?;
                    attributes.push((name.to_string(), t));
                }
            }
        }
        Ok(KeySchema {
            table: table.to_string(),
            attributes,
        })
    }

    /// The key attributes and their types: the partition key, then the sort key if any.
    pub fn attributes(&self) -> &[(String, ScalarAttributeType)] {
        &self.attributes
    }

    /// The key attribute names: the partition key, then the sort key if any.
    pub fn names(&self) -> Vec<String> {
        self.attributes.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Why the table would refuse `key`, if it would.
    pub fn check(&self, key: &ItemKey) -> Result<(), String> {
        let json = key.json();
        let names: Vec<&str> = self.attributes.iter().map(|(n, _)| n.as_str()).collect();
        let fits = json.len() == names.len() && names.iter().all(|n| json.contains_key(*n));
        if !fits {
            let given: Vec<String> = json.keys().map(|k| quote(k)).collect();
            let wanted: Vec<String> = names.iter().map(|k| quote(k)).collect();
            return Err(format!(
                "the key names {} but table {} is keyed by {}",
                given.join(", "),
                self.table,
                wanted.join(", ")
            ));
        }
        for (at, (name, kind)) in self.attributes.iter().enumerate() {
            let value = json.get(name).unwrap_or(&Value::Null);
            let limit = if at == 0 {
                MAX_PARTITION_KEY_BYTES
            } else {
                MAX_SORT_KEY_BYTES
            };
            match (kind, value) {
                (ScalarAttributeType::S, Value::String(s)) if s.len() > limit => {
                    return Err(format!(
                        "key attribute {} is {} bytes; DynamoDB allows {limit}",
                        quote(name),
                        s.len()
                    ))
                }
                (ScalarAttributeType::S, Value::String(_))
                | (ScalarAttributeType::N, Value::Number(_)) => {}
                (kind, value) => {
                    let given = match value {
                        Value::String(_) => "a string",
                        Value::Number(_) => "a number",
                        _ => "another type",
                    };
                    return Err(format!(
                        "key attribute {} is {given}; table {} has it as {}",
                        quote(name),
                        self.table,
                        kind.as_str()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The key schemas described in this process, by table name: each table is described once
/// per cold start, whichever writers use it.
static SCHEMAS: OnceLock<Mutex<HashMap<String, Arc<KeySchema>>>> = OnceLock::new();

/// The key schema of `table`, described on first use in this process (a failed description
/// is tried again on the next call). A writer calls it before its first batch's writes; a
/// caller may call it earlier (at start-up) to keep the `DescribeTable` out of the first
/// invocation's time.
pub async fn key_schema(client: &Client, table: &str) -> Result<Arc<KeySchema>, StoreError> {
    let known = SCHEMAS.get_or_init(Mutex::default);
    if let Some(schema) = known.lock().unwrap_or_else(|p| p.into_inner()).get(table) {
        return Ok(Arc::clone(schema));
    }
    let schema = Arc::new(KeySchema::describe(client, table).await?);
    known
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(table.to_string(), Arc::clone(&schema));
    Ok(schema)
}

/// `records` split by the table's key schema: those whose key fits, and the others as
/// `refuse(reason)`; when the table cannot be described, every record as `fail(error)` (the
/// description is tried again on the next batch).
pub(crate) async fn split_fitting<R, T>(
    client: &Client,
    table: &str,
    records: Vec<(usize, R)>,
    key: impl Fn(&R) -> &ItemKey,
    refuse: impl Fn(String) -> T,
    fail: impl Fn(Arc<StoreError>) -> T,
) -> (Vec<(usize, R)>, Vec<(usize, T)>) {
    if records.is_empty() {
        return (records, Vec::new());
    }
    let schema = match key_schema(client, table).await {
        Ok(schema) => schema,
        Err(err) => {
            let err = Arc::new(err);
            let failed = records
                .into_iter()
                .map(|(i, _)| (i, fail(Arc::clone(&err))));
            return (Vec::new(), failed.collect());
        }
    };
    let mut fitting = Vec::with_capacity(records.len());
    let mut refused = Vec::new();
    for (i, record) in records {
        match schema.check(key(&record)) {
            Ok(()) => fitting.push((i, record)),
            Err(reason) => refused.push((i, refuse(reason))),
        }
    }
    (fitting, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(attributes: &[(&str, ScalarAttributeType)]) -> KeySchema {
        KeySchema {
            table: "t".into(),
            attributes: attributes
                .iter()
                .map(|(n, t)| (n.to_string(), t.clone()))
                .collect(),
        }
    }

    #[test]
    fn a_key_is_checked_against_names_types_and_sizes() {
        let pk_sk = schema(&[
            ("PK", ScalarAttributeType::S),
            ("SK", ScalarAttributeType::N),
        ]);
        let key = |v: serde_json::Value| ItemKey::from_json(&v).expect("key");
        assert!(pk_sk
            .check(&key(serde_json::json!({"PK": "a", "SK": 1})))
            .is_ok());
        let missing = pk_sk.check(&key(serde_json::json!({"PK": "a"})));
        assert!(missing.is_err_and(|e| e.contains("keyed by")));
        let typed = pk_sk.check(&key(serde_json::json!({"PK": "a", "SK": "x"})));
        assert!(typed.is_err_and(|e| e.contains("has it as N")));
        let long = "x".repeat(1025);
        let sort = schema(&[
            ("PK", ScalarAttributeType::S),
            ("SK", ScalarAttributeType::S),
        ]);
        let sized = sort.check(&key(serde_json::json!({"PK": "a", "SK": long})));
        assert!(sized.is_err_and(|e| e.contains("1024")));
        let binary = schema(&[("PK", ScalarAttributeType::B)]);
        assert!(binary.check(&key(serde_json::json!({"PK": "a"}))).is_err());
    }
}
