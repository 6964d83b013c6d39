//! The operations without a read: `set_add`, `set_remove` and `list_append`, one `UpdateItem`
//! each (a unique append retries a lost race), every one bumping the version and guarded by
//! its operation token (applied at most once, also when the SDK sends it again: see
//! `token`).

use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure,
};

use super::path::AttrPath;
use super::token::{Shape, TokenTerms};
use super::values::SetValues;
use super::{Document, DocumentOutcome, CONDITION_ITEM_EXISTS};
use crate::ddb::{conditional, Cond, Cost, ErrorClass, Item, ItemKey, Placeholders, StoreError};

/// Sends of one unguarded write at most (a wrong guess of the token shape costs one).
const SHAPE_TRIES: usize = 3;

/// The result of an unguarded write.
#[derive(Debug)]
pub(super) enum Tokened {
    /// Applied now, or found applied by an earlier attempt (its token in `ALL_OLD`).
    Applied,
    /// The write's own condition failed (`ALL_OLD`).
    Failed(Option<Item>),
}

/// `list_append` (placeholders: `{p}` the list's path, `:empty`, `:vals`, `#ver`, `:one`;
/// `{tokens}` the token `SET` terms, `{add}` the token `ADD` term if any).
pub(super) const UPDATE_LIST_APPEND: &str =
    "SET {p} = list_append(if_not_exists({p}, :empty), :vals), {tokens} ADD #ver :one{add}";
/// The guard of a unique append: the list holds none of the values (`{absent}`: one
/// `NOT contains({p}, :uN)` per value, joined by `AND`).
pub(super) const CONDITION_NONE_PRESENT: &str = "attribute_not_exists({p}) OR ({absent})";
/// `set_add` (placeholders: `{p}` the set's path, `:set`, `#ver`, `:one`; `{tokens}`, `{add}`
/// as in [`UPDATE_LIST_APPEND`]).
pub(super) const UPDATE_SET_ADD: &str = "ADD {p} :set, #ver :one{add} SET {tokens}";
/// `set_remove` (placeholders: `{p}` the set's path, `:set`, `#ver`, `:one`; `{tokens}`,
/// `{add}` as in [`UPDATE_LIST_APPEND`]).
pub(super) const UPDATE_SET_REMOVE: &str = "DELETE {p} :set ADD #ver :one{add} SET {tokens}";

/// Values of one unique append at most (its condition must fit DynamoDB's 4 KB expressions).
pub(super) const MAX_UNIQUE_VALUES: usize = 20;

/// One `UpdateItem` under construction.
#[derive(Debug)]
pub(super) struct Update {
    pub placeholders: Placeholders,
    pub update: String,
    pub condition: Option<String>,
}

impl Update {
    /// An update with `#ver` mapped to the version attribute.
    pub(super) fn new(document: &Document) -> Self {
        let mut placeholders = Placeholders::new("d");
        placeholders.set_name("#ver", document.config.version_attribute());
        Update {
            placeholders,
            update: String::new(),
            condition: None,
        }
    }
}

