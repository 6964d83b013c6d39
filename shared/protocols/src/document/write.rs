//! The unguarded operations: `set_add`, `set_remove` and `list_append`, one `UpdateItem`
//! each (a unique append retries a lost race), every one bumping the version.

use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure,
};

use super::path::AttrPath;
use super::values::SetValues;
use super::{Document, DocumentOutcome, CONDITION_ITEM_EXISTS};
use crate::ddb::{conditional, Cond, Cost, ErrorClass, ItemKey, Placeholders, StoreError};

/// `list_append` (placeholders: `{p}` the list's path, `:empty`, `:vals`, `#ver`, `:one`).
pub const UPDATE_LIST_APPEND: &str =
    "SET {p} = list_append(if_not_exists({p}, :empty), :vals) ADD #ver :one";
/// The guard of a unique append: the list holds none of the values (`{absent}`: one
/// `NOT contains({p}, :uN)` per value, joined by `AND`).
pub const CONDITION_NONE_PRESENT: &str = "attribute_not_exists({p}) OR ({absent})";
/// `set_add` (placeholders: `{p}` the set's path, `:set`, `#ver`, `:one`).
pub const UPDATE_SET_ADD: &str = "ADD {p} :set, #ver :one";
/// `set_remove` (placeholders: `{p}` the set's path, `:set`, `#ver`, `:one`).
pub const UPDATE_SET_REMOVE: &str = "DELETE {p} :set ADD #ver :one";

/// Values of one unique append at most (its condition must fit DynamoDB's 4 KB expressions).
pub const MAX_UNIQUE_VALUES: usize = 20;

/// One `UpdateItem` under construction.
#[derive(Debug)]
pub(super) struct Update {
    pub placeholders: Placeholders,
    pub update: String,
    pub condition: Option<String>,
}

impl Update {
    /// An update with `#ver` mapped to the version attribute.
    pub fn new(document: &Document) -> Self {
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
        let (names, values) = update.placeholders.into_maps();
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(key.to_item()?))
            .update_expression(update.update)
            .set_condition_expression(update.condition)
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
        Ok(match outcome? {
            Cond::Done(_) => Cond::Done(()),
            Cond::Failed { old } => Cond::Failed { old },
        })
    }

    /// `ADD` the elements (idempotent); nothing is written without elements.
    pub(super) async fn set_add(
        &self,
        key: &ItemKey,
        path: &AttrPath,
        values: &SetValues,
        cost: &Cost,
    ) -> Result<DocumentOutcome, StoreError> {
        let Some(set) = values.to_attribute() else {
            return Ok(DocumentOutcome::Unchanged);
        };
        let mut u = Update::new(self);
        let p = path.emit(&mut u.placeholders);
        u.placeholders
            .set_value(":set", set)
            .set_value(":one", one());
        u.update = UPDATE_SET_ADD.replace("{p}", &p);
        self.unconditional(key, u, cost).await
    }

    /// `DELETE` the elements (idempotent; DynamoDB drops the attribute with its last element);
    /// nothing is written without elements, and a missing item is not created (`Absent`).
    pub(super) async fn set_remove(
        &self,
        key: &ItemKey,
        path: &AttrPath,
        values: &SetValues,
        cost: &Cost,
    ) -> Result<DocumentOutcome, StoreError> {
        let Some(set) = values.to_attribute() else {
            return Ok(DocumentOutcome::Unchanged);
        };
        let key_attribute = key.json().keys().next().cloned().unwrap_or_default();
        let mut u = Update::new(self);
        let p = path.emit(&mut u.placeholders);
        u.placeholders
            .set_value(":set", set)
            .set_value(":one", one())
            .set_name("#key", key_attribute);
        u.update = UPDATE_SET_REMOVE.replace("{p}", &p);
        u.condition = Some(CONDITION_ITEM_EXISTS.into());
        Ok(match self.send_update(key, u, cost).await? {
            Cond::Done(()) => DocumentOutcome::Applied,
            Cond::Failed { .. } => DocumentOutcome::Absent,
        })
    }

    /// Append the values (at-least-once); nothing is written without values.
    pub(super) async fn list_append(
        &self,
        key: &ItemKey,
        path: &AttrPath,
        values: &[AttributeValue],
        cost: &Cost,
    ) -> Result<DocumentOutcome, StoreError> {
        if values.is_empty() {
            return Ok(DocumentOutcome::Unchanged);
        }
        self.unconditional(key, append(self, path, values), cost)
            .await
    }

    /// Append the values the list does not hold yet; a lost race learns from `ALL_OLD` which
    /// are still missing and tries again (bounded).
    pub(super) async fn list_append_unique(
        &self,
        key: &ItemKey,
        path: &AttrPath,
        values: &[AttributeValue],
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
            let mut u = append(self, path, &missing);
            let p = path.emit(&mut u.placeholders);
            let absent: Vec<String> = missing
                .iter()
                .map(|v| format!("NOT contains({p}, {})", u.placeholders.value(v.clone())))
                .collect();
            u.condition = Some(
                CONDITION_NONE_PRESENT
                    .replace("{p}", &p)
                    .replace("{absent}", &absent.join(" AND ")),
            );
            let Cond::Failed { old } = self.send_update(key, u, cost).await? else {
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

    /// An update without a condition: applied or an error.
    async fn unconditional(
        &self,
        key: &ItemKey,
        update: Update,
        cost: &Cost,
    ) -> Result<DocumentOutcome, StoreError> {
        match self.send_update(key, update, cost).await? {
            Cond::Done(()) => Ok(DocumentOutcome::Applied),
            Cond::Failed { .. } => Err(StoreError::Inconsistent(
                "an update without a condition failed its condition".into(),
            )),
        }
    }
}

/// The append update of `values` (no condition yet).
fn append(document: &Document, path: &AttrPath, values: &[AttributeValue]) -> Update {
    let mut u = Update::new(document);
    let p = path.emit(&mut u.placeholders);
    u.placeholders
        .set_value(":empty", AttributeValue::L(Vec::new()))
        .set_value(":vals", AttributeValue::L(values.to_vec()))
        .set_value(":one", one());
    u.update = UPDATE_LIST_APPEND.replace("{p}", &p);
    u
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

/// Other writers kept winning: transient, the record is delivered again.
pub(super) fn contention(op: &str, path: &AttrPath, attempts: usize) -> StoreError {
    StoreError::Contention {
        what: format!("{op} on `{path}`"),
        attempts,
    }
}
