//! Item helpers shared by the protocols: JSON ↔ attribute values, canonical keys, item sizes.
//!
//! Values arrive as plain JSON and are marshalled as the DocumentClient does (strings → `S`,
//! numbers → `N`, booleans → `BOOL`, `null` → `NULL`, arrays → `L`, objects → `M`) by
//! [`to_attribute_value`] and [`json_to_item`], and read back by [`item_to_json`]. Numbers keep
//! every digit both ways (DynamoDB's 38): serde_json's `arbitrary_precision` keeps a number's
//! text, and these conversions spell it as `N` in its canonical form. They replace
//! `serde_dynamo` for JSON values, which would marshal such a number as a map
//! ([`crate::ddb::number`]).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Map, Value};

use super::json_style::{sorted_entries, JsonStyle};
use super::number::{Number, NumberError};

/// A DynamoDB item as the SDK sees it.
pub type Item = HashMap<String, AttributeValue>;

/// DynamoDB's limit on a key attribute's name.
pub const MAX_KEY_NAME_BYTES: usize = 255;
/// DynamoDB's limit on a partition key value (a sort key allows 1024: the key-schema check,
/// `ddb::schema`, refuses those in between as `invalid_key` before any write).
pub const MAX_KEY_VALUE_BYTES: usize = 2048;

/// The longest attribute name (also a nested map's keys) a record may carry. DynamoDB documents
/// 64 KB, but DynamoDB Local answers a `PutItem` whose item has a name of 50,001 bytes or more
/// with an `InternalFailure` (a 500, retried as transient, so the record would be neither
/// written nor kept): names above 50,000 bytes are rejected and kept as dead letters instead.
pub const MAX_ATTRIBUTE_NAME_BYTES: usize = 50_000;

/// Every attribute name of a JSON item (nested map keys included) within DynamoDB's limit.
/// DynamoDB Local answers an over-long name with an `InternalFailure` (a 500) instead of a
/// validation error, so it is checked before the write: a record with such a name is
/// rejected, never retried.
pub fn check_attribute_names(value: &Value) -> Result<(), String> {
    match value {
        Value::Object(map) => {
            for (name, v) in map {
                if name.len() > MAX_ATTRIBUTE_NAME_BYTES {
                    return Err(format!(
                        "attribute name {} is longer than {MAX_ATTRIBUTE_NAME_BYTES} bytes",
                        crate::text::quote(name)
                    ));
                }
                check_attribute_names(v)?;
            }
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(check_attribute_names),
        _ => Ok(()),
    }
}

/// A JSON value as an attribute value (numbers as `N`, exactly, in their canonical spelling);
/// a number DynamoDB refuses is the error.
pub fn to_attribute_value(value: &Value) -> Result<AttributeValue, NumberError> {
    Ok(match value {
        Value::Null => AttributeValue::Null(true),
        Value::Bool(b) => AttributeValue::Bool(*b),
        Value::Number(n) => AttributeValue::N(Number::from_json(n)?.canonical()),
        Value::String(s) => AttributeValue::S(s.clone()),
        Value::Array(items) => AttributeValue::L(
            items
                .iter()
                .map(to_attribute_value)
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => AttributeValue::M(json_to_item(map)?),
    })
}

/// A JSON object as an item ([`to_attribute_value`] for each attribute).
pub fn json_to_item(map: &Map<String, Value>) -> Result<Item, NumberError> {
    map.iter()
        .map(|(name, v)| Ok((name.clone(), to_attribute_value(v)?)))
        .collect()
}

/// An attribute value as plain JSON: numbers exactly as stored, sets as arrays, binary values
/// (`B`, `BS`, also nested) as base64 strings, which plain JSON has no other form for.
pub fn to_json_value(value: &AttributeValue) -> Result<Value, NumberError> {
    use base64::Engine;
    let text = |b: &aws_sdk_dynamodb::primitives::Blob| {
        Value::String(base64::engine::general_purpose::STANDARD.encode(b.as_ref()))
    };
    let number = |n: &str| Number::parse(n).map(|n| Value::Number(n.to_json()));
    Ok(match value {
        AttributeValue::S(s) => Value::String(s.clone()),
        AttributeValue::N(n) => number(n)?,
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::B(b) => text(b),
        AttributeValue::Ss(v) => v.iter().cloned().map(Value::String).collect(),
        AttributeValue::Ns(v) => v.iter().map(|n| number(n)).collect::<Result<_, _>>()?,
        AttributeValue::Bs(v) => v.iter().map(text).collect(),
        AttributeValue::L(v) => v.iter().map(to_json_value).collect::<Result<_, _>>()?,
        AttributeValue::M(m) => Value::Object(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), to_json_value(v)?)))
                .collect::<Result<_, NumberError>>()?,
        ),
        _ => Value::Null,
    })
}