impl Document {
    /// Send one `UpdateItem` (`ALL_OLD` on a failed condition), counted in `cost`.
    pub(super) async fn send_update(
        &self,
        key: &ItemKey,
        update: Update,
        cost: &Cost,
    ) -> Result<Cond<()>, StoreError> {
        let Update {
            mut placeholders,
            update,
            condition,
        } = update;
        let marker = self.marker.condition(&mut placeholders);
        let condition = match condition {
            Some(c) => format!("({c}) AND {marker}"),
            None => marker.to_string(),
        };
        let (names, values) = placeholders.into_maps();
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(key.to_item()?))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        let outcome = conditional("UpdateItem", result);
        match &outcome {
            Ok(Cond::Done(out)) => cost.add(out.consumed_capacity()),
            _ => cost.add_failed(),
        }
        self.refuse_foreign(outcome?)
    }

    /// A write's result, unless its condition failed on an item of another attribute prefix
    /// (`layout_mismatch`).
    pub(super) fn refuse_foreign<T>(&self, outcome: Cond<T>) -> Result<Cond<()>, StoreError> {
        match outcome {
            Cond::Done(_) => Ok(Cond::Done(())),
            Cond::Failed { old: Some(old) } => match self.marker.foreign(&old) {
                Some(why) => Err(layout_mismatch(&why, &self.config.attribute_prefix)),
                None => Ok(Cond::Failed { old: Some(old) }),
            },
            Cond::Failed { old: None } => Ok(Cond::Failed { old: None }),
        }
    }

    /// Send an unguarded write: `build` makes its update for a token shape and epoch (with
    /// its own condition, if any); the shape's condition and the token guard are added here. A
    /// wrong guess of the shape is corrected from `ALL_OLD` and sent again.
    pub(super) async fn send_tokened(
        &self,
        key: &ItemKey,
        token: &str,
        cost: &Cost,
        build: impl Fn(Shape, u64) -> (Update, TokenTerms),
    ) -> Result<Tokened, StoreError> {
        let epoch = self.epoch();
        let mut shape = self.guess_shape(key, epoch);
        for _ in 0..SHAPE_TRIES {
            let (mut u, terms) = build(shape, epoch);
            let absent = self.token_absent(&mut u.placeholders, token);
            let guard = format!("{} AND {absent}", terms.shape);
            u.condition = Some(match u.condition.take() {
                Some(own) => format!("({own}) AND {guard}"),
                None => guard,
            });
            let old = match self.send_update(key, u, cost).await? {
                Cond::Done(()) => {
                    self.saw_epoch(key, Some(epoch));
                    return Ok(Tokened::Applied);
                }
                Cond::Failed { old } => old,
            };
            if old.as_ref().is_some_and(|o| self.holds_token(o, token)) {
                return Ok(Tokened::Applied); // our own write, whose response was lost
            }
            if !self.wrong_shape(old.as_ref(), shape, epoch) {
                return Ok(Tokened::Failed(old));
            }
            self.saw_epoch(key, old.as_ref().and_then(|o| self.stored_epoch(o)));
            shape = match shape {
                Shape::Add => Shape::Roll,
                Shape::Roll => Shape::Add,
            };
        }
        Err(StoreError::Contention {
            what: "the item's token epoch kept changing".into(),
            attempts: SHAPE_TRIES,
        })
    }

    /// `ADD` the elements (idempotent); nothing is written without elements.
    pub(super) async fn set_add(
        &self,
        key: &ItemKey,
        path: &AttrPath,
        values: &SetValues,
        token: &str,
        cost: &Cost,
    ) -> Result<DocumentOutcome, StoreError> {
        let Some(set) = values.to_attribute() else {
            return Ok(DocumentOutcome::Unchanged);
        };
        let build = |shape, epoch| {
            let mut u = Update::new(self);
            let p = path.emit(&mut u.placeholders);
            u.placeholders
                .set_value(":set", set.clone())
                .set_value(":one", one());
            let terms = self.token_terms(&mut u.placeholders, token, shape, epoch);
            u.update = UPDATE_SET_ADD
                .replace("{p}", &p)
                .replace("{add}", &terms.add_in_clause())
                .replace("{tokens}", &terms.set);
            (u, terms)
        };
        self.once(key, token, cost, build).await
    }

    /// `DELETE` the elements (idempotent; DynamoDB drops the attribute with its last element);
    /// nothing is written without elements, and a missing item is not created (`Absent`).
    pub(super) async fn set_remove(
        &self,
        key: &ItemKey,
        path: &AttrPath,
        values: &SetValues,
        token: &str,
        cost: &Cost,
    ) -> Result<DocumentOutcome, StoreError> {
        let Some(set) = values.to_attribute() else {
            return Ok(DocumentOutcome::Unchanged);
        };
        let key_attribute = key.json().keys().next().cloned().unwrap_or_default();
        let build = |shape, epoch| {
            let mut u = Update::new(self);
            let p = path.emit(&mut u.placeholders);
            u.placeholders
                .set_value(":set", set.clone())
                .set_value(":one", one())
                .set_name("#key", key_attribute.clone());
            let terms = self.token_terms(&mut u.placeholders, token, shape, epoch);
            u.update = UPDATE_SET_REMOVE
                .replace("{p}", &p)
                .replace("{add}", &terms.add_in_clause())
                .replace("{tokens}", &terms.set);
            u.condition = Some(CONDITION_ITEM_EXISTS.to_string());
            (u, terms)
        };
        Ok(match self.send_tokened(key, token, cost, build).await? {
            Tokened::Applied => DocumentOutcome::Applied,
            Tokened::Failed(_) => DocumentOutcome::Absent,
        })
    }

    /// Append the values, once; nothing is written without values.
    pub(super) async fn list_append(
        &self,
        key: &ItemKey,
        path: &AttrPath,
        values: &[AttributeValue],
        token: &str,
        cost: &Cost,
    ) -> Result<DocumentOutcome, StoreError> {
        if values.is_empty() {
            return Ok(DocumentOutcome::Unchanged);
        }
        let build = |shape, epoch| self.append(path, values, token, shape, epoch);
        self.once(key, token, cost, build).await
    }

    /// Append the values the list does not hold yet; a lost race learns from `ALL_OLD` which
    /// are still missing and tries again (bounded).
    pub(super) async fn list_append_unique(
        &self,
        key: &ItemKey,
        path: &AttrPath,
        values: &[AttributeValue],
        token: &str,
        cost: &Cost,
    ) -> Result<DocumentOutcome, StoreError> {
        let mut missing: Vec<AttributeValue> = Vec::with_capacity(values.len());
        for v in values {
            if !missing.contains(v) {
                missing.push(v.clone());
            }
        }
        if missing.len() > MAX_UNIQUE_VALUES {
            return Err(invalid(format!(
                "a unique append takes at most {MAX_UNIQUE_VALUES} values"
            )));
        }
        let mut delays = self.config.backoff.delays();
        loop {
            if missing.is_empty() {
                return Ok(DocumentOutcome::Duplicate);
            }
            let build = |shape, epoch| {
                let (mut u, terms) = self.append(path, &missing, token, shape, epoch);
                let p = path.emit(&mut u.placeholders);
                let absent: Vec<String> = missing
                    .iter()
                    .map(|v| format!("NOT contains({p}, {})", u.placeholders.value(v.clone())))
                    .collect();
                let none_present = CONDITION_NONE_PRESENT
                    .replace("{p}", &p)
                    .replace("{absent}", &absent.join(" AND "));
                u.condition = Some(none_present);
                (u, terms)
            };
            let Tokened::Failed(old) = self.send_tokened(key, token, cost, build).await? else {
                return Ok(DocumentOutcome::Applied);
            };
            let present = match old.as_ref().and_then(|o| path.get(o)) {
                Some(AttributeValue::L(list)) => list.clone(),
                _ => return Err(invalid(format!("`{path}` is not a list"))),
            };
            let before = missing.len();
            missing.retain(|v| !present.contains(v));
            if missing.len() == before {
                return Err(invalid(format!(
                    "`{path}` holds a value DynamoDB finds equal to one appended, under another spelling"
                )));
            }
            match delays.next() {
                Some(delay) => tokio::time::sleep(delay).await,
                None if missing.is_empty() => {}
                None => return Err(contention("list_append", path, self.tries())),
            }
        }
    }

    /// An update guarded only by its token: applied, or found applied by an earlier try.
    async fn once(
        &self,
        key: &ItemKey,
        token: &str,
        cost: &Cost,
        build: impl Fn(Shape, u64) -> (Update, TokenTerms),
    ) -> Result<DocumentOutcome, StoreError> {
        match self.send_tokened(key, token, cost, build).await? {
            Tokened::Applied => Ok(DocumentOutcome::Applied),
            Tokened::Failed(_) => Err(StoreError::Inconsistent(
                "a write guarded by its own token failed without the token stored".into(),
            )),
        }
    }

    /// The append update of `values` with the token terms (no condition yet).
    fn append(
        &self,
        path: &AttrPath,
        values: &[AttributeValue],
        token: &str,
        shape: Shape,
        epoch: u64,
    ) -> (Update, TokenTerms) {
        let mut u = Update::new(self);
        let p = path.emit(&mut u.placeholders);
        u.placeholders
            .set_value(":empty", AttributeValue::L(Vec::new()))
            .set_value(":vals", AttributeValue::L(values.to_vec()))
            .set_value(":one", one());
        let terms = self.token_terms(&mut u.placeholders, token, shape, epoch);
        u.update = UPDATE_LIST_APPEND
            .replace("{p}", &p)
            .replace("{add}", &terms.add_in_clause())
            .replace("{tokens}", &terms.set);
        (u, terms)
    }
}

