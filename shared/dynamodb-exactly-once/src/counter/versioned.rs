//! Optimistic versioned writes on a counter item, for attributes that are replaced rather than
//! incremented (they return the one [`VersionOutcome`] of versioned writes, only ever
//! `Written` or `Conflict`):
//! [`Counter::put_versioned`] sets attributes only if the item's version (`<prefix>version`) is
//! the one the caller read, and [`Counter::read_modify_write`] retries read → change →
//! conditional write a bounded number of times, with the common backoff between tries.
//!
//! ```text
//! SET   #ver = :ver, #upd = :upd, #tok = :tok, #a0 = :a0, #a1 = :a1, …
//! IF    attribute_not_exists(#ver)            (expected: none)
//!       #ver = :expected                      (expected: Some(version))
//! ```
//!
//! **Lost responses.** Each call adds a token (16 random bytes) to the item's write-token set
//! of the current *token epoch* (the writer's clock in [`TOKEN_EPOCH`] spans, 30 s), as the
//! document writer does with its op tokens: `<prefix>wtok` holds the tokens of epoch
//! `<prefix>wtoke`, `<prefix>wtokp` the set before it; a write in a later epoch rolls them.
//! A token stays in the item at least [`TOKEN_EPOCH`] after it landed (less the writers' clock
//! skew), whatever the number of versions written in between. When DynamoDB applied a write
//! but its response was lost, the SDK's retry fails the condition (the version has moved, by
//! that very write, and perhaps by many others since); `ALL_OLD` then shows *our token* and a
//! version at or past ours, and the call reports [`VersionOutcome::Written`], not a conflict.
//! [`Counter::read_modify_write`] checks the tokens of its earlier tries in every item it reads
//! before applying `change` again. So a change is applied twice only if the check comes more
//! than [`TOKEN_EPOCH`] after the lost write landed (the Lambda writers' client gives up
//! after at most 20 s: `DYNAMODB_OPERATION_TIMEOUT_MS`).
//!
//! The two update shapes (add the token to the current set, or roll the sets) are chosen by a
//! condition on `<prefix>wtoke`: from the item read ([`Counter::read_modify_write`]), or a
//! guess ([`Counter::put_versioned`]: the epoch this process last wrote the item in, else
//! roll) corrected once from `ALL_OLD` (one failed write).
//!
//! ```text
//!  A: read v=0, change → SET v=1, wtok = {tA} IF no v    ─► applied, response lost
//!  B…:                  SET v=2 … v=13, ADD wtok {tB…} IF v = 1 … 12 ─► applied
//!  A: (SDK retry)       SET v=1 … IF no v ─► fails: ALL_OLD wtok ∋ tA, v=13 ≥ 1 → written (v=1), once
//! ```
//!
//! Cost: 16 bytes per versioned write of the last one to two token epochs, plus the three
//! names and the epoch (about 30 bytes).

use std::time::Duration;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use serde_json::{Map, Value};

use super::Counter;
use crate::ddb::retry::Backoff;
use crate::ddb::{conditional, Cond, Item, ItemKey, Placeholders, StoreError};
use crate::document::TOKEN_EPOCH;
use crate::versioning::{RmwOutcome, VersionOutcome};

/// Guard of a versioned write of a new item.
const CONDITION_VERSION_ABSENT: &str = "attribute_not_exists(#ver)";
/// Guard of a versioned write of an existing item.
const CONDITION_VERSION_IS: &str = "#ver = :expected";
/// The protocol's own `SET` terms of a versioned write (the caller's attributes and the token
/// terms follow).
const SET_VERSION: &str = "#ver = :ver, #upd = :upd";
/// The token terms of a write in the item's token epoch (or a later one): `ADD` to its set.
const SET_TOKEN_EPOCH_KEPT: &str = "#toke = if_not_exists(#toke, :toke)";
/// The token terms of a write in a later token epoch than the item's: roll the sets.
const SET_TOKEN_ROLL: &str = "#tokp = if_not_exists(#tok, :toks), #tok = :toks, #toke = :toke";
/// The condition of [`SET_TOKEN_EPOCH_KEPT`].
const CONDITION_EPOCH_REACHED: &str = "#toke >= :toke";
/// The condition of [`SET_TOKEN_ROLL`].
const CONDITION_EPOCH_BEFORE: &str = "(attribute_not_exists(#toke) OR #toke < :toke)";
/// Waits between the tries of [`Counter::read_modify_write`] (its `retries` are set per call).
const RMW_BACKOFF: Backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(320), 0);

