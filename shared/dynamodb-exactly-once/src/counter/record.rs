//! Counter records: decoding a body into a [`RawCounterRecord`], then validating it into a
//! [`CounterRecord`] or a [`Rejection`] with a stable code.
//!
//! The checks run in a fixed order, so a body with several faults is always rejected for the
//! same one: `bad_json`, `not_an_object`, the key (`invalid_key`, `reserved_attribute`), the
//! idempotency key (`missing_idempotency_key`, `invalid_idempotency_key`), then `add`
//! (`invalid_add`, then per counter in name order: `invalid_add`, `reserved_attribute`,
//! `key_attribute`, `invalid_delta`).
//!
//! Messages never echo a value from the body beyond a few dozen characters: a name is quoted
//! with a bounded prefix, a value by its type and size ([`describe`]), and every counter
//! rejection is cut at [`MAX_REJECTION_BYTES`] ([`rejection`]).

use std::collections::BTreeMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{Counter, CounterConfig};
use crate::ddb::error::bounded;
use crate::ddb::number::Number;
use crate::ddb::ItemKey;
use crate::rejection::{Rejection, RejectionCode};

/// Counters one record may name.
pub(crate) const MAX_COUNTERS_PER_RECORD: usize = 20;
/// Longest idempotency key accepted (bytes); it is hashed anyway.
pub(crate) const MAX_IDEMPOTENCY_KEY_BYTES: usize = 2048;
/// DynamoDB's limit on an attribute name used through a placeholder.
const MAX_ATTRIBUTE_NAME_BYTES: usize = 255;
/// Longest counter rejection message (bytes); longer ones are cut.
pub(crate) const MAX_REJECTION_BYTES: usize = 256;
/// Characters of a name or value quoted in a message.
const QUOTED_CHARS: usize = 32;

/// A counter rejection whose message is cut at [`MAX_REJECTION_BYTES`] (on a character
/// boundary, marked with the full length).
pub(super) fn rejection(code: RejectionCode, message: &str) -> Rejection {
    if message.len() <= MAX_REJECTION_BYTES {
        return Rejection::new(code, message);
    }
    let mut end = MAX_REJECTION_BYTES - 24;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    Rejection::new(
        code,
        format!("{}… ({} bytes)", &message[..end], message.len()),
    )
}

/// A name from the body, quoted: at most [`QUOTED_CHARS`] characters of it.
fn quoted(name: &str) -> String {
    format!("`{}`", bounded(name, QUOTED_CHARS))
}

/// A value from the body described by its type and size, never echoed whole.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {}", bounded(&n.to_string(), QUOTED_CHARS)),
        Value::String(s) => format!("a string of {} bytes", s.len()),
        Value::Array(a) => format!("an array of {} elements", a.len()),
        Value::Object(o) => format!("an object of {} fields", o.len()),
    }
}

/// A validated counter record, built by [`Counter::record`] or [`Counter::parse_record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterRecord {
    pub(crate) key: ItemKey,
    pub(crate) add: BTreeMap<String, Number>,
    pub(crate) idempotency_key: String,
    pub(crate) hashed_key: String,
    /// When its source received it (epoch s), when known ([`crate::Protocol::with_arrival`]).
    pub(crate) arrived: Option<u64>,
}

impl CounterRecord {
    /// The counter item.
    pub fn key(&self) -> &ItemKey {
        &self.key
    }

    /// Counter name → delta (exact, up to DynamoDB's 38 significant digits).
    pub fn deltas(&self) -> &BTreeMap<String, Number> {
        &self.add
    }

    /// The producer's idempotency key.
    pub fn idempotency_key(&self) -> &str {
        &self.idempotency_key
    }

    /// The same record, received by its source at `arrived_ms` (epoch ms): a record that
    /// arrived before its item forgot keys (`<prefix>forgot`) is kept as `too_old`.
    pub fn arrived_at(mut self, arrived_ms: u64) -> Self {
        self.arrived = Some(arrived_ms / 1000);
        self
    }
}

/// The idempotency key as stored: the first 128 bits of its SHA-256, base64url, 22 characters.
pub fn hash_key(idempotency_key: &str) -> String {
    let digest = Sha256::digest(idempotency_key.as_bytes());
    URL_SAFE_NO_PAD.encode(&digest[..16])
}