/// The version increment.
fn one() -> AttributeValue {
    AttributeValue::N("1".into())
}

/// A request DynamoDB would refuse, or whose retries can never succeed: dead-lettered.
pub(super) fn invalid(message: String) -> StoreError {
    StoreError::Sdk {
        operation: "UpdateItem",
        class: ErrorClass::InvalidRequest,
        code: "InvalidDocumentOperation".into(),
        message,
        source: None,
    }
}

/// The error code of [`layout_mismatch`].
pub(super) const LAYOUT_MISMATCH_CODE: &str = "LayoutMismatch";

/// The item was written under another attribute prefix: refused, never retried.
fn layout_mismatch(why: &str, prefix: &str) -> StoreError {
    StoreError::Sdk {
        operation: "UpdateItem",
        class: ErrorClass::InvalidRequest,
        code: LAYOUT_MISMATCH_CODE.into(),
        message: format!(
            "the item was written under another document attribute prefix ({why}); this \
             writer uses `{prefix}`: put the earlier prefix back, or write to new items"
        ),
        source: None,
    }
}

/// Other writers kept winning: transient, the record is delivered again.
pub(super) fn contention(op: &str, path: &AttrPath, attempts: usize) -> StoreError {
    StoreError::Contention {
        what: format!("{op} on `{path}`"),
        attempts,
    }
}
