//! Ratchet records: parsing and validation of a record body, and the record's version.
//!
//! ```text
//! {"op":"put","key":{"PK":"User#1","SK":"Movie#A"},"ts":1721770090000,"item":{"Rating":5}}
//! {"op":"delete","key":{"PK":"User#2","SK":"Movie#Z"},"ts":1721757900000}
//! ```
//!
//! The body is decoded into a `RawRecord` (every field optional, so that each missing or
//! malformed field gets its own [`RejectionCode`]), then validated into a [`RatchetRecord`] by
//! the same checks as the typed constructors [`Ratchet::put_record`] and
//! [`Ratchet::delete_record`].

use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::config::RatchetConfig;
use super::format::PUT_TOKEN_PREFIX;
use super::format::{
    DELETE_TOKEN, HISTORY_ITEM_ATTRIBUTE, HISTORY_KEY_ATTRIBUTE, HISTORY_OP_ATTRIBUTE,
    HISTORY_SORT_ATTRIBUTE, HISTORY_TIE_BREAK_ATTRIBUTE, HISTORY_TS_ATTRIBUTE,
};
use super::ts::Ts;
use super::Ratchet;
use crate::ddb::item::{
    canonical_json, check_attribute_names, item_size, Item, ItemKey, MAX_ITEM_BYTES,
};
use crate::rejection::{quote, Rejection, RejectionCode};

/// What a record asks for.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RatchetOp {
    /// Replace the item with these attributes (key attributes included).
    Put(Item),
    /// Replace the item with a tombstone.
    Delete,
}

/// A validated ratchet record, built by [`Ratchet::put_record`], [`Ratchet::delete_record`] or
/// [`Ratchet::parse_record`] (never by hand: its tie-break token is derived from its content).
#[derive(Debug, Clone, PartialEq)]
pub struct RatchetRecord {
    pub(crate) key: ItemKey,
    pub(crate) ts: Ts,
    pub(crate) token: String,
    pub(crate) op: RatchetOp,
    /// When its source received it (epoch s), when known ([`crate::Protocol::with_arrival`]).
    pub(crate) arrived: Option<u64>,
}

impl RatchetRecord {
    /// The record's version: greater wins.
    pub fn version(&self) -> (&Ts, &str) {
        (&self.ts, &self.token)
    }

    /// The item key.
    pub fn key(&self) -> &ItemKey {
        &self.key
    }

    /// The client-side timestamp.
    pub fn ts(&self) -> &Ts {
        &self.ts
    }

    /// The tie-break token (a hash of the stored item; deletes win ties).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Put (with the item as it will be stored) or delete.
    pub fn op(&self) -> &RatchetOp {
        &self.op
    }
}

impl Ratchet {
    /// A put of `item` (any `Serialize` that is a map or struct) at `ts`, checked as a parsed
    /// body is: key attributes not the protocol's, the item's key attributes equal to `key`,
    /// attribute names and the stored size within DynamoDB's limits.
    ///
    /// ```no_run
    /// # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
    /// use dynamodb_exactly_once::ItemKey;
    ///
    /// #[derive(serde::Serialize)]
    /// struct Rating { stars: u8 }
    ///
    /// let ratchet = Ratchet::new(client, RatchetConfig::builder("Movies").build()?);
    /// let key = ItemKey::partition("PK", "user#1")?.with_sort("SK", "movie#a")?;
    /// let record = ratchet.put_record(key, 1_721_770_090_000u64, &Rating { stars: 5 })?;
    /// ratchet.write(&record).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn put_record<T: Serialize + ?Sized>(
        &self,
        key: ItemKey,
        ts: impl Into<Ts>,
        item: &T,
    ) -> Result<RatchetRecord, Rejection> {
        check_key(&self.config, &key)?;
        let item = serde_json::to_value(item).map_err(|e| {
            Rejection::new(
                RejectionCode::InvalidItem,
                format!("the item cannot be serialized: {e}"),
            )
        })?;
        put(&self.config, Some(item), key, ts.into())
    }

    /// A delete of `key` at `ts`: written as a tombstone that no older put can revive.
    pub fn delete_record(
        &self,
        key: ItemKey,
        ts: impl Into<Ts>,
    ) -> Result<RatchetRecord, Rejection> {
        check_key(&self.config, &key)?;
        Ok(delete(key, ts.into()))
    }
}