/// A record body's fields, undecided: each is `None` when absent and `Some` (possibly
/// `Some(Value::Null)`) when present, so that validation can tell a missing field from a
/// field of the wrong type.
#[derive(Debug, Deserialize)]
struct RawCounterRecord {
    #[serde(default, deserialize_with = "present")]
    key: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    add: Option<Value>,
    #[serde(default, rename = "idempotencyKey", deserialize_with = "present")]
    idempotency_key: Option<Value>,
}

/// A present field, `null` included (serde's `Option` would read `null` as absent).
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl RawCounterRecord {
    /// Decode a body: `bad_json` when it is not JSON, `not_an_object` when it is not an object.
    fn from_body(body: &[u8]) -> Result<Self, Rejection> {
        crate::rejection::decode_object(body)
    }

    /// Validate the fields against the protocol's settings.
    fn validate(self, config: &CounterConfig) -> Result<CounterRecord, Rejection> {
        let key = validate_key(self.key, config)?;
        let idempotency_key = validate_idempotency_key(self.idempotency_key)?;
        let add = validate_add(self.add, &key, config)?;
        Ok(CounterRecord {
            key,
            add,
            hashed_key: hash_key(&idempotency_key),
            idempotency_key,
            arrived: None,
        })
    }
}

impl Counter {
    /// A record adding each delta to its counter on `key`, once per `idempotency_key`, checked
    /// as a parsed body is (1 to 20 counters, names not the protocol's or the key's, a
    /// non-empty idempotency key of at most 2,048 bytes).
    ///
    /// ```no_run
    /// # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use dynamodb_exactly_once::counter::{Counter, CounterConfig, CounterOutcome};
    /// use dynamodb_exactly_once::ItemKey;
    ///
    /// let counter = Counter::new(client, CounterConfig::builder("Counters").build()?);
    /// let key = ItemKey::partition("PK", "acct#42")?;
    /// let login = counter.record(key, [("logins", 1)], "evt-7")?;
    /// assert_eq!(counter.add(&login).await?, CounterOutcome::Applied);
    /// assert_eq!(counter.add(&login).await?, CounterOutcome::Duplicate); // redelivered
    /// # Ok(())
    /// # }
    /// ```
    pub fn record<N: Into<String>, D: Into<serde_json::Number>>(
        &self,
        key: ItemKey,
        deltas: impl IntoIterator<Item = (N, D)>,
        idempotency_key: impl Into<String>,
    ) -> Result<CounterRecord, Rejection> {
        let fields: Map<String, Value> = deltas
            .into_iter()
            .map(|(name, delta)| (name.into(), Value::Number(delta.into())))
            .collect();
        RawCounterRecord {
            key: Some(Value::Object(key.json().clone())),
            add: Some(Value::Object(fields)),
            idempotency_key: Some(Value::String(idempotency_key.into())),
        }
        .validate(&self.config)
    }

    /// Parse a record body:
    /// `{"key":{"PK":"acct#42","SK":"2024-11-22"},"add":{"logins":3},"idempotencyKey":"…"}`.
    pub fn parse_record(&self, body: &[u8]) -> Result<CounterRecord, Rejection> {
        RawCounterRecord::from_body(body)?.validate(&self.config)
    }
}

/// `key`: a usable item key whose attributes are not the protocol's.
fn validate_key(key: Option<Value>, config: &CounterConfig) -> Result<ItemKey, Rejection> {
    let key = key.ok_or_else(|| Rejection::new(RejectionCode::InvalidKey, "`key` is missing"))?;
    for (name, value) in key.as_object().into_iter().flatten() {
        check_name(name, "key attribute names", RejectionCode::InvalidKey)?;
        check_not_reserved(name, config)?;
        let usable = matches!(value, Value::String(s) if !s.is_empty()) || value.is_number();
        if !usable {
            return Err(rejection(
                RejectionCode::InvalidKey,
                &format!(
                    "key attribute {} must be a non-empty string or a number, got {}",
                    quoted(name),
                    describe(value)
                ),
            ));
        }
    }
    // The remaining checks (an object of one or two attributes) quote nothing from the body.
    ItemKey::from_json(&key).map_err(|m| rejection(RejectionCode::InvalidKey, &m.to_string()))
}

