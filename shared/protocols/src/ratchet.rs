//! Timestamp ratchet writes: the table converges to the newest state whatever the delivery did.
//!
//! # Invariant
//!
//! For every item key, the stored item is the record with the greatest *version* among all
//! records ever delivered for that key, where a record's version is the pair
//! `(timestamp, tie-break token)`. The final table is therefore a function of the **set** of
//! delivered records: independent of order, duplication and batch boundaries.
//!
//! * The timestamp is the record's own client-side integer token (epoch ms or any monotonic
//!   counter); a retry or hedged write carries the first attempt's value.
//! * The tie-break token decides between two different records with the same key and the same
//!   timestamp: a delete (`"1"`) beats any put, and between puts the greater SHA-256 of the
//!   canonical stored item wins (`"0" + hex`). Tokens are compared as strings, identically in
//!   Rust (coalescing) and in DynamoDB (the condition).
//!
//! # Writes
//!
//! Every write is one conditional `PutItem` with [`CONDITION_NEWER`]:
//!
//! ```text
//! attribute_not_exists(ts) OR ts < :ts OR (ts = :ts AND (attribute_not_exists(tb) OR tb < :tb))
//! ```
//!
//! which is the pattern's `attribute_not_exists(ts) OR :ts >= ts`, made strict on exact equality
//! so that a redelivered record is recognised as a `Duplicate` rather than rewritten. A put
//! replaces the whole item. A delete writes a **tombstone**: the key, the timestamp, the token,
//! `Deleted = true` and a TTL (epoch seconds, default now + 7 days), nothing else; a newer put
//! replaces it, an older put cannot revive the item. A lost race is an outcome (`Stale`, or
//! `Duplicate` when the stored version is exactly ours, learned from
//! `ReturnValuesOnConditionCheckFailure=ALL_OLD` without a read), never an error.
//!
//! # Coalescing
//!
//! Within a batch, records are grouped by item key; only the group's winner is written (one
//! write per distinct key), other records are `Superseded` (or `Duplicate` when identical to the
//! winner). Groups are written concurrently (bounded by `concurrency`); one key is only ever
//! written by one task, so records of a key never race each other inside an invocation.
//!
//! # Reads
//!
//! [`Ratchet::get`], [`Ratchet::batch_get`] and [`Ratchet::query_partition`] never return
//! tombstones (Get/BatchGet filter in code, Query with a `FilterExpression`).
//!
//! # Failure modes
//!
//! * Transient DynamoDB errors: every record of the key's group is reported as failed (also the
//!   superseded ones, so nothing is acknowledged whose winner was not written).
//! * DynamoDB rejects the winner as invalid (`ValidationException`, e.g. a key that does not
//!   match the table schema): the winner is dead-lettered and the next candidate of the group
//!   is tried, so one bad record cannot hide valid ones.
//! * The deadline is close: groups not yet started are `Deferred` and reported as failed.
//! * The tombstone TTL is the only attribute that depends on processing time (when the delete
//!   was first applied), not on the records.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, ReturnValuesOnConditionCheckFailure,
};
use aws_sdk_dynamodb::Client;
use futures::StreamExt;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::config::ConfigError;
use crate::rejection::{Rejection, RejectionCode};
use crate::ddb::error::{ErrorClass, StoreError};
use crate::ddb::item::{canonical_json, item_size, item_to_json, Item, ItemKey, MAX_ITEM_BYTES};
use crate::batch::{Applied, Outcome, Protocol, RecordResult};
use crate::batch::Deadline;
use crate::ddb::clock::epoch_seconds;

/// Default name of the timestamp attribute.
pub const DEFAULT_TS_ATTRIBUTE: &str = "Timestamp";
/// Default name of the tombstone flag.
pub const DEFAULT_DELETED_ATTRIBUTE: &str = "Deleted";
/// Default name of the TTL attribute (epoch seconds; enable TTL on it in the table).
pub const DEFAULT_TTL_ATTRIBUTE: &str = "TTL";
/// Default name of the tie-break attribute.
pub const DEFAULT_TIE_BREAK_ATTRIBUTE: &str = "TieBreak";
/// Default tombstone lifetime: 7 days.
pub const DEFAULT_TOMBSTONE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default number of keys written at once.
pub const DEFAULT_CONCURRENCY: usize = 32;

