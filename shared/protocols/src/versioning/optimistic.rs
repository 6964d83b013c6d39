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
//! **Lost responses.** Each call writes a random token in the slot of the version it creates
//! (`<prefix>write_token<version mod 4>`), so the item holds the tokens of its last four
//! versions. When DynamoDB applied a write but its response was lost, the SDK's retry fails
//! the condition (the version has moved, by that very write); `ALL_OLD` then shows *our token*
//! in our version's slot, and the call reports [`VersionOutcome::Written`], not a conflict.
//! When another writer moved the version before the retry, the retry still sees our token
//! (in our version's slot) and reports `Written`; and [`Counter::read_modify_write`] checks
//! the tokens of its earlier tries in every item it reads before applying `change` again. So
//! a change is applied twice only if four other versions land between our write and the
//! check, which pushes our token out of its slot.
//!
//! ```text
//!  A: read v=0, change → SET v=1, tok1 = tA IF no v   ─► applied, response lost
//!  B:                                   SET v=2, tok2 = tB IF v = 1 ─► applied
//!  A: (SDK retry)                       SET v=1 … IF no v ─► fails: ALL_OLD tok1 = tA → written (v=1), once
//! ```

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use serde_json::{Map, Value};

use super::VersionOutcome;
use crate::counter::Counter;
use crate::ddb::retry::Backoff;
use crate::ddb::{conditional, Cond, Item, ItemKey, Placeholders, StoreError};

/// Guard of a versioned write of a new item.
const CONDITION_VERSION_ABSENT: &str = "attribute_not_exists(#ver)";
/// Guard of a versioned write of an existing item.
const CONDITION_VERSION_IS: &str = "#ver = :expected";
/// The protocol's own `SET` terms of a versioned write (the caller's attributes follow).
const SET_VERSION: &str = "#ver = :ver, #upd = :upd, #tok = :tok";
/// Waits between the tries of [`Counter::read_modify_write`] (its `retries` are set per call).
const RMW_BACKOFF: Backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(320), 0);

/// The outcome of [`Counter::read_modify_write`].
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmwOutcome {
    /// Written after `attempts` tries.
    Written {
        /// The new version.
        version: u64,
        /// Tries used (1 = no conflict).
        attempts: usize,
    },
    /// Every try lost a race.
    GaveUp {
        /// Tries used.
        attempts: usize,
    },
}

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
        self.put_versioned_with(key, expected, attributes, &new_token())
            .await
    }

    /// [`Counter::put_versioned`] with the caller's token.
    async fn put_versioned_with(
        &self,
        key: &ItemKey,
        expected: Option<u64>,
        attributes: &Map<String, Value>,
        token: &str,
    ) -> Result<VersionOutcome, StoreError> {
        let version = expected.map_or(1, |v| v.saturating_add(1));
        let key_item = key.to_item()?;
        let mut p = Placeholders::default();
        p.set_name("#tok", self.config.write_token_slot(version))
            .set_value(":tok", AttributeValue::S(token.to_string()));
        let update = self.versioned_update(key, version, attributes, &mut p)?;
        let condition = match expected {
            None => CONDITION_VERSION_ABSENT,
            Some(v) => {
                p.set_value(":expected", AttributeValue::N(v.to_string()));
                CONDITION_VERSION_IS
            }
        };
        let (names, values) = p.into_maps();
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(key_item))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .condition_expression(condition)
            .update_expression(update)
            .send()
            .await;
        Ok(match conditional("UpdateItem", result)? {
            Cond::Done(_) => VersionOutcome::Written { version },
            Cond::Failed { old: Some(old) } if self.is_our_write(&old, version, token) => {
                VersionOutcome::Written { version }
            }
            Cond::Failed { old } => VersionOutcome::Conflict {
                current: old.as_ref().and_then(|item| self.stored_version(item)),
            },
        })
    }

    /// Whether our write of `version` landed in `old`: our token in that version's slot, and
    /// the item at that version or later (a retry of a write whose response was lost).
    fn is_our_write(&self, old: &Item, version: u64, token: &str) -> bool {
        let ours = old
            .get(&self.config.write_token_slot(version))
            .and_then(|t| t.as_s().ok())
            .is_some_and(|t| t == token);
        ours && self.stored_version(old).is_some_and(|v| v >= version)
    }

    /// The version of an earlier try whose write landed in `current` (read as JSON).
    fn landed(&self, current: &Map<String, Value>, tries: &[(u64, String)]) -> Option<u64> {
        let stored = current
            .get(&self.config.version_attribute())
            .and_then(Value::as_u64)?;
        tries.iter().find_map(|(version, token)| {
            let slot = current.get(&self.config.write_token_slot(*version));
            (stored >= *version && slot.and_then(Value::as_str) == Some(token.as_str()))
                .then_some(*version)
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
        let mut tries: Vec<(u64, String)> = Vec::new();
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
            if let VersionOutcome::Written { version } = self
                .put_versioned_with(key, expected, &attributes, &token)
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

/// A fresh write token (128 random bits, hex).
fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}