/// A name of 1 to [`MAX_ATTRIBUTE_NAME_BYTES`] bytes, else rejected with `code`.
fn check_name(name: &str, what: &str, code: RejectionCode) -> Result<(), Rejection> {
    if name.is_empty() || name.len() > MAX_ATTRIBUTE_NAME_BYTES {
        return Err(rejection(
            code,
            &format!(
                "{what} are 1 to {MAX_ATTRIBUTE_NAME_BYTES} bytes, got {} bytes",
                name.len()
            ),
        ));
    }
    Ok(())
}

/// `idempotencyKey`: a non-empty string of at most [`MAX_IDEMPOTENCY_KEY_BYTES`].
fn validate_idempotency_key(value: Option<Value>) -> Result<String, Rejection> {
    match value {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_IDEMPOTENCY_KEY_BYTES => Ok(s),
        Some(Value::String(s)) if !s.is_empty() => Err(Rejection::new(
            RejectionCode::InvalidIdempotencyKey,
            format!(
                "`idempotencyKey` is {} bytes; at most {MAX_IDEMPOTENCY_KEY_BYTES}",
                s.len()
            ),
        )),
        Some(_) => Err(Rejection::new(
            RejectionCode::InvalidIdempotencyKey,
            "`idempotencyKey` must be a non-empty string",
        )),
        None => Err(Rejection::new(
            RejectionCode::MissingIdempotencyKey,
            "`idempotencyKey` is missing",
        )),
    }
}

/// `add`: an object of 1 to [`MAX_COUNTERS_PER_RECORD`] counters, each with a valid delta.
fn validate_add(
    value: Option<Value>,
    key: &ItemKey,
    config: &CounterConfig,
) -> Result<BTreeMap<String, Number>, Rejection> {
    let fields = match value {
        Some(Value::Object(fields)) => fields,
        other => {
            let got = other.as_ref().map_or("nothing".into(), describe);
            return Err(rejection(
                RejectionCode::InvalidAdd,
                &format!("`add` must be an object of counter name → numeric delta, got {got}"),
            ));
        }
    };
    if fields.is_empty() || fields.len() > MAX_COUNTERS_PER_RECORD {
        return Err(Rejection::new(
            RejectionCode::InvalidAdd,
            format!(
                "`add` names {} counters; between 1 and {MAX_COUNTERS_PER_RECORD}",
                fields.len()
            ),
        ));
    }
    validate_deltas(fields, key, config)
}

/// Each counter of `add`: a usable name that is neither a protocol nor a key attribute, and
/// a number DynamoDB stores (up to 38 significant digits, exactly).
fn validate_deltas(
    fields: Map<String, Value>,
    key: &ItemKey,
    config: &CounterConfig,
) -> Result<BTreeMap<String, Number>, Rejection> {
    let mut add = BTreeMap::new();
    for (name, delta) in fields {
        check_name(&name, "counter names", RejectionCode::InvalidAdd)?;
        check_not_reserved(&name, config)?;
        if key.json().contains_key(&name) {
            return Err(rejection(
                RejectionCode::KeyAttribute,
                &format!(
                    "{} is a key attribute and cannot be a counter",
                    quoted(&name)
                ),
            ));
        }
        let Value::Number(n) = &delta else {
            return Err(rejection(
                RejectionCode::InvalidDelta,
                &format!(
                    "the delta of {} must be a number, got {}",
                    quoted(&name),
                    describe(&delta)
                ),
            ));
        };
        let d = Number::from_json(n).map_err(|e| {
            Rejection::new(
                RejectionCode::InvalidNumber,
                format!("the delta of {}: {e}", quoted(&name)),
            )
        })?;
        add.insert(name, d);
    }
    Ok(add)
}

