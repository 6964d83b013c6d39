//! The read-guarded operations: `list_remove` and `replace`.
//!
//! Both read the item, decide against that state and write conditioned on the version they
//! read; the write also stores its operation token in the item's token set (see `token`), so that a
//! retried write whose first attempt was applied (a lost response) recognises its own token
//! in the `ALL_OLD` item instead of acting twice.
//!
//! ```text
//!  remover A:  read v=7, "x" at [2] ──► REMOVE l[2] IF ver = 7 AND l[2] = "x"  ─► applied: ver 8, tok ∋ tA
//!                                        (response lost; the SDK sends it again)
//!  remover A:                         ──► REMOVE l[2] IF ver = 7 AND …          ─► fails: ALL_OLD tok ∋ tA
//!                                                                                   → applied (once)
//! ```
//!
//! A replace without `expectedVersion` that keeps losing races to other writers past its
//! retries fails with a transient [`StoreError::Contention`]: the record is delivered again,
//! never acknowledged unapplied.

use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure,
};

use super::path::AttrPath;
use super::token::Shape;
use super::write::{contention, Update};
use super::{Document, DocumentOutcome, CONDITION_NO_VERSION, CONDITION_VERSION_IS};
use crate::ddb::{conditional, Cond, Cost, Item, ItemKey, Placeholders, StoreError};

/// `list_remove`'s update (placeholders: `{elem}` the element's path, `#ver`, `:next`;
/// `{tokens}` the token `SET` terms, `{add}` the token `ADD` clause if any); its condition is
/// the version guard `AND {elem} = :v`.
pub(super) const UPDATE_REMOVE_ELEMENT: &str = "REMOVE {elem} SET #ver = :next, {tokens}{add}";

impl Document {
    /// Tries of a guarded write (the first and its retries).
    pub(super) fn tries(&self) -> usize {
        self.config.backoff.retries + 1
    }