/// DynamoDB's item size limit (400 KB).
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// A JSON object key (`{"PK":"User#1","SK":"Movie#A"}`) that was checked to be usable as an
/// item key: non-empty, every value a non-empty string or a number DynamoDB accepts. Its
/// canonical string and its attribute values spell each number one way, so `{"PK":1}` and
/// `{"PK":1.0}` are one key, as they are one item for DynamoDB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemKey {
    json: Map<String, Value>,
    canonical: String,
}

/// Why a value is not a usable item key (a human-readable reason that never echoes a value
/// whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(String);

impl From<KeyError> for String {
    fn from(e: KeyError) -> String {
        e.0
    }
}

impl From<String> for KeyError {
    fn from(reason: String) -> KeyError {
        KeyError(reason)
    }
}

impl From<&str> for KeyError {
    fn from(reason: &str) -> KeyError {
        KeyError(reason.into())
    }
}

/// A key attribute's value: a string or an integer (DynamoDB's `S` or `N`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyValue {
    /// A string (`S`), non-empty.
    S(String),
    /// An integer (`N`).
    N(serde_json::Number),
}

impl From<&str> for KeyValue {
    fn from(s: &str) -> Self {
        KeyValue::S(s.into())
    }
}

impl From<String> for KeyValue {
    fn from(s: String) -> Self {
        KeyValue::S(s)
    }
}

macro_rules! key_value_from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for KeyValue {
            fn from(n: $t) -> Self {
                KeyValue::N(n.into())
            }
        }
    )*};
}
key_value_from_int!(i32, i64, u32, u64);

impl From<KeyValue> for Value {
    fn from(v: KeyValue) -> Value {
        match v {
            KeyValue::S(s) => Value::String(s),
            KeyValue::N(n) => Value::Number(n),
        }
    }
}

impl ItemKey {
    /// A key of one attribute (the partition key), checked as [`ItemKey::from_json`] checks.
    ///
    /// ```
    /// use dynamodb_exactly_once::ItemKey;
    /// let key = ItemKey::partition("PK", "user#1")?.with_sort("SK", 7)?;
    /// assert_eq!(key.canonical(), r#"{"PK":"user#1","SK":7}"#);
    /// # Ok::<(), dynamodb_exactly_once::KeyError>(())
    /// ```
    pub fn partition(name: &str, value: impl Into<KeyValue>) -> Result<ItemKey, KeyError> {
        let mut json = Map::new();
        json.insert(name.to_string(), value.into().into());
        ItemKey::from_json(&Value::Object(json))
    }

    /// This key with a second attribute (the sort key).
    pub fn with_sort(self, name: &str, value: impl Into<KeyValue>) -> Result<ItemKey, KeyError> {
        let mut json = self.json;
        if json.contains_key(name) {
            return Err(KeyError(format!(
                "key attribute {} is given twice",
                crate::text::quote(name)
            )));
        }
        json.insert(name.to_string(), value.into().into());
        ItemKey::from_json(&Value::Object(json))
    }

    /// Validate a JSON key.
    pub fn from_json(value: &Value) -> Result<ItemKey, KeyError> {
        let Some(obj) = value.as_object() else {
            return Err("`key` must be an object of key attributes".into());
        };
        if obj.is_empty() {
            return Err("`key` has no attributes".into());
        }
        if obj.len() > 2 {
            return Err(KeyError(format!(
                "`key` has {} attributes; a DynamoDB key has one or two",
                obj.len()
            )));
        }
        for (name, v) in obj {
            let quoted = || crate::text::quote(name);
            if name.is_empty() || name.len() > MAX_KEY_NAME_BYTES {
                return Err(KeyError(format!(
                    "key attribute name {} must have 1 to {MAX_KEY_NAME_BYTES} bytes",
                    quoted()
                )));
            }
            match v {
                Value::String(s) if s.len() > MAX_KEY_VALUE_BYTES => {
                    return Err(KeyError(format!(
                    "key attribute {} has {} bytes; DynamoDB allows at most {MAX_KEY_VALUE_BYTES}",
                    quoted(),
                    s.len()
                )))
                }
                Value::String(s) if !s.is_empty() => {}
                Value::Number(n) => {
                    Number::from_json(n)
                        .map_err(|e| KeyError(format!("key attribute {}: {e}", quoted())))?;
                }
                _ => {
                    return Err(KeyError(format!(
                        "key attribute {} must be a non-empty string or a number",
                        quoted()
                    )))
                }
            }
        }
        Ok(ItemKey {
            canonical: canonical_json(value),
            json: obj.clone(),
        })
    }