/// A record body as decoded, before validation.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawRecord {
    /// `"put"` or `"delete"`.
    pub(crate) op: Option<Value>,
    /// The item key (an object of string or number values).
    pub(crate) key: Option<Value>,
    /// The client-side timestamp (an integer, or a string of digits for any size).
    pub(crate) ts: Option<Value>,
    /// The item of a put.
    pub(crate) item: Option<Value>,
}

impl RawRecord {
    /// Decode a body: `bad_json` or `not_an_object` when it is not a JSON object.
    pub(crate) fn decode(body: &[u8]) -> Result<RawRecord, Rejection> {
        crate::rejection::decode_object(body)
    }
}

/// The key's attribute names are not the protocol's; in history mode, its canonical form (the
/// history row's partition key) fits DynamoDB's limit, so no row is ever refused for it.
pub(super) fn check_key(config: &RatchetConfig, key: &ItemKey) -> Result<(), Rejection> {
    for name in key.json().keys() {
        check_not_reserved(config, name)?;
    }
    if config.history_table.is_some() {
        key.check_canonical_fits_partition_key()
            .map_err(|m| Rejection::new(RejectionCode::InvalidKey, m))?;
    }
    Ok(())
}

/// Validate a decoded record under `config` (reserved attributes, item size).
pub(crate) fn validate(raw: RawRecord, config: &RatchetConfig) -> Result<RatchetRecord, Rejection> {
    let key_json = raw
        .key
        .ok_or_else(|| Rejection::new(RejectionCode::InvalidKey, "`key` is missing"))?;
    let key =
        ItemKey::from_json(&key_json).map_err(|m| Rejection::new(RejectionCode::InvalidKey, m))?;
    check_key(config, &key)?;
    let ts = timestamp(raw.ts)?;
    match raw.op.as_ref().and_then(Value::as_str) {
        Some("put") => put(config, raw.item, key, ts),
        Some("delete") => Ok(delete(key, ts)),
        Some(other) => Err(Rejection::new(
            RejectionCode::UnknownOp,
            format!("`op` must be \"put\" or \"delete\", got {}", quote(other)),
        )),
        None => Err(Rejection::new(
            RejectionCode::UnknownOp,
            "`op` is missing or not a string",
        )),
    }
}

/// A delete of `key` at `ts` (a tombstone when written).
pub(super) fn delete(key: ItemKey, ts: Ts) -> RatchetRecord {
    RatchetRecord {
        key,
        ts,
        token: DELETE_TOKEN.into(),
        op: RatchetOp::Delete,
        arrived: None,
    }
}

fn timestamp(ts: Option<Value>) -> Result<Ts, Rejection> {
    let ts =
        ts.ok_or_else(|| Rejection::new(RejectionCode::MissingTimestamp, "`ts` is missing"))?;
    Ts::from_json(&ts).map_err(|e| Rejection::new(RejectionCode::InvalidTimestamp, e.to_string()))
}

fn put(
    config: &RatchetConfig,
    item: Option<Value>,
    key: ItemKey,
    ts: Ts,
) -> Result<RatchetRecord, Rejection> {
    let Some(Value::Object(fields)) = item else {
        return Err(Rejection::new(
            RejectionCode::InvalidItem,
            "a put needs an `item` object",
        ));
    };
    let stored = stored_item(config, fields, &key)?;
    check_attribute_names(&stored).map_err(|m| Rejection::new(RejectionCode::InvalidItem, m))?;
    let token = put_token(&canonical_json(&stored));
    let fields = stored.as_object().ok_or_else(|| {
        Rejection::new(RejectionCode::InvalidItem, "a put needs an `item` object")
    })?;
    let item: Item = crate::ddb::item::json_to_item(fields)
        .map_err(|e| Rejection::new(RejectionCode::InvalidNumber, e.to_string()))?;
    finish_put(config, key, ts, token, item)
}