/// The write condition (placeholders: `#ts`, `#tb`, `:ts`, `:tb`).
pub const CONDITION_NEWER: &str =
    "attribute_not_exists(#ts) OR #ts < :ts OR (#ts = :ts AND (attribute_not_exists(#tb) OR #tb < :tb))";
/// The query filter that hides tombstones (placeholders: `#del`, `:true`).
pub const FILTER_LIVE: &str = "attribute_not_exists(#del) OR #del <> :true";
/// Key condition of [`Ratchet::query_partition`].
const KEY_CONDITION_PARTITION: &str = "#pk = :pk";
/// Token of a delete: greater than every put token.
const DELETE_TOKEN: &str = "1";
/// Prefix of a put token.
const PUT_TOKEN_PREFIX: &str = "0";

/// Settings of the ratchet protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatchetConfig {
    /// The table written.
    pub table: String,
    /// Timestamp attribute.
    pub ts_attribute: String,
    /// Tombstone flag attribute.
    pub deleted_attribute: String,
    /// TTL attribute (epoch seconds).
    pub ttl_attribute: String,
    /// Tie-break token attribute.
    pub tie_break_attribute: String,
    /// How long tombstones are kept.
    pub tombstone_ttl: Duration,
    /// How many keys are written at once.
    pub concurrency: usize,
}

impl RatchetConfig {
    /// Defaults for `table`.
    pub fn new(table: impl Into<String>) -> Self {
        RatchetConfig {
            table: table.into(),
            ts_attribute: DEFAULT_TS_ATTRIBUTE.into(),
            deleted_attribute: DEFAULT_DELETED_ATTRIBUTE.into(),
            ttl_attribute: DEFAULT_TTL_ATTRIBUTE.into(),
            tie_break_attribute: DEFAULT_TIE_BREAK_ATTRIBUTE.into(),
            tombstone_ttl: DEFAULT_TOMBSTONE_TTL,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }

    /// Check that the protocol attributes are distinct and non-empty.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let names = self.protocol_attributes();
        for (i, n) in names.iter().enumerate() {
            if n.is_empty() {
                return Err(ConfigError::new(
                    "RATCHET_*_ATTRIBUTE",
                    "attribute names must not be empty",
                ));
            }
            if names[..i].contains(n) {
                return Err(ConfigError::new(
                    "RATCHET_*_ATTRIBUTE",
                    format!("attribute `{n}` is used for two protocol roles"),
                ));
            }
        }
        if self.concurrency == 0 {
            return Err(ConfigError::new(
                "RATCHET_CONCURRENCY",
                "must be at least 1",
            ));
        }
        Ok(())
    }

    fn protocol_attributes(&self) -> [&str; 4] {
        [
            &self.ts_attribute,
            &self.deleted_attribute,
            &self.ttl_attribute,
            &self.tie_break_attribute,
        ]
    }
}

/// What a record asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum RatchetOp {
    /// Replace the item with these attributes (key attributes included).
    Put(Item),
    /// Replace the item with a tombstone.
    Delete,
}

/// A parsed, validated ratchet record.
#[derive(Debug, Clone, PartialEq)]
pub struct RatchetRecord {
    /// The item key.
    pub key: ItemKey,
    /// The client-side timestamp token.
    pub ts: i128,
    /// The tie-break token.
    pub token: String,
    /// Put or delete.
    pub op: RatchetOp,
}

impl RatchetRecord {
    /// The record's version: greater wins.
    pub fn version(&self) -> (i128, &str) {
        (self.ts, &self.token)
    }
}

/// The outcome of one ratchet record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RatchetOutcome {
    /// Written: it is now the stored version.
    Applied,
    /// The table already holds a newer version.
    Stale,
    /// The table (or the winner of the batch) already holds exactly this version.
    Duplicate,
    /// A newer record for the same key in the same batch was written instead.
    Superseded,
}