    /// Validate a key given as attribute values (e.g. a stream record's `Keys`): strings and
    /// numbers (binary keys are refused: plain JSON has no form for them).
    pub fn from_item(keys: &Item) -> Result<ItemKey, KeyError> {
        if keys
            .values()
            .any(|v| !matches!(v, AttributeValue::S(_) | AttributeValue::N(_)))
        {
            return Err("the key has a value that is neither a string nor a number".into());
        }
        let json = keys
            .iter()
            .map(|(k, v)| Ok((k.clone(), to_json_value(v)?)))
            .collect::<Result<Map<String, Value>, NumberError>>()
            .map_err(|e| KeyError(format!("the key cannot be read: {e}")))?;
        ItemKey::from_json(&Value::Object(json))
    }

    /// The key's attributes as JSON.
    pub fn json(&self) -> &Map<String, Value> {
        &self.json
    }

    /// A canonical string identifying the key (sorted attribute names).
    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// The canonical string fits a partition key value ([`MAX_KEY_VALUE_BYTES`]), as a
    /// history table that keys its rows by it needs. Longer than the key's own values (names,
    /// quotes, braces), it can exceed the limit while each value is within it.
    pub fn check_canonical_fits_partition_key(&self) -> Result<(), KeyError> {
        let len = self.canonical.len();
        if len > MAX_KEY_VALUE_BYTES {
            return Err(KeyError(format!(
                "the key's canonical form (the history table's partition key) would be {len} bytes; \
                 DynamoDB allows at most {MAX_KEY_VALUE_BYTES}"
            )));
        }
        Ok(())
    }

    /// The key as attribute values (numbers in their canonical spelling).
    pub fn to_item(&self) -> Result<Item, serde_dynamo::Error> {
        json_to_item(&self.json).map_err(serde::ser::Error::custom)
    }
}

/// JSON with object keys sorted at every level and numbers in their canonical spelling
/// ([`Number::canonical`]): equal values give equal strings whatever the order of their fields
/// and however their numbers are spelled (`1`, `1.0` and `1e0` are one DynamoDB number).
pub fn canonical_json(value: &Value) -> String {
    Canonical.text(value)
}

/// [`canonical_json`]'s spelling: serde_json's strings, sorted keys, canonical numbers.
struct Canonical;

impl JsonStyle for Canonical {
    fn number(&self, n: &serde_json::Number, out: &mut String) {
        match Number::from_json(n) {
            Ok(n) => out.push_str(&n.canonical()),
            Err(_) => out.push_str(&n.to_string()),
        }
    }

    fn string(&self, s: &str, out: &mut String) {
        out.push_str(&Value::String(s.to_string()).to_string());
    }

    fn entries<'a>(&self, map: &'a Map<String, Value>) -> Vec<(&'a String, &'a Value)> {
        sorted_entries(map)
    }
}

/// The size DynamoDB accounts for an item, following the published rules: attribute names and
/// strings count their UTF-8 bytes, numbers about one byte per two significant digits plus
/// one, binaries their bytes, booleans and nulls one byte, lists and maps three bytes plus
/// one byte per element.
pub fn item_size(item: &Item) -> usize {
    item.iter()
        .map(|(name, v)| name.len() + value_size(v))
        .sum()
}

fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(v) => 3 + v.iter().map(|e| 1 + value_size(e)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, e)| 1 + k.len() + value_size(e))
                .sum::<usize>()
        }
        _ => 0,
    }
}

fn number_size(n: &str) -> usize {
    let digits = n.chars().filter(char::is_ascii_digit).count();
    digits.div_ceil(2) + 1
}