impl Counter {
    /// Set `attributes` on the item only if its version is `expected` (`None`: the item has no
    /// version yet); the version is then `expected + 1` and `<prefix>updated` the time in ms.
    /// Attribute names go through placeholders; key and protocol attributes are refused
    /// ([`StoreError::ReservedAttribute`]).
    pub async fn put_versioned(
        &self,
        key: &ItemKey,
        expected: Option<u64>,
        attributes: &Map<String, Value>,
    ) -> Result<VersionOutcome, StoreError> {
        self.put_versioned_with(key, expected, attributes, &new_token(), None)
            .await
    }

    /// [`Counter::put_versioned`] with the caller's token, over an item whose token epoch was
    /// read as `read_epoch` (`None`: not read; `Some(None)`: no tokens).
    async fn put_versioned_with(
        &self,
        key: &ItemKey,
        expected: Option<u64>,
        attributes: &Map<String, Value>,
        token: &[u8],
        read_epoch: Option<Option<u64>>,
    ) -> Result<VersionOutcome, StoreError> {
        let version = expected.map_or(1, |v| v.saturating_add(1));
        // Refuse what the request cannot carry before sending it.
        key.to_item()?;
        self.versioned_update(key, version, attributes, &mut Placeholders::default())?;
        let epoch = self.clock.now_ms() / TOKEN_EPOCH.as_millis() as u64;
        let cache_key = format!("{}\n{}", self.config.table, key.canonical());
        let known = read_epoch.unwrap_or_else(|| seen_epoch(&cache_key));
        let mut roll = known.is_none_or(|e| e < epoch);
        for _ in 0..2 {
            let result = self
                .send_versioned(key, expected, attributes, token, (roll, epoch))
                .await;
            let old = match conditional("UpdateItem", result)? {
                Cond::Done(_) => {
                    saw_epoch(cache_key, epoch);
                    return Ok(VersionOutcome::Written { version });
                }
                Cond::Failed { old } => old,
            };
            if old
                .as_ref()
                .is_some_and(|o| self.is_our_write(o, version, token))
            {
                return Ok(VersionOutcome::Written { version });
            }
            let current = old.as_ref().and_then(|item| self.stored_version(item));
            let stored_epoch = old.as_ref().and_then(|o| self.token_epoch(o));
            // At the expected version, only the shape failed: send the other one.
            if current != expected || roll == stored_epoch.is_none_or(|e| e < epoch) {
                return Ok(VersionOutcome::Conflict { current });
            }
            roll = !roll;
        }
        Ok(VersionOutcome::Conflict { current: expected })
    }