/// `reserved_attribute` when `name` starts with the protocol's attribute prefix.
fn check_not_reserved(name: &str, config: &CounterConfig) -> Result<(), Rejection> {
    if config.is_protocol_attribute(name) {
        return Err(rejection(
            RejectionCode::ReservedAttribute,
            &format!(
                "{} is one of the counter protocol's own attributes (those starting with \
                 `{}`, and its layout markers), which a payload cannot write",
                quoted(name),
                config.attribute_prefix
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::KEY_BYTES;
    use aws_sdk_dynamodb::Client;
    use serde_json::json;

    fn counter() -> Counter {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        Counter::new(
            Client::from_conf(conf),
            CounterConfig::builder("counters").build().expect("valid"),
        )
    }

    fn code(body: &str) -> String {
        match counter().parse_record(body.as_bytes()) {
            Ok(_) => "ok".into(),
            Err(r) => r.code.to_string(),
        }
    }

    #[test]
    fn each_malformed_kind_has_its_code() {
        let ok =
            r#"{"key":{"PK":"a","SK":"d"},"add":{"logins":3,"authz":-1},"idempotencyKey":"x"}"#;
        assert_eq!(code(ok), "ok");
        assert_eq!(code("{nope"), "bad_json");
        assert_eq!(code("3"), "not_an_object");
        assert_eq!(
            code(r#"{"add":{"n":1},"idempotencyKey":"x"}"#),
            "invalid_key"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{"n":1}}"#),
            "missing_idempotency_key"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{"n":1},"idempotencyKey":7}"#),
            "invalid_idempotency_key"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{},"idempotencyKey":"x"}"#),
            "invalid_add"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{"n":"1"},"idempotencyKey":"x"}"#),
            "invalid_delta"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{"ctr_bucket":1},"idempotencyKey":"x"}"#),
            "reserved_attribute"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{"PK":1},"idempotencyKey":"x"}"#),
            "key_attribute"
        );
    }

    #[test]
    fn a_null_field_is_present_but_invalid() {
        assert_eq!(code("[1,2]"), "not_an_object");
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":{"n":1},"idempotencyKey":null}"#),
            "invalid_idempotency_key"
        );
        assert_eq!(
            code(r#"{"key":{"PK":"a"},"add":null,"idempotencyKey":"x"}"#),
            "invalid_add"
        );
    }

    #[test]
    fn rejection_messages_never_echo_a_huge_value() {
        let huge = "x".repeat(1_000_000);
        let long_reserved = format!("ctr_{}", "y".repeat(240));
        let bodies = [
            json!({"key":{"PK":"a"},"add":{"n": huge},"idempotencyKey":"k"}),
            json!({"key":{"PK":"a"},"add":{"n": [huge, 1]},"idempotencyKey":"k"}),
            json!({"key":{"PK":"a"},"add":{"n": {"deep": huge}},"idempotencyKey":"k"}),
            json!({"key":{"PK":"a"},"add":{"n": 1},"idempotencyKey": huge}),
            json!({"key":{format!("ctr_{huge}"): "a"},"add":{"n":1},"idempotencyKey":"k"}),
            json!({"key":{huge.clone(): null},"add":{"n":1},"idempotencyKey":"k"}),
            json!({"key":{huge.clone(): "a"},"add":{"n":1},"idempotencyKey":"k"}),
            json!({"key":{"PK":"a"},"add":{long_reserved: 1},"idempotencyKey":"k"}),
            json!({"key":{"PK":"a","SK":"b"},"add":{"SK": 1},"idempotencyKey":"k"}),
            json!({"key":{"PK":"a"},"add":{"n": 1e300},"idempotencyKey":"k"}),
            json!({"key":{"PK":"a"},"add": huge,"idempotencyKey":"k"}),
        ];
        let mut raw: Vec<Vec<u8>> = bodies.iter().map(|b| b.to_string().into_bytes()).collect();
        raw.push(format!("{{\"key\": \"{huge}").into_bytes());
        raw.push(format!("{{\"key\": {huge}}}").into_bytes());
        for body in raw {
            let Err(rejection) = counter().parse_record(&body) else {
                panic!("accepted a body of {} bytes", body.len());
            };
            let text = rejection.to_string();
            assert!(
                text.len() < 300 && !text.contains(&"x".repeat(40)),
                "{} bytes: {}",
                text.len(),
                &text[..text.len().min(400)]
            );
        }
    }

    #[test]
    fn keys_hash_to_a_fixed_size() {
        assert_eq!(hash_key("a").len(), KEY_BYTES);
        assert_eq!(hash_key(&"long".repeat(500)).len(), KEY_BYTES);
        assert_ne!(hash_key("a"), hash_key("b"));
        // The stored form never changes: keys written by earlier versions stay recognised.
        assert_eq!(hash_key("a"), "ypeBEsobvcr6wjGzmiPcTQ");
        assert_eq!(URL_SAFE_NO_PAD.encode(b"\xff\xff\xff"), "____");
        assert_eq!(URL_SAFE_NO_PAD.encode(b"Ma"), "TWE");
    }
}