/// Whether `token` has the shape of a put's tie-break token (`"0"` + 64 hex digits).
pub(super) fn is_put_token(token: &str) -> bool {
    token.len() == 65
        && token.starts_with(PUT_TOKEN_PREFIX)
        && token[1..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// The tie-break token of a put whose stored item has this canonical form.
pub(super) fn put_token(canonical: &str) -> String {
    let digest = Sha256::digest(canonical.as_bytes());
    format!("{PUT_TOKEN_PREFIX}{}", hex::encode(digest))
}

/// A put of `item` (key attributes included, protocol attributes not yet): the version
/// attributes added, the sizes checked (the item, and its history row in history mode).
pub(super) fn finish_put(
    config: &RatchetConfig,
    key: ItemKey,
    ts: Ts,
    token: String,
    mut item: Item,
) -> Result<RatchetRecord, Rejection> {
    item.insert(config.ts_attribute.clone(), ts.to_attribute());
    item.insert(
        config.tie_break_attribute.clone(),
        AttributeValue::S(token.clone()),
    );
    let size = item_size(&item);
    if size > MAX_ITEM_BYTES {
        return Err(Rejection::new(
            RejectionCode::ItemTooLarge,
            format!("the stored item would be {size} bytes; DynamoDB's limit is {MAX_ITEM_BYTES}"),
        ));
    }
    let record = RatchetRecord {
        key,
        ts,
        token,
        op: RatchetOp::Put(item),
        arrived: None,
    };
    if config.history_table.is_some() {
        let size = item_size(&history_row(&record));
        if size > MAX_ITEM_BYTES {
            return Err(Rejection::new(
                RejectionCode::ItemTooLarge,
                format!("the item's history row would be {size} bytes; DynamoDB's limit is {MAX_ITEM_BYTES}"),
            ));
        }
    }
    Ok(record)
}

/// The item's attributes plus the key, checked against reserved names and the key.
fn stored_item(
    config: &RatchetConfig,
    fields: Map<String, Value>,
    key: &ItemKey,
) -> Result<Value, Rejection> {
    for (name, value) in &fields {
        check_not_reserved(config, name)?;
        if key.json().get(name).is_some_and(|k| k != value) {
            return Err(Rejection::new(
                RejectionCode::KeyMismatch,
                format!("item attribute {} disagrees with the key", quote(name)),
            ));
        }
    }
    let mut stored = fields;
    for (name, value) in key.json() {
        stored.insert(name.clone(), value.clone());
    }
    Ok(Value::Object(stored))
}

pub(super) fn check_not_reserved(config: &RatchetConfig, name: &str) -> Result<(), Rejection> {
    if config.protocol_attributes().contains(&name) || name == super::LAYOUT_ATTRIBUTE {
        return Err(Rejection::new(
            RejectionCode::ReservedAttribute,
            format!(
                "{} is written by the ratchet protocol and cannot be set by a payload",
                quote(name)
            ),
        ));
    }
    Ok(())
}
/// The history sort key of a record version: `ts` on 20 digits (negative: `-` and
/// `ts + 2^63` on 20 digits; above `u64`: `~` and its 64 digits), `#`, the tie-break token.
/// Strings sort exactly as versions do (by `ts`, then token), and two different records with
/// the same `ts` never share a row because their tokens differ (a delete is `1`; a put is `0`
/// + SHA-256 of its item).
///
/// ```
/// use dynamodb_exactly_once::ratchet::{history_sort_key, Ts};
/// let key = |ts: i64, token| history_sort_key(&Ts::from(ts), token);
/// assert_eq!(key(1721770090000, "1"), "00000001721770090000#1");
/// assert!(key(-2, "1") < key(-1, "1"));
/// assert!(key(-1, "1") < key(0, "0ab"));
/// assert!(key(7, "0ff") < key(7, "1"));
/// let big = Ts::from_digits("49590338271490256608559692538361571095921575989136588898")?;
/// assert!(history_sort_key(&Ts::from(u64::MAX), "1") < history_sort_key(&big, "0ab"));
/// # Ok::<(), dynamodb_exactly_once::ratchet::TsError>(())
/// ```
pub fn history_sort_key(ts: &Ts, token: &str) -> String {
    format!("{}#{token}", ts.sort_key())
}

/// The history row of a record: key, sort key, `ts`, token, op and (put) the item.
pub(crate) fn history_row(record: &RatchetRecord) -> Item {
    let mut row = Item::new();
    let s = |v: String| AttributeValue::S(v);
    row.insert(
        HISTORY_KEY_ATTRIBUTE.into(),
        s(record.key.canonical().into()),
    );
    row.insert(
        HISTORY_SORT_ATTRIBUTE.into(),
        s(history_sort_key(&record.ts, &record.token)),
    );
    row.insert(HISTORY_TS_ATTRIBUTE.into(), record.ts.to_attribute());
    row.insert(HISTORY_TIE_BREAK_ATTRIBUTE.into(), s(record.token.clone()));
    let op = match &record.op {
        RatchetOp::Put(item) => {
            row.insert(
                HISTORY_ITEM_ATTRIBUTE.into(),
                AttributeValue::M(item.clone()),
            );
            "put"
        }
        RatchetOp::Delete => "delete",
    };
    row.insert(HISTORY_OP_ATTRIBUTE.into(), s(op.into()));
    row
}