    /// One conditional `UpdateItem` of a versioned write (`shape`: roll the token sets, and
    /// the writer's token epoch).
    async fn send_versioned(
        &self,
        key: &ItemKey,
        expected: Option<u64>,
        attributes: &Map<String, Value>,
        token: &[u8],
        (roll, epoch): (bool, u64),
    ) -> Result<
        aws_sdk_dynamodb::operation::update_item::UpdateItemOutput,
        aws_sdk_dynamodb::error::SdkError<
            aws_sdk_dynamodb::operation::update_item::UpdateItemError,
            aws_sdk_dynamodb::config::http::HttpResponse,
        >,
    > {
        let version = expected.map_or(1, |v| v.saturating_add(1));
        let key_item = key
            .to_item()
            .map_err(aws_sdk_dynamodb::error::SdkError::construction_failure)?;
        let mut p = Placeholders::default();
        let mut update = self
            .versioned_update(key, version, attributes, &mut p)
            .map_err(aws_sdk_dynamodb::error::SdkError::construction_failure)?;
        p.set_name("#tok", self.write_tokens_attribute())
            .set_name("#toke", self.write_token_epoch_attribute())
            .set_value(":toks", AttributeValue::Bs(vec![Blob::new(token.to_vec())]))
            .set_value(":toke", AttributeValue::N(epoch.to_string()));
        let shape = if roll {
            p.set_name("#tokp", self.previous_write_tokens_attribute());
            update.push_str(&format!(", {SET_TOKEN_ROLL}"));
            CONDITION_EPOCH_BEFORE
        } else {
            update.push_str(&format!(", {SET_TOKEN_EPOCH_KEPT} ADD #tok :toks"));
            CONDITION_EPOCH_REACHED
        };
        let guard = match expected {
            None => CONDITION_VERSION_ABSENT,
            Some(v) => {
                p.set_value(":expected", AttributeValue::N(v.to_string()));
                CONDITION_VERSION_IS
            }
        };
        let (names, values) = p.into_maps();
        self.client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(key_item))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .condition_expression(format!("{guard} AND {shape}"))
            .update_expression(update)
            .send()
            .await
    }

    /// `<prefix>wtok`: the write tokens of the item's token epoch (a binary set).
    fn write_tokens_attribute(&self) -> String {
        format!("{}wtok", self.config.attribute_prefix)
    }

    /// `<prefix>wtokp`: the write tokens of the set before (a binary set).
    fn previous_write_tokens_attribute(&self) -> String {
        format!("{}wtokp", self.config.attribute_prefix)
    }

    /// `<prefix>wtoke`: the token epoch of `<prefix>wtok` (a number).
    fn write_token_epoch_attribute(&self) -> String {
        format!("{}wtoke", self.config.attribute_prefix)
    }

    /// The token epoch an item holds (`None`: no write tokens).
    fn token_epoch(&self, item: &Item) -> Option<u64> {
        item.get(&self.write_token_epoch_attribute())
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
    }

    /// Whether our write of `version` landed in `old`: our token in a token set, and the item
    /// at that version or later (a retry of a write whose response was lost).
    fn is_our_write(&self, old: &Item, version: u64, token: &[u8]) -> bool {
        let in_set = |name: String| {
            matches!(old.get(&name), Some(AttributeValue::Bs(set))
                if set.iter().any(|b| b.as_ref() == token))
        };
        let ours =
            in_set(self.write_tokens_attribute()) || in_set(self.previous_write_tokens_attribute());
        ours && self.stored_version(old).is_some_and(|v| v >= version)
    }

    /// The version of an earlier try whose write landed in `current` (read as JSON: binary
    /// tokens as base64 text).
    fn landed(&self, current: &Map<String, Value>, tries: &[(u64, Vec<u8>)]) -> Option<u64> {
        use base64::Engine;
        let stored = current
            .get(&self.config.version_attribute())
            .and_then(Value::as_u64)?;
        let holds = |name: String, token: &str| {
            current
                .get(&name)
                .and_then(Value::as_array)
                .is_some_and(|set| set.iter().any(|t| t.as_str() == Some(token)))
        };
        tries.iter().find_map(|(version, token)| {
            let text = base64::engine::general_purpose::STANDARD.encode(token);
            let ours = holds(self.write_tokens_attribute(), &text)
                || holds(self.previous_write_tokens_attribute(), &text);
            (stored >= *version && ours).then_some(*version)
        })
    }

    /// `SET #ver = :ver, #upd = :upd, #a<i> = :a<i>, …`, refusing key and protocol attributes.
    fn versioned_update(
        &self,
        key: &ItemKey,
        version: u64,
        attributes: &Map<String, Value>,
        p: &mut Placeholders,
    ) -> Result<String, StoreError> {
        let updated_ms = self.clock.now_ms();
        p.set_name("#ver", self.config.version_attribute())
            .set_name("#upd", self.config.updated_attribute())
            .set_value(":ver", AttributeValue::N(version.to_string()))
            .set_value(":upd", AttributeValue::N(updated_ms.to_string()));
        let mut sets = vec![SET_VERSION.to_string()];
        for (i, (name, value)) in attributes.iter().enumerate() {
            if self.config.is_protocol_attribute(name) || key.json().contains_key(name) {
                return Err(StoreError::ReservedAttribute(name.clone()));
            }
            p.set_name(&format!("#a{i}"), name).set_value(
                &format!(":a{i}"),
                crate::ddb::item::to_attribute_value(value)
                    .map_err(<serde_dynamo::Error as serde::ser::Error>::custom)?,
            );
            sets.push(format!("#a{i} = :a{i}"));
        }
        Ok(format!("SET {}", sets.join(", ")))
    }

    /// The version an item holds (`None`: none, or not a number).
    fn stored_version(&self, item: &Item) -> Option<u64> {
        item.get(&self.config.version_attribute())
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
    }

    /// Read the item, let `change` compute the attributes to set from it, and write them with
    /// [`Counter::put_versioned`]; on a conflict wait (the common jittered backoff) and start
    /// again, at most `max_attempts` times. Before `change` runs again, the item read is
    /// checked for the tokens of the earlier tries: one that landed after all (a lost
    /// response) ends the call as `Written` with that try's version, so `change` is applied
    /// once (see the module docs for the bound).
    pub async fn read_modify_write<F>(
        &self,
        key: &ItemKey,
        max_attempts: usize,
        mut change: F,
    ) -> Result<RmwOutcome, StoreError>
    where
        F: FnMut(Option<&Map<String, Value>>) -> Map<String, Value>,
    {
        let version_attribute = self.config.version_attribute();
        let policy = Backoff {
            retries: max_attempts.saturating_sub(1),
            ..RMW_BACKOFF
        };
        let mut delays = policy.delays();
        let mut tries: Vec<(u64, Vec<u8>)> = Vec::new();
        for attempt in 1..=max_attempts {
            let current = self.get_json(key).await?;
            if let Some(version) = current.as_ref().and_then(|c| self.landed(c, &tries)) {
                return Ok(RmwOutcome::Written {
                    version,
                    attempts: attempt - 1,
                });
            }
            let expected = current
                .as_ref()
                .and_then(|c| c.get(&version_attribute))
                .and_then(Value::as_u64);
            let attributes = change(current.as_ref());
            let token = new_token();
            let read_epoch = current
                .as_ref()
                .and_then(|c| c.get(&self.write_token_epoch_attribute()))
                .and_then(Value::as_u64);
            if let VersionOutcome::Written { version } = self
                .put_versioned_with(key, expected, &attributes, &token, Some(read_epoch))
                .await?
            {
                return Ok(RmwOutcome::Written {
                    version,
                    attempts: attempt,
                });
            }
            tries.push((expected.map_or(1, |v| v.saturating_add(1)), token));
            if let Some(delay) = delays.next() {
                tokio::time::sleep(delay).await;
            }
        }
        // The last try may have landed after all (a lost response): say so rather than give up.
        let current = self.get_json(key).await?;
        Ok(match current.and_then(|c| self.landed(&c, &tries)) {
            Some(version) => RmwOutcome::Written {
                version,
                attempts: max_attempts,
            },
            None => RmwOutcome::GaveUp {
                attempts: max_attempts,
            },
        })
    }
}

/// Items whose token epoch this process remembers (the cache is cleared when it is full).
const EPOCH_CACHE_ITEMS: usize = 4096;

/// The token epoch of the items this process wrote versions of lately (table and key): the
/// first guess of [`Counter::put_versioned`]'s token shape.
static EPOCHS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, u64>>> =
    std::sync::LazyLock::new(Default::default);

/// The token epoch last seen on an item (`None`: not seen lately).
fn seen_epoch(item: &str) -> Option<u64> {
    EPOCHS.lock().ok()?.get(item).copied()
}

/// Remember the token epoch of an item written.
fn saw_epoch(item: String, epoch: u64) {
    if let Ok(mut map) = EPOCHS.lock() {
        if map.len() >= EPOCH_CACHE_ITEMS {
            map.clear();
        }
        map.insert(item, epoch);
    }
}

/// A fresh write token (128 random bits).
fn new_token() -> Vec<u8> {
    rand::random::<u128>().to_be_bytes().to_vec()
}
