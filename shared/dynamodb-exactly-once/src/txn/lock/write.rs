//! The lock write: lock, save the image and apply the request in one conditional write,
//! which can only land while its attempt is undecided. A `ConditionCheck` or `Delete` (a
//! locked read's checks included) changes no value before the decision: its lock is a keep
//! lock (`txId#attempt#k`, [`KEEP_LOCK_SUFFIX`](crate::txn::format::KEEP_LOCK_SUFFIX)) and
//! saves no image. An `Update` or `Put` whose image and new value cannot fit one item is
//! refused before anything is locked ([`too_large_to_lock`](super::size::too_large_to_lock)).
//!
//! The write is one `TransactWriteItems` of two entries:
//!
//! 1. a `ConditionCheck` of the transaction's header: `State = pending AND Attempt = a`
//!    ([`CONDITION_ATTEMPT_PENDING`]). Once the attempt is decided (committed, rolled back,
//!    completed, or restarted as `a + 1`) no lock write of it can apply any more, whoever
//!    sends it and however late: a coordinator that stalled before its reads, a write held
//!    in a slow network, or an SDK retry of a write whose response was lost. DynamoDB
//!    serializes the transaction with the header's decision write, so a lock write either
//!    landed before the decision (and the coordinator that completes finds it) or fails.
//! 2. the item write, conditioned on the item still being the image read (`_txVer`
//!    unchanged and not locked, never versioned, or still absent), `AND`ed with the request's
//!    own condition (validated as one complete condition when the message was parsed, see
//!    `request::expr`); the protocol's attributes are set next to the request's change (a
//!    `Put` carries them in its item, the other kinds in a `SET` merged into the update
//!    expression).
//!
//! The request carries a `ClientRequestToken` (the lock's fresh version token): an SDK retry
//! of it within DynamoDB's 10-minute idempotency window returns the first answer without
//! applying anything again; after it, the header check refuses it. The cancellation reasons
//! tell the endings apart without a read: the header check failed (decided), the item's
//! condition failed (`ALL_OLD`: locked by another transaction, changed since the read, or the
//! request's condition), or a transaction conflict (read again and retry).

use crate::txn::format::{
    ATTR_ATTEMPT, ATTR_DELETE, ATTR_IMAGE, ATTR_LOCK, ATTR_STATE, ATTR_TRANSIENT,
    ATTR_VERSION_TOKEN,
};
use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::{
    TransactWriteItemsError, TransactWriteItemsOutput,
};
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Put, ReturnConsumedCapacity,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use serde_json::{Map, Value};

use super::LockWrite;
use crate::ddb::error::{ErrorClass, StoreError};
use crate::ddb::item::Item;
use crate::txn::item::{s, token_of};
use crate::txn::record::{header_key, lock_value, TxHeader, TxState};
use crate::txn::request::{merge_set_clause, Operation};
use crate::txn::resolve::Resolved;
use crate::txn::{Coordinator, Cost};

/// The header check of every lock write: its attempt is still pending.
pub(crate) const CONDITION_ATTEMPT_PENDING: &str =
    "#txphs = :txphpending AND #txpha = :txphattempt";

/// Lock write on an item last written by a transaction (its token unchanged, not locked).
const CONDITION_UNCHANGED_VERSIONED: &str = "#txpv = :txpread AND attribute_not_exists(#txpl)";
/// Lock write on an item never written by a transaction.
const CONDITION_UNCHANGED_UNVERSIONED: &str =
    "attribute_exists(#txpk) AND attribute_not_exists(#txpv) AND attribute_not_exists(#txpl)";
/// Lock write on an absent item.
const CONDITION_STILL_ABSENT: &str = "attribute_not_exists(#txpk)";