impl Outcome for RatchetOutcome {
    fn label(&self) -> &'static str {
        match self {
            RatchetOutcome::Applied => "applied",
            RatchetOutcome::Stale => "stale",
            RatchetOutcome::Duplicate => "duplicate",
            RatchetOutcome::Superseded => "superseded",
        }
    }
}

/// The ratchet protocol on one table.
#[derive(Debug, Clone)]
pub struct Ratchet {
    client: Client,
    config: RatchetConfig,
}

impl Ratchet {
    /// The protocol on `config.table`.
    pub fn new(client: Client, config: RatchetConfig) -> Self {
        Ratchet { client, config }
    }

    /// The settings.
    pub fn config(&self) -> &RatchetConfig {
        &self.config
    }

    /// Parse a record body:
    /// `{"op":"put","key":{…},"ts":1721770090000,"item":{…}}` or
    /// `{"op":"delete","key":{…},"ts":1721757900000}`.
    pub fn parse_record(&self, body: &[u8]) -> Result<RatchetRecord, Rejection> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| Rejection::new(RejectionCode::BadJson, format!("the body is not JSON: {e}")))?;
        let Some(obj) = value.as_object() else {
            return Err(Rejection::new(RejectionCode::NotAnObject,
                "the body must be a JSON object",
            ));
        };
        let key_json = obj
            .get("key")
            .ok_or_else(|| Rejection::new(RejectionCode::InvalidKey, "`key` is missing"))?;
        let key = ItemKey::from_json(key_json).map_err(|m| Rejection::new(RejectionCode::InvalidKey, m))?;
        for name in key.json().keys() {
            self.check_not_reserved(name)?;
        }
        let ts = match obj.get("ts") {
            None => return Err(Rejection::new(RejectionCode::MissingTimestamp, "`ts` is missing")),
            Some(Value::Number(n)) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => i128::from(i),
                (None, Some(u)) => i128::from(u),
                _ => {
                    return Err(Rejection::new(RejectionCode::InvalidTimestamp,
                        format!("`ts` must be an integer, got {n}"),
                    ))
                }
            },
            Some(other) => {
                return Err(Rejection::new(RejectionCode::InvalidTimestamp,
                    format!("`ts` must be an integer, got {other}"),
                ))
            }
        };
        match obj.get("op").and_then(Value::as_str) {
            Some("put") => self.parse_put(obj, key, ts),
            Some("delete") => Ok(RatchetRecord {
                key,
                ts,
                token: DELETE_TOKEN.into(),
                op: RatchetOp::Delete,
            }),
            Some(other) => Err(Rejection::new(RejectionCode::UnknownOp,
                format!("`op` must be \"put\" or \"delete\", got {other:?}"),
            )),
            None => Err(Rejection::new(RejectionCode::UnknownOp,
                "`op` is missing or not a string",
            )),
        }
    }

    fn parse_put(
        &self,
        obj: &Map<String, Value>,
        key: ItemKey,
        ts: i128,
    ) -> Result<RatchetRecord, Rejection> {
        let Some(Value::Object(fields)) = obj.get("item") else {
            return Err(Rejection::new(RejectionCode::InvalidItem,
                "a put needs an `item` object",
            ));
        };
        let mut stored = fields.clone();
        for (name, value) in fields {
            self.check_not_reserved(name)?;
            if let Some(key_value) = key.json().get(name) {
                if key_value != value {
                    return Err(Rejection::new(RejectionCode::KeyMismatch,
                        format!("item attribute `{name}` disagrees with the key"),
                    ));
                }
            }
        }
        for (name, value) in key.json() {
            stored.insert(name.clone(), value.clone());
        }
        let stored = Value::Object(stored);
        let digest = Sha256::digest(canonical_json(&stored).as_bytes());
        let token = format!("{PUT_TOKEN_PREFIX}{}", hex(&digest));
        let mut item: Item = serde_dynamo::to_item(&stored).map_err(|e| {
            Rejection::new(RejectionCode::InvalidItem,
                format!("the item cannot be marshalled: {e}"),
            )
        })?;
        item.insert(
            self.config.ts_attribute.clone(),
            AttributeValue::N(ts.to_string()),
        );
        item.insert(
            self.config.tie_break_attribute.clone(),
            AttributeValue::S(token.clone()),
        );
        let size = item_size(&item);
        if size > MAX_ITEM_BYTES {
            return Err(Rejection::new(RejectionCode::ItemTooLarge,
                format!(
                    "the stored item would be {size} bytes; DynamoDB's limit is {MAX_ITEM_BYTES}"
                ),
            ));
        }
        Ok(RatchetRecord {
            key,
            ts,
            token,
            op: RatchetOp::Put(item),
        })
    }

    fn check_not_reserved(&self, name: &str) -> Result<(), Rejection> {
        if self.config.protocol_attributes().contains(&name) {
            return Err(Rejection::new(RejectionCode::ReservedAttribute,
                format!(
                    "`{name}` is written by the ratchet protocol and cannot be set by a payload"
                ),
            ));
        }
        Ok(())
    }

    /// Write one record (no coalescing): one conditional `PutItem`.
    pub async fn write(&self, record: &RatchetRecord) -> Result<RatchetOutcome, StoreError> {
        let item = match &record.op {
            RatchetOp::Put(item) => item.clone(),
            RatchetOp::Delete => {
                let mut item = record.key.to_item()?;
                item.insert(
                    self.config.ts_attribute.clone(),
                    AttributeValue::N(record.ts.to_string()),
                );
                item.insert(
                    self.config.tie_break_attribute.clone(),
                    AttributeValue::S(record.token.clone()),
                );
                item.insert(
                    self.config.deleted_attribute.clone(),
                    AttributeValue::Bool(true),
                );
                let expires = epoch_seconds() + self.config.tombstone_ttl.as_secs();
                item.insert(
                    self.config.ttl_attribute.clone(),
                    AttributeValue::N(expires.to_string()),
                );
                item
            }
        };
        let result = self
            .client
            .put_item()
            .table_name(&self.config.table)
            .set_item(Some(item))
            .condition_expression(CONDITION_NEWER)
            .expression_attribute_names("#ts", &self.config.ts_attribute)
            .expression_attribute_names("#tb", &self.config.tie_break_attribute)
            .expression_attribute_values(":ts", AttributeValue::N(record.ts.to_string()))
            .expression_attribute_values(":tb", AttributeValue::S(record.token.clone()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(RatchetOutcome::Applied),
            Err(err) => {
                let old = match err.as_service_error() {
                    Some(PutItemError::ConditionalCheckFailedException(e)) => {
                        Some(e.item().cloned().unwrap_or_default())
                    }
                    _ => None,
                };
                match old {
                    Some(old) => Ok(
                        if self.stored_version(&old) == Some((record.ts, record.token.clone())) {
                            RatchetOutcome::Duplicate
                        } else {
                            RatchetOutcome::Stale
                        },
                    ),
                    None => Err(StoreError::from_sdk("PutItem", err)),
                }
            }
        }
    }

    fn stored_version(&self, item: &Item) -> Option<(i128, String)> {
        let ts = item
            .get(&self.config.ts_attribute)?
            .as_n()
            .ok()?
            .parse()
            .ok()?;
        let tb = item
            .get(&self.config.tie_break_attribute)?
            .as_s()
            .ok()?
            .clone();
        Some((ts, tb))
    }

    fn is_tombstone(&self, item: &Item) -> bool {
        matches!(
            item.get(&self.config.deleted_attribute),
            Some(AttributeValue::Bool(true))
        )
    }

    /// Read one item; `None` when absent or deleted (a tombstone).
    pub async fn get(
        &self,
        key: &ItemKey,
        consistent: bool,
    ) -> Result<Option<Map<String, Value>>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(key.to_item()?))
            .consistent_read(consistent)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        match out.item {
            Some(item) if !self.is_tombstone(&item) => Ok(Some(item_to_json(item)?)),
            _ => Ok(None),
        }
    }

    /// Read many items (100 per call, unprocessed keys retried); tombstones and absent items are
    /// left out. The result is in no particular order.
    pub async fn batch_get(&self, keys: &[ItemKey]) -> Result<Vec<Map<String, Value>>, StoreError> {
        let mut out = Vec::new();
        for chunk in keys.chunks(100) {
            let mut request = KeysAndAttributes::builder().consistent_read(true);
            for key in chunk {
                request = request.keys(key.to_item()?);
            }
            let mut pending = Some(
                request
                    .build()
                    .map_err(|e| StoreError::Inconsistent(format!("batch get request: {e}")))?,
            );
            let mut attempt = 0u32;
            while let Some(request) = pending.take() {
                let resp = self
                    .client
                    .batch_get_item()
                    .request_items(&self.config.table, request)
                    .send()
                    .await
                    .map_err(|e| StoreError::from_sdk("BatchGetItem", e))?;
                for item in resp
                    .responses
                    .unwrap_or_default()
                    .remove(&self.config.table)
                    .unwrap_or_default()
                {
                    if !self.is_tombstone(&item) {
                        out.push(item_to_json(item)?);
                    }
                }
                pending = resp
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.config.table));
                if pending.is_some() {
                    attempt += 1;
                    if attempt > 8 {
                        return Err(StoreError::Sdk {
                            operation: "BatchGetItem",
                            class: ErrorClass::Transient,
                            code: "UnprocessedKeys".into(),
                            message: "keys still unprocessed after 8 attempts".into(),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(25 << attempt.min(6))).await;
                }
            }
        }
        Ok(out)
    }

    /// All live items of one partition (`partition_key` = `value`), tombstones filtered out by
    /// the query itself.
    pub async fn query_partition(
        &self,
        partition_key: &str,
        value: &Value,
    ) -> Result<Vec<Map<String, Value>>, StoreError> {
        let pk_value: AttributeValue = serde_dynamo::to_attribute_value(value)?;
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.config.table)
                .key_condition_expression(KEY_CONDITION_PARTITION)
                .filter_expression(FILTER_LIVE)
                .expression_attribute_names("#pk", partition_key)
                .expression_attribute_names("#del", &self.config.deleted_attribute)
                .expression_attribute_values(":pk", pk_value.clone())
                .expression_attribute_values(":true", AttributeValue::Bool(true))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| StoreError::from_sdk("Query", e))?;
            for item in page.items.unwrap_or_default() {
                out.push(item_to_json(item)?);
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(out);
            }
        }
    }

    /// Write one key's records: the winner, or the next candidate when DynamoDB rejects it.
    async fn write_group(
        &self,
        group: Vec<(usize, RatchetRecord)>,
        deadline: Deadline,
        calls: &AtomicUsize,
    ) -> Vec<(usize, RecordResult<RatchetOutcome>)> {
        let mut results = Vec::with_capacity(group.len());
        if deadline.expired() {
            return group
                .into_iter()
                .map(|(i, _)| (i, RecordResult::Deferred))
                .collect();
        }
        let mut candidates = group;
        // Greatest version first; equal versions are identical records (the token hashes the item).
        candidates.sort_by(|(_, a), (_, b)| b.version().cmp(&a.version()));
        while let Some((winner_index, winner)) = candidates.first().cloned() {
            calls.fetch_add(1, Ordering::Relaxed);
            let split = candidates
                .iter()
                .take_while(|(_, r)| r.version() == winner.version())
                .count();
            let same: Vec<(usize, RatchetRecord)> = candidates.drain(..split).collect();
            match self.write(&winner).await {
                Ok(outcome) => {
                    results.push((winner_index, RecordResult::Done(outcome)));
                    results.extend(
                        same.iter()
                            .skip(1)
                            .map(|(i, _)| (*i, RecordResult::Done(RatchetOutcome::Duplicate))),
                    );
                    results.extend(
                        candidates
                            .iter()
                            .map(|(i, _)| (*i, RecordResult::Done(RatchetOutcome::Superseded))),
                    );
                    return results;
                }
                Err(err) if err.class() == ErrorClass::InvalidRequest => {
                    let reason = Rejection::new(RejectionCode::RejectedByDynamodb, err.to_string());
                    results.extend(
                        same.iter()
                            .map(|(i, _)| (*i, RecordResult::Rejected(reason.clone()))),
                    );
                }
                Err(err) => {
                    let message = err.to_string();
                    results.push((winner_index, RecordResult::Failed(err)));
                    // Nothing of this key is acknowledged until its winner is written.
                    for (i, _) in same.iter().skip(1).chain(candidates.iter()) {
                        results.push((
                            *i,
                            RecordResult::Failed(StoreError::Sdk {
                                operation: "PutItem",
                                class: ErrorClass::Transient,
                                code: "WinnerFailed".into(),
                                message: format!("the key's winning record failed: {message}"),
                            }),
                        ));
                    }
                    return results;
                }
            }
        }
        results
    }
}

