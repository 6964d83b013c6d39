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
//! **Lost responses.** Each call writes a random token (`<prefix>write_token`) with the new
//! version. When DynamoDB applied a write but its response was lost, the SDK's retry fails the
//! condition (the version has moved, by that very write); `ALL_OLD` then shows the new version
//! *with our token*, and the call reports [`VersionOutcome::Written`], not a conflict, so
//! [`Counter::read_modify_write`] never applies its change twice. (A retry that comes after
//! another writer has moved the version further cannot see our token any more: it reports a
//! [`VersionOutcome::Conflict`], and our write stays the older version in the item's history.)

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
        let version = expected.map_or(1, |v| v.saturating_add(1));
        let key_item = key.to_item()?;
        let token = format!("{:032x}", rand::random::<u128>());
        let mut p = Placeholders::default();
        p.set_name("#tok", self.config.write_token_attribute())
            .set_value(":tok", AttributeValue::S(token.clone()));
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
            Cond::Failed { old: Some(old) } if self.is_our_write(&old, version, &token) => {
                VersionOutcome::Written { version }
            }
            Cond::Failed { old } => VersionOutcome::Conflict {
                current: old.as_ref().and_then(|item| self.stored_version(item)),
            },
        })
    }

    /// Whether `old` is the item as our own write left it: the new version with our token
    /// (a retry of a write whose response was lost).
    fn is_our_write(&self, old: &Item, version: u64, token: &str) -> bool {
        let ours = old
            .get(&self.config.write_token_attribute())
            .and_then(|t| t.as_s().ok())
            .is_some_and(|t| t == token);
        ours && self.stored_version(old) == Some(version)
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
            p.set_name(&format!("#a{i}"), name)
                .set_value(&format!(":a{i}"), serde_dynamo::to_attribute_value(value)?);
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
    /// again, at most `max_attempts` times.
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
        for attempt in 1..=max_attempts {
            let current = self.get_json(key).await?;
            let expected = current
                .as_ref()
                .and_then(|c| c.get(&version_attribute))
                .and_then(Value::as_u64);
            let attributes = change(current.as_ref());
            if let VersionOutcome::Written { version } =
                self.put_versioned(key, expected, &attributes).await?
            {
                return Ok(RmwOutcome::Written {
                    version,
                    attempts: attempt,
                });
            }
            if let Some(delay) = delays.next() {
                tokio::time::sleep(delay).await;
            }
        }
        Ok(RmwOutcome::GaveUp {
            attempts: max_attempts,
        })
    }
}