/// The condition of a lock write and its placeholders (the request's and the protocol's).
struct LockExpression {
    condition: String,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl LockExpression {
    /// The request's condition `AND` the guard for the item as read (`None`: absent).
    fn new(r: &Resolved, current: Option<&Item>) -> Result<Self, StoreError> {
        let req = &r.request;
        let mut names: HashMap<String, String> = req
            .names
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut values: HashMap<String, AttributeValue> = req
            .attribute_values()
            .map_err(StoreError::from)?
            .into_iter()
            .collect();
        names.insert("#txpl".into(), ATTR_LOCK.into());
        names.insert("#txpv".into(), ATTR_VERSION_TOKEN.into());
        let guard = match current.map(token_of) {
            Some(Some(token)) => {
                values.insert(":txpread".into(), s(token));
                CONDITION_UNCHANGED_VERSIONED
            }
            Some(None) => {
                names.insert("#txpk".into(), r.key_attribute.clone());
                CONDITION_UNCHANGED_UNVERSIONED
            }
            None => {
                names.insert("#txpk".into(), r.key_attribute.clone());
                CONDITION_STILL_ABSENT
            }
        };
        let condition = match &req.condition_expression {
            Some(c) => format!("({c}) AND ({guard})"),
            None => guard.to_string(),
        };
        Ok(LockExpression {
            condition,
            names,
            values,
        })
    }
}

/// A `Put`'s new item with the lock, the token and the image.
fn locked_item(
    item: &Map<String, Value>,
    owner: &str,
    token: &str,
    image: Option<AttributeValue>,
) -> Result<Item, StoreError> {
    let mut item: Item = crate::ddb::item::json_to_item(item)
        .map_err(<serde_dynamo::Error as serde::ser::Error>::custom)?;
    item.insert(ATTR_LOCK.into(), s(owner));
    item.insert(ATTR_VERSION_TOKEN.into(), s(token));
    if let Some(image) = image {
        item.insert(ATTR_IMAGE.into(), image);
    }
    Ok(item)
}

/// The update expression of an `Update`, `Delete` or `ConditionCheck` lock write: the
/// protocol's `SET` (lock, token, image, delete and transient markers) merged into the
/// request's update expression.
fn locked_update(
    op: &Operation,
    absent: bool,
    image: Option<AttributeValue>,
    owner: &str,
    token: &str,
    expr: &mut LockExpression,
) -> String {
    let deletes = match op {
        Operation::Delete { .. } => true,
        Operation::ConditionCheck { .. } => absent,
        Operation::Put { .. } | Operation::Update { .. } => false,
    };
    let transient = absent
        && matches!(
            op,
            Operation::Delete { .. } | Operation::ConditionCheck { .. }
        );
    let mut assignments = vec!["#txpl = :txpo", "#txpv = :txpt"];
    expr.values.insert(":txpo".into(), s(owner));
    expr.values.insert(":txpt".into(), s(token));
    if let Some(image) = image {
        expr.names.insert("#txpi".into(), ATTR_IMAGE.into());
        expr.values.insert(":txpi".into(), image);
        assignments.push("#txpi = :txpi");
    }
    if deletes {
        expr.names.insert("#txpd".into(), ATTR_DELETE.into());
        expr.values
            .insert(":txptrue".into(), AttributeValue::Bool(true));
        assignments.push("#txpd = :txptrue");
    }
    if transient {
        expr.names.insert("#txptr".into(), ATTR_TRANSIENT.into());
        assignments.push("#txptr = :txptrue");
    }
    let set = assignments.join(", ");
    match op.update_expression() {
        Some(e) => merge_set_clause(e, &set),
        None => format!("SET {set}"),
    }
}

/// The lock write's item entry: a `Put` of the locked item or an `Update` of the item.
enum ItemWrite {
    Put(Item),
    Update(String),
}

/// The header `ConditionCheck` of a lock write.
pub(super) fn pending_check(
    tx_table: &str,
    header: &TxHeader,
) -> Result<TransactWriteItem, StoreError> {
    let check = ConditionCheck::builder()
        .table_name(tx_table)
        .set_key(Some(header_key(&header.tx_id)))
        .condition_expression(CONDITION_ATTEMPT_PENDING)
        .expression_attribute_names("#txphs", ATTR_STATE)
        .expression_attribute_names("#txpha", ATTR_ATTEMPT)
        .expression_attribute_values(":txphpending", s(TxState::Pending.as_str()))
        .expression_attribute_values(
            ":txphattempt",
            AttributeValue::N(header.attempt.to_string()),
        )
        .build()
        .map_err(|e| StoreError::Inconsistent(format!("lock write header check: {e}")))?;
    Ok(TransactWriteItem::builder().condition_check(check).build())
}

/// The item entry of a lock write.
fn item_entry(
    r: &Resolved,
    write: ItemWrite,
    expr: LockExpression,
) -> Result<TransactWriteItem, StoreError> {
    let values = (!expr.values.is_empty()).then_some(expr.values);
    let all_old = ReturnValuesOnConditionCheckFailure::AllOld;
    let built = match write {
        ItemWrite::Put(item) => Put::builder()
            .table_name(&r.request.table)
            .set_item(Some(item))
            .condition_expression(expr.condition)
            .set_expression_attribute_names(Some(expr.names))
            .set_expression_attribute_values(values)
            .return_values_on_condition_check_failure(all_old)
            .build()
            .map(|p| TransactWriteItem::builder().put(p).build()),
        ItemWrite::Update(update) => Update::builder()
            .table_name(&r.request.table)
            .set_key(Some(r.key.clone()))
            .update_expression(update)
            .condition_expression(expr.condition)
            .set_expression_attribute_names(Some(expr.names))
            .set_expression_attribute_values(values)
            .return_values_on_condition_check_failure(all_old)
            .build()
            .map(|u| TransactWriteItem::builder().update(u).build()),
    };
    built.map_err(|e| StoreError::Inconsistent(format!("lock write: {e}")))
}

/// Count the write and tell its endings apart (an invalid request is an ending, not an
/// error: the transaction rolls back).
fn lock_outcome<R: std::fmt::Debug>(
    result: Result<TransactWriteItemsOutput, SdkError<TransactWriteItemsError, R>>,
    cost: &Cost,
) -> Result<LockWrite, StoreError> {
    let err = match result {
        Ok(out) => {
            cost.add_transactional(out.consumed_capacity(), 2);
            return Ok(LockWrite::Done);
        }
        Err(err) => err,
    };
    cost.add_failed();
    if let Some(TransactWriteItemsError::TransactionCanceledException(e)) = err.as_service_error() {
        let reasons = e.cancellation_reasons();
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        match (code(0), code(1)) {
            ("ConditionalCheckFailed", _) => return Ok(LockWrite::Decided),
            (_, "ConditionalCheckFailed") => {
                let old = reasons.get(1).and_then(|r| r.item()).cloned();
                return Ok(LockWrite::ConditionFailed(old));
            }
            (first, second) if crate::txn::sent_again(first) || crate::txn::sent_again(second) => {
                return Ok(LockWrite::Conflict)
            }
            (_, "ValidationError") => {
                let message = reasons.get(1).and_then(|r| r.message()).unwrap_or_default();
                return Ok(LockWrite::Invalid(message.to_string()));
            }
            (first, second) => {
                return Err(StoreError::Sdk {
                    operation: "TransactWriteItems",
                    class: ErrorClass::Transient,
                    code: format!("TransactionCanceledException({first}, {second})"),
                    message: e.message().unwrap_or_default().to_string(),
                    source: None,
                })
            }
        }
    }
    let err = StoreError::from_sdk("TransactWriteItems", err);
    if err.class() == ErrorClass::InvalidRequest {
        Ok(LockWrite::Invalid(err.to_string()))
    } else {
        Err(err)
    }
}

impl Coordinator {
    /// Step 2 for one item: lock, save the image and apply the request in one write, only
    /// while `header`'s attempt is pending.
    pub(super) async fn lock_write(
        &self,
        header: &TxHeader,
        r: &Resolved,
        current: Option<&Item>,
        token: &str,
        cost: &Cost,
    ) -> Result<LockWrite, StoreError> {
        let result = self
            .client
            .transact_write_items()
            .transact_items(pending_check(&self.config.table, header)?)
            .transact_items(lock_entry(&header.owner(), r, current, token)?)
            .client_request_token(token)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        lock_outcome(result, cost)
    }
}

/// The item entry of a lock write of `r` by `owner`, the item read as `current`. A request
/// that leaves the item's values as they are (`ConditionCheck`, `Delete`) saves no image: its
/// lock carries [`KEEP_LOCK_SUFFIX`](crate::txn::format::KEEP_LOCK_SUFFIX) instead.
pub(super) fn lock_entry(
    owner: &str,
    r: &Resolved,
    current: Option<&Item>,
    token: &str,
) -> Result<TransactWriteItem, StoreError> {
    let mut expr = LockExpression::new(r, current)?;
    let keeps = r.request.op.keeps_values();
    let owner = &lock_value(owner, keeps);
    let image = current
        .filter(|_| !keeps)
        .map(|i| AttributeValue::M(i.clone()));
    let write = match &r.request.op {
        Operation::Put { item } => {
            let item = locked_item(item, owner, token, image)?;
            if current.is_none() {
                // The absent guard uses neither `#txpl` nor `#txpv`.
                expr.names.remove("#txpl");
                expr.names.remove("#txpv");
            }
            ItemWrite::Put(item)
        }
        op => ItemWrite::Update(locked_update(
            op,
            current.is_none(),
            image,
            owner,
            token,
            &mut expr,
        )),
    };
    item_entry(r, write, expr)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn resolved(request: Value) -> Resolved {
        crate::txn::resolve::resolved_for_test(request)
    }

    fn item(token: Option<&str>) -> Item {
        let mut item = Item::from([("PK".to_string(), s("a"))]);
        if let Some(token) = token {
            item.insert(ATTR_VERSION_TOKEN.into(), s(token));
        }
        item
    }

    #[test]
    fn an_update_merges_the_protocol_set_and_ands_the_guard() {
        let r = resolved(json!({"Update":{"TableName":"Accounts","Key":{"PK":"a"},
            "UpdateExpression":"SET #b = #b - :a","ConditionExpression":"#b >= :a",
            "ExpressionAttributeNames":{"#b":"balance"},"ExpressionAttributeValues":{":a":30}}}));
        let current = item(Some("read"));
        let mut expr = LockExpression::new(&r, Some(&current)).expect("expression");
        assert_eq!(
            expr.condition,
            "(#b >= :a) AND (#txpv = :txpread AND attribute_not_exists(#txpl))"
        );
        let image = Some(AttributeValue::M(current));
        let update = locked_update(&r.request.op, false, image, "t#1", "tok", &mut expr);
        assert_eq!(
            update,
            "SET #txpl = :txpo, #txpv = :txpt, #txpi = :txpi, #b = #b - :a"
        );
        let mut names: Vec<&str> = expr.names.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["#b", "#txpi", "#txpl", "#txpv"]);
        let mut values: Vec<&str> = expr.values.keys().map(String::as_str).collect();
        values.sort_unstable();
        assert_eq!(values, [":a", ":txpi", ":txpo", ":txpread", ":txpt"]);
    }