impl Protocol for Ratchet {
    type Record = RatchetRecord;
    type Outcome = RatchetOutcome;

    fn parse(&self, body: &[u8]) -> Result<RatchetRecord, Rejection> {
        self.parse_record(body)
    }

    async fn apply(
        &self,
        records: Vec<(usize, RatchetRecord)>,
        deadline: Deadline,
    ) -> Applied<RatchetOutcome> {
        let mut order: Vec<String> = Vec::new();
        let mut groups: HashMap<String, Vec<(usize, RatchetRecord)>> = HashMap::new();
        for (i, record) in records {
            let id = record.key.canonical().to_string();
            groups
                .entry(id.clone())
                .or_insert_with(|| {
                    order.push(id);
                    Vec::new()
                })
                .push((i, record));
        }
        let calls = AtomicUsize::new(0);
        let calls_ref = &calls;
        let results: Vec<Vec<(usize, RecordResult<RatchetOutcome>)>> =
            futures::stream::iter(order.into_iter().filter_map(|id| groups.remove(&id)))
                .map(|group| self.write_group(group, deadline, calls_ref))
                .buffer_unordered(self.config.concurrency)
                .collect()
                .await;
        Applied {
            results: results.into_iter().flatten().collect(),
            write_calls: calls.into_inner(),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ratchet() -> Ratchet {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        Ratchet::new(Client::from_conf(conf), RatchetConfig::new("t"))
    }

    fn code(body: &str) -> String {
        match ratchet().parse_record(body.as_bytes()) {
            Ok(_) => "ok".into(),
            Err(r) => r.code.to_string(),
        }
    }

    #[test]
    fn each_malformed_kind_has_its_code() {
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":1,"item":{"x":1}}"#),
            "ok"
        );
        assert_eq!(code("{not json"), "bad_json");
        assert_eq!(code("[1]"), "not_an_object");
        assert_eq!(
            code(r#"{"op":"upsert","key":{"PK":"a"},"ts":1}"#),
            "unknown_op"
        );
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"item":{}}"#),
            "missing_timestamp"
        );
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":1.5,"item":{}}"#),
            "invalid_timestamp"
        );
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":"1","item":{}}"#),
            "invalid_timestamp"
        );
        assert_eq!(code(r#"{"op":"put","ts":1,"item":{}}"#), "invalid_key");
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":1}"#),
            "invalid_item"
        );
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":1,"item":{"Timestamp":5}}"#),
            "reserved_attribute"
        );
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":1,"item":{"PK":"b"}}"#),
            "key_mismatch"
        );
        let big = format!(
            r#"{{"op":"put","key":{{"PK":"a"}},"ts":1,"item":{{"x":"{}"}}}}"#,
            "y".repeat(410_000)
        );
        assert_eq!(code(&big), "item_too_large");
    }

    #[test]
    fn delete_beats_put_and_puts_tie_break_by_content() {
        let r = ratchet();
        let put_a = r
            .parse_record(br#"{"op":"put","key":{"PK":"a"},"ts":5,"item":{"v":1}}"#)
            .expect("valid");
        let put_b = r
            .parse_record(br#"{"op":"put","key":{"PK":"a"},"ts":5,"item":{"v":2}}"#)
            .expect("valid");
        let del = r
            .parse_record(br#"{"op":"delete","key":{"PK":"a"},"ts":5}"#)
            .expect("valid");
        assert!(del.version() > put_a.version() && del.version() > put_b.version());
        assert_ne!(put_a.version(), put_b.version());
        let again = r
            .parse_record(br#"{"ts":5,"item":{"v":1},"key":{"PK":"a"},"op":"put"}"#)
            .expect("valid");
        assert_eq!(again.version(), put_a.version());
    }
}