/// An item as typed attribute-value JSON with object keys sorted (`{"a":{"N":"1"}}`): equal
/// items give equal strings whatever the order of their attributes; unlike plain JSON it keeps
/// the difference between a set and a list, a binary and a string, and every digit of a number.
pub fn canonical_item(item: &Item) -> String {
    let typed = serde_dynamo::Item::from(item.clone());
    serde_json::to_value(&typed)
        .map(|v| canonical_json(&v))
        .unwrap_or_default()
}

/// Convert an item read from DynamoDB to plain JSON ([`to_json_value`]: numbers exact,
/// binary values as base64 strings).
pub fn item_to_json(item: Item) -> Result<Map<String, Value>, serde_dynamo::Error> {
    item.iter()
        .map(|(k, v)| Ok((k.clone(), to_json_value(v)?)))
        .collect::<Result<_, NumberError>>()
        .map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn binary_values_become_base64_text_in_plain_json() {
        let blob = |b: &[u8]| aws_sdk_dynamodb::primitives::Blob::new(b.to_vec());
        let item: Item = HashMap::from([
            ("b".to_string(), AttributeValue::B(blob(&[0, 1, 2]))),
            (
                "m".to_string(),
                AttributeValue::M(HashMap::from([(
                    "x".to_string(),
                    AttributeValue::B(blob(b"hi")),
                )])),
            ),
        ]);
        let json = item_to_json(item).expect("json");
        assert_eq!(
            Value::Object(json),
            json!({"b": "AAEC", "m": {"x": "aGk="}})
        );
    }

    #[test]
    fn canonical_json_ignores_field_order() {
        assert_eq!(
            canonical_json(&json!({"b":1,"a":{"y":[1,2],"x":"s"}})),
            canonical_json(&json!({"a":{"x":"s","y":[1,2]},"b":1}))
        );
    }

    #[test]
    fn numeric_keys_are_canonical_and_within_dynamodb_limits() {
        let one = ItemKey::from_json(&json!({"PK": 1})).expect("1");
        for spelling in ["1.0", "1e0", "10e-1"] {
            let json: Value =
                serde_json::from_str(&format!(r#"{{"PK":{spelling}}}"#)).expect("json");
            let key = ItemKey::from_json(&json).expect(spelling);
            assert_eq!(key.canonical(), one.canonical(), "{spelling}");
            assert_eq!(key.to_item().expect("item"), one.to_item().expect("item"));
        }
        assert!(ItemKey::from_json(&json!({"PK": 1e200})).is_err());
    }

    #[test]
    fn keys_must_be_strings_or_numbers() {
        assert!(ItemKey::from_json(&json!({"PK":"a","SK":2})).is_ok());
        assert!(ItemKey::from_json(&json!({"PK":""})).is_err());
        assert!(ItemKey::from_json(&json!({"PK":{"x":1}})).is_err());
        assert!(ItemKey::from_json(&json!({})).is_err());
        assert!(ItemKey::from_json(&json!("PK")).is_err());
    }

    #[test]
    fn numbers_keep_every_digit_both_ways() {
        let text = r#"{"PK":18446744073709551617,"a":[12345678901234567890.123456789012345678],
            "m":{"x":1.50},"z":0}"#;
        let json: Value = serde_json::from_str(text).expect("json");
        let Value::Object(map) = &json else {
            panic!("object")
        };
        let item = json_to_item(map).expect("item");
        assert_eq!(item["PK"], AttributeValue::N("18446744073709551617".into()));
        let back = item_to_json(item.clone()).expect("json");
        assert_eq!(back["PK"].to_string(), "18446744073709551617");
        assert_eq!(
            back["a"][0].to_string(),
            "12345678901234567890.123456789012345678"
        );
        assert_eq!(back["m"]["x"].to_string(), "1.5");
        let key = ItemKey::from_json(&json!({"PK": back["PK"].clone()})).expect("key");
        assert_eq!(ItemKey::from_item(&key.to_item().expect("item")), Ok(key));
    }

    #[test]
    fn item_size_follows_the_published_rules() {
        let json = json!({"ab":"xyz","n":12345,"l":[true]});
        let item = json_to_item(json.as_object().expect("object")).expect("item");
        // "ab"+"xyz" = 5, "n" + (3+1) = 5, "l" + 3 + (1 + 1) = 6
        assert_eq!(item_size(&item), 16);
    }
}