    #[test]
    fn a_check_on_an_absent_item_inserts_a_transient_deleted_item() {
        let r = resolved(
            json!({"ConditionCheck":{"TableName":"Accounts","Key":{"PK":"a"},
            "ConditionExpression":"attribute_not_exists(PK)"}}),
        );
        let mut expr = LockExpression::new(&r, None).expect("expression");
        assert_eq!(
            expr.condition,
            "(attribute_not_exists(PK)) AND (attribute_not_exists(#txpk))"
        );
        let update = locked_update(&r.request.op, true, None, "t#1", "tok", &mut expr);
        assert_eq!(
            update,
            "SET #txpl = :txpo, #txpv = :txpt, #txpd = :txptrue, #txptr = :txptrue"
        );
        assert_eq!(expr.names["#txpk"], "PK");
    }

    #[test]
    fn a_delete_or_a_check_of_an_item_takes_a_keep_lock_without_its_image() {
        for request in [
            json!({"Delete":{"TableName":"Accounts","Key":{"PK":"a"}}}),
            json!({"ConditionCheck":{"TableName":"Accounts","Key":{"PK":"a"},
                "ConditionExpression":"attribute_exists(PK)"}}),
        ] {
            let r = resolved(request);
            let entry = lock_entry("t#1", &r, Some(&item(None)), "tok").expect("entry");
            let update = entry.update().expect("an update");
            assert!(!update.update_expression().contains("#txpi"), "{update:?}");
            let names = update.expression_attribute_names().expect("names");
            assert!(!names.contains_key("#txpi"), "{names:?}");
            let values = update.expression_attribute_values().expect("values");
            assert_eq!(values[":txpo"], s("t#1#k"));
        }
        // An update keeps its image, under the plain lock.
        let r = resolved(json!({"Update":{"TableName":"Accounts","Key":{"PK":"a"},
            "UpdateExpression":"SET n = :n","ExpressionAttributeValues":{":n":1}}}));
        let entry = lock_entry("t#1", &r, Some(&item(None)), "tok").expect("entry");
        let update = entry.update().expect("an update");
        assert!(update.update_expression().contains("#txpi = :txpi"));
        assert_eq!(
            update.expression_attribute_values().expect("v")[":txpo"],
            s("t#1")
        );
    }

    #[test]
    fn a_put_carries_the_protocol_attributes_in_its_item() {
        let r = resolved(json!({"Put":{"TableName":"Accounts","Item":{"PK":"a","balance":7}}}));
        let Operation::Put { item: new } = &r.request.op else {
            panic!("a put");
        };
        let image = AttributeValue::M(item(Some("read")));
        let locked = locked_item(new, "t#1", "tok", Some(image.clone())).expect("item");
        assert_eq!(locked[ATTR_LOCK], s("t#1"));
        assert_eq!(locked[ATTR_VERSION_TOKEN], s("tok"));
        assert_eq!(locked[ATTR_IMAGE], image);
        assert_eq!(locked["balance"], AttributeValue::N("7".into()));
    }
}