    /// A consistent read of the item, projected on the version, the tokens and `path` up to
    /// its first list index when given (a projected list element would come back renumbered).
    pub(super) async fn read(
        &self,
        key: &ItemKey,
        path: Option<&AttrPath>,
    ) -> Result<Option<Item>, StoreError> {
        let mut request = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(key.to_item()?))
            .consistent_read(true);
        if let Some(path) = path {
            let mut p = Placeholders::new("r");
            let list = path.before_first_index().emit(&mut p);
            p.set_name("#ver", self.config.version_attribute());
            let mut projection = format!("{list}, #ver");
            let config = &self.config;
            let tokens = [
                config.token_attribute(),
                config.previous_tokens_attribute(),
                config.token_epoch_attribute(),
            ];
            for (n, name) in tokens.into_iter().enumerate() {
                p.set_name(&format!("#t{n}"), name);
                projection.push_str(&format!(", #t{n}"));
            }
            let (names, _) = p.into_maps();
            request = request
                .projection_expression(projection)
                .set_expression_attribute_names(names);
        }
        let out = request
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        Ok(out.item)
    }

    /// Remove one element equal to `value`: the first one in the version read, guarded by that
    /// version and the element; a lost race retries on the `ALL_OLD` item (bounded).
    pub(super) async fn list_remove(
        &self,
        key: &ItemKey,
        path: &AttrPath,
        value: &AttributeValue,
        token: &str,
        cost: &Cost,
    ) -> Result<DocumentOutcome, StoreError> {
        let mut state = self.read(key, Some(path)).await?;
        let mut delays = self.config.backoff.delays();
        // Elements before `from` were found unequal by DynamoDB in this version.
        let mut from = 0;
        loop {
            let Some(item) = state.as_ref() else {
                return Ok(DocumentOutcome::Absent);
            };
            if self.holds_token(item, token) {
                // Our own write landed already (a response lost on a delivery that failed).
                return Ok(DocumentOutcome::Applied);
            }
            let read_version = self.version_of(item);
            let Some(i) = find(path.get(item), value, from) else {
                return Ok(DocumentOutcome::Absent);
            };
            let update = self.remove_element(path, i, value, item, token);
            let Cond::Failed { old } = self.send_update(key, update, cost).await? else {
                return Ok(DocumentOutcome::Applied);
            };
            if old.as_ref().is_some_and(|o| self.holds_token(o, token)) {
                return Ok(DocumentOutcome::Applied); // our own write, whose response was lost
            }
            let Some(old) = old else {
                return Ok(DocumentOutcome::Absent); // the item was deleted meanwhile
            };
            // Same version, same document: DynamoDB found element `i` unequal; look further.
            let same_version = self.version_of(&old) == read_version;
            from = if same_version { i + 1 } else { 0 };
            state = Some(old);
            if !same_version {
                match delays.next() {
                    Some(delay) => tokio::time::sleep(delay).await,
                    None => return Err(contention("list_remove", path, self.tries())),
                }
            }
        }
    }

    /// `REMOVE path[i]` over the version of `item`, if the element still equals `value`.
    fn remove_element(
        &self,
        path: &AttrPath,
        i: usize,
        value: &AttributeValue,
        item: &Item,
        token: &str,
    ) -> Update {
        let read_version = self.version_of(item);
        let mut u = Update::new(self);
        let elem = path.index(i).emit(&mut u.placeholders);
        let guard = version_guard(&mut u.placeholders, read_version);
        u.placeholders
            .set_value(":next", AttributeValue::N((read_version + 1).to_string()))
            .set_value(":v", value.clone());
        let epoch = self.epoch();
        let shape = Shape::for_item(self.stored_epoch(item), epoch);
        let terms = self.token_terms(&mut u.placeholders, token, shape, epoch);
        u.update = UPDATE_REMOVE_ELEMENT
            .replace("{elem}", &elem)
            .replace("{tokens}", &terms.set)
            .replace("{add}", &terms.add_clause());
        u.condition = Some(format!("({guard}) AND {elem} = :v"));
        u
    }

    /// Replace the document over the version read (or `expected`); lost races without
    /// `expected` are retried on the `ALL_OLD` item (bounded), then a transient
    /// [`StoreError::Contention`] (the record is delivered again).
    pub(super) async fn replace(
        &self,
        key: &ItemKey,
        document: &Item,
        expected: Option<u64>,
        token: &str,
        cost: &Cost,
    ) -> Result<DocumentOutcome, StoreError> {
        let mut state = self.read(key, None).await?;
        let mut delays = self.config.backoff.delays();
        loop {
            if state.as_ref().is_some_and(|s| self.holds_token(s, token)) {
                return Ok(DocumentOutcome::Applied); // our own write, whose response was lost
            }
            let current = state.as_ref().map_or(0, |s| self.version_of(s));
            if expected.is_some_and(|e| e != current) {
                let same = state
                    .as_ref()
                    .is_some_and(|s| self.same_document(s, document));
                return Ok(match same {
                    true => DocumentOutcome::Duplicate,
                    false => DocumentOutcome::Conflict { current },
                });
            }
            let put = self.put_over(document, state.as_ref(), current, token, cost);
            let Cond::Failed { old } = put.await? else {
                return Ok(DocumentOutcome::Applied);
            };
            state = old;
            if expected.is_none() && !state.as_ref().is_some_and(|s| self.holds_token(s, token)) {
                match delays.next() {
                    Some(delay) => tokio::time::sleep(delay).await,
                    None => return Err(replace_contention(self.tries())),
                }
            }
        }
    }

    /// One `PutItem` of the document (which holds the key) at version `current + 1` (the token
    /// sets of `state` with ours added), conditioned on the stored version being `current`.
    async fn put_over(
        &self,
        document: &Item,
        state: Option<&Item>,
        current: u64,
        token: &str,
        cost: &Cost,
    ) -> Result<Cond<()>, StoreError> {
        let config = &self.config;
        let mut item = document.clone();
        item.extend(self.token_attributes(state, token, self.epoch()));
        let next = current + 1;
        item.insert(
            config.version_attribute(),
            AttributeValue::N(next.to_string()),
        );
        let mut p = Placeholders::new("d");
        p.set_name("#ver", config.version_attribute());
        let guard = version_guard(&mut p, current);
        let guard = format!("({guard}) AND {}", self.marker.condition(&mut p));
        let (names, values) = p.into_maps();
        let result = self
            .client
            .put_item()
            .table_name(&config.table)
            .set_item(Some(item))
            .condition_expression(guard)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        let outcome = conditional("PutItem", result);
        match &outcome {
            Ok(Cond::Done(out)) => cost.add(out.consumed_capacity()),
            _ => cost.add_failed(),
        }
        self.refuse_foreign(outcome?)
    }

    /// Whether the stored item, without the protocol's attributes, is `document`.
    fn same_document(&self, stored: &Item, document: &Item) -> bool {
        let config = &self.config;
        let user = stored
            .iter()
            .filter(|(name, _)| !config.is_protocol_attribute(name));
        user.clone().count() == document.len()
            && user
                .into_iter()
                .all(|(name, v)| document.get(name) == Some(v))
    }
}

/// A blind replace that lost every race: transient, the record is delivered again.
fn replace_contention(attempts: usize) -> StoreError {
    StoreError::Contention {
        what: "replace (without expectedVersion)".into(),
        attempts,
    }
}

/// The version guard for a write over `version` (`0`: the item has no version yet).
fn version_guard(placeholders: &mut Placeholders, version: u64) -> &'static str {
    if version == 0 {
        return CONDITION_NO_VERSION;
    }
    placeholders.set_value(":ver", AttributeValue::N(version.to_string()));
    CONDITION_VERSION_IS
}

/// The first index at or after `from` of a list element equal to `value`.
fn find(list: Option<&AttributeValue>, value: &AttributeValue, from: usize) -> Option<usize> {
    match list {
        Some(AttributeValue::L(items)) => items
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, e)| *e == value)
            .map(|(i, _)| i),
        _ => None,
    }
}
