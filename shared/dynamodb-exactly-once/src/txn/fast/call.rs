//! The fast path's one call: every request as its own `TransactWriteItems` action, guarded
//! against locks and stamped with a fresh version token, plus the header `Put`; and what the
//! call's answer (or its cancellation reasons) means.

use crate::txn::format::{ATTR_LOCK, ATTR_TX_ID, ATTR_VERSION_TOKEN};
use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::{
    TransactWriteItemsError, TransactWriteItemsOutput,
};
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConditionCheck, Delete, Put,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};

use crate::ddb::error::{ErrorClass, StoreError};
use crate::ddb::item::Item;
use crate::txn::item::{lock_of, s};
use crate::txn::request::{merge_set_clause, Operation};
use crate::txn::resolve::Resolved;
use crate::txn::Cost;

/// `AND`ed with every request's own condition: the item is not held by a lock-path
/// transaction (a fast-path write never lands on a locked item, so no lock-path undo can ever
/// revert it).
const CONDITION_UNLOCKED: &str = "attribute_not_exists(#txpl)";
/// The header's creation: the `txId` idempotency point, shared with the lock path.
const CONDITION_NEW_HEADER: &str = "attribute_not_exists(#txpid)";
/// The version-token assignment merged into an `Update`'s `SET` clause.
const SET_VERSION: &str = "#txpv = :txpt";

/// What one fast-path call ended with.
#[derive(Debug)]
pub(super) enum FastWrite {
    /// Every request applied and the header created, committed.
    Committed,
    /// The `txId` is recorded already: its header as the failed `Put` found it (`ALL_OLD`),
    /// when DynamoDB returned it.
    Recorded(Option<Item>),
    /// Request `.0`'s item is held by a lock-path transaction: the item as it is.
    Locked(usize, Item),
    /// Request `.0`'s own condition failed on an unlocked item: final.
    ConditionFailed(usize),
    /// Request `.0`'s condition failed and the reason carries no item: absent, or DynamoDB
    /// left `ALL_OLD` out; a read tells.
    FailedUnread(usize),
    /// DynamoDB rejected request `.0` as invalid (its message): final.
    Invalid(usize, String),
    /// Another transaction was writing one of the items (or the same token's call is still in
    /// flight), or an item was throttled: nothing applied; send again.
    Conflict,
    /// DynamoDB refused the call as a whole (the 4 MB aggregate, for one): the lock path,
    /// which writes item by item, takes it.
    RefusedWhole(String),
}

/// The condition and placeholders of one request's action.
struct Guarded {
    condition: String,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Guarded {
    fn new(r: &Resolved) -> Result<Self, StoreError> {
        let req = &r.request;
        let mut names: HashMap<String, String> = req.names.clone().into_iter().collect();
        names.insert("#txpl".into(), ATTR_LOCK.into());
        let values = req.attribute_values().map_err(StoreError::from)?;
        let condition = match &req.condition_expression {
            Some(c) => format!("({c}) AND {CONDITION_UNLOCKED}"),
            None => CONDITION_UNLOCKED.to_string(),
        };
        Ok(Guarded {
            condition,
            names,
            values: values.into_iter().collect(),
        })
    }

    fn values(
        self,
    ) -> (
        String,
        HashMap<String, String>,
        Option<HashMap<String, AttributeValue>>,
    ) {
        let values = (!self.values.is_empty()).then_some(self.values);
        (self.condition, self.names, values)
    }
}

fn built<T>(what: &str, b: Result<T, impl std::fmt::Display>) -> Result<T, StoreError> {
    b.map_err(|e| StoreError::Inconsistent(format!("fast path {what}: {e}")))
}

/// Request `r`'s action: its own kind, condition `AND` unlocked; a `Put` or `Update` leaves
/// the fresh version `token` on the item (a lock-path transaction that read the item before
/// sees it move and reads again); a `Delete` leaves no item, a `ConditionCheck` writes nothing.
pub(super) fn request_entry(r: &Resolved, token: &str) -> Result<TransactWriteItem, StoreError> {
    let mut g = Guarded::new(r)?;
    let table = &r.request.table;
    let all_old = ReturnValuesOnConditionCheckFailure::AllOld;
    let entry = TransactWriteItem::builder();
    Ok(match &r.request.op {
        Operation::Put { item } => {
            let mut item: Item = crate::ddb::item::json_to_item(item)
                .map_err(<serde_dynamo::Error as serde::ser::Error>::custom)?;
            item.insert(ATTR_VERSION_TOKEN.into(), s(token));
            let (condition, names, values) = g.values();
            let put = Put::builder()
                .table_name(table)
                .set_item(Some(item))
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(values)
                .return_values_on_condition_check_failure(all_old)
                .build();
            entry.put(built("put", put)?).build()
        }
        Operation::Update {
            update_expression, ..
        } => {
            g.names.insert("#txpv".into(), ATTR_VERSION_TOKEN.into());
            g.values.insert(":txpt".into(), s(token));
            let update_expression = merge_set_clause(update_expression, SET_VERSION);
            let (condition, names, values) = g.values();
            let update = Update::builder()
                .table_name(table)
                .set_key(Some(r.key.clone()))
                .update_expression(update_expression)
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(values)
                .return_values_on_condition_check_failure(all_old)
                .build();
            entry.update(built("update", update)?).build()
        }
        Operation::Delete { .. } => {
            let (condition, names, values) = g.values();
            let delete = Delete::builder()
                .table_name(table)
                .set_key(Some(r.key.clone()))
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(values)
                .return_values_on_condition_check_failure(all_old)
                .build();
            entry.delete(built("delete", delete)?).build()
        }
        Operation::ConditionCheck { .. } => {
            let (condition, names, values) = g.values();
            let check = ConditionCheck::builder()
                .table_name(table)
                .set_key(Some(r.key.clone()))
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(values)
                .return_values_on_condition_check_failure(all_old)
                .build();
            entry.condition_check(built("check", check)?).build()
        }
    })
}

/// The header's action: `Put` of the decided header, only if the `txId` is not recorded.
pub(super) fn header_entry(tx_table: &str, header: Item) -> Result<TransactWriteItem, StoreError> {
    let put = Put::builder()
        .table_name(tx_table)
        .set_item(Some(header))
        .condition_expression(CONDITION_NEW_HEADER)
        .expression_attribute_names("#txpid", ATTR_TX_ID)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build();
    Ok(TransactWriteItem::builder()
        .put(built("header", put)?)
        .build())
}

/// What the cancellation reasons say, the header's (entry `requests`) first: recorded; then
/// a request's own condition (final, whatever else failed); then a lock; then an invalid
/// request; then a conflict.
fn cancelled(reasons: &[CancellationReason], requests: usize) -> Option<FastWrite> {
    let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
    if code(requests) == "ConditionalCheckFailed" {
        let old = reasons.get(requests).and_then(|r| r.item()).cloned();
        return Some(FastWrite::Recorded(old));
    }
    let failed = (0..requests).filter(|&i| code(i) == "ConditionalCheckFailed");
    let mut locked = None;
    for i in failed {
        match reasons.get(i).and_then(|r| r.item()) {
            Some(item) if lock_of(item).is_some() => locked = locked.or(Some((i, item.clone()))),
            Some(_) => return Some(FastWrite::ConditionFailed(i)),
            None => return Some(FastWrite::FailedUnread(i)),
        }
    }
    if let Some((i, item)) = locked {
        return Some(FastWrite::Locked(i, item));
    }
    if let Some(i) = (0..requests).find(|&i| code(i) == "ValidationError") {
        let message = reasons.get(i).and_then(|r| r.message()).unwrap_or_default();
        return Some(FastWrite::Invalid(i, message.to_string()));
    }
    if (0..=requests).any(|i| crate::txn::sent_again(code(i))) {
        return Some(FastWrite::Conflict);
    }
    None
}

/// Count the call and tell its endings apart.
pub(super) fn fast_outcome<R: std::fmt::Debug>(
    result: Result<TransactWriteItemsOutput, SdkError<TransactWriteItemsError, R>>,
    requests: usize,
    cost: &Cost,
) -> Result<FastWrite, StoreError> {
    let err = match result {
        Ok(out) => {
            cost.add_transactional(out.consumed_capacity(), requests + 1);
            return Ok(FastWrite::Committed);
        }
        Err(err) => err,
    };
    cost.add_failed();
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(e)) => {
            if let Some(ending) = cancelled(e.cancellation_reasons(), requests) {
                return Ok(ending);
            }
            let codes: Vec<&str> = e
                .cancellation_reasons()
                .iter()
                .map(|r| r.code().unwrap_or("None"))
                .collect();
            return Err(StoreError::Sdk {
                operation: "TransactWriteItems",
                class: ErrorClass::Transient,
                code: format!("TransactionCanceledException({})", codes.join(", ")),
                message: e.message().unwrap_or_default().to_string(),
                source: None,
            });
        }
        // The SDK retried a call whose first send is still being applied: the header decides.
        Some(TransactWriteItemsError::TransactionInProgressException(_)) => {
            return Ok(FastWrite::Conflict)
        }
        _ => {}
    }
    let err = StoreError::from_sdk("TransactWriteItems", err);
    if err.class() == ErrorClass::InvalidRequest {
        Ok(FastWrite::RefusedWhole(err.to_string()))
    } else {
        Err(err)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn resolved(request: Value) -> Resolved {
        crate::txn::resolve::resolved_for_test(request)
    }

    #[test]
    fn an_update_is_guarded_against_locks_and_stamps_a_fresh_token() {
        let r = resolved(json!({"Update":{"TableName":"Accounts","Key":{"PK":"a"},
            "UpdateExpression":"SET #b = #b - :a","ConditionExpression":"#b >= :a",
            "ExpressionAttributeNames":{"#b":"balance"},"ExpressionAttributeValues":{":a":30}}}));
        let entry = request_entry(&r, "tok").expect("entry");
        let update = entry.update().expect("an update");
        assert_eq!(
            update.condition_expression(),
            Some("(#b >= :a) AND attribute_not_exists(#txpl)")
        );
        assert_eq!(
            update.update_expression(),
            "SET #txpv = :txpt, #b = #b - :a"
        );
        let names = update.expression_attribute_names().expect("names");
        assert_eq!(names["#txpl"], ATTR_LOCK);
        assert_eq!(names["#txpv"], ATTR_VERSION_TOKEN);
        let values = update.expression_attribute_values().expect("values");
        assert_eq!(values[":txpt"], s("tok"));
    }

    #[test]
    fn a_put_carries_the_token_and_a_delete_none() {
        let put = resolved(json!({"Put":{"TableName":"Accounts","Item":{"PK":"a","n":1}}}));
        let entry = request_entry(&put, "tok").expect("entry");
        let put = entry.put().expect("a put");
        assert_eq!(put.item()[ATTR_VERSION_TOKEN], s("tok"));
        assert_eq!(put.condition_expression(), Some(CONDITION_UNLOCKED));
        let delete = resolved(json!({"Delete":{"TableName":"Accounts","Key":{"PK":"a"}}}));
        let entry = request_entry(&delete, "tok").expect("entry");
        assert!(entry.delete().is_some());
    }

    fn reason(code: &str, item: Option<Item>) -> CancellationReason {
        CancellationReason::builder()
            .code(code)
            .set_item(item)
            .build()
    }

    #[test]
    fn cancellation_reasons_are_read_header_first_then_conditions_then_locks() {
        let locked = Item::from([(ATTR_LOCK.to_string(), s("u#1"))]);
        let plain = Item::from([("PK".to_string(), s("b"))]);
        let header = Item::from([(ATTR_TX_ID.to_string(), s("t"))]);
        let r = [
            reason("ConditionalCheckFailed", Some(locked.clone())),
            reason("None", None),
            reason("ConditionalCheckFailed", Some(header)),
        ];
        assert!(matches!(
            cancelled(&r, 2),
            Some(FastWrite::Recorded(Some(_)))
        ));
        let r = [
            reason("ConditionalCheckFailed", Some(locked.clone())),
            reason("ConditionalCheckFailed", Some(plain)),
            reason("None", None),
        ];
        assert!(matches!(
            cancelled(&r, 2),
            Some(FastWrite::ConditionFailed(1))
        ));
        let r = [
            reason("TransactionConflict", None),
            reason("ConditionalCheckFailed", Some(locked)),
            reason("None", None),
        ];
        assert!(matches!(cancelled(&r, 2), Some(FastWrite::Locked(1, _))));
        let r = [reason("ConditionalCheckFailed", None), reason("None", None)];
        assert!(matches!(cancelled(&r, 1), Some(FastWrite::FailedUnread(0))));
        let r = [reason("None", None), reason("TransactionConflict", None)];
        assert!(matches!(cancelled(&r, 1), Some(FastWrite::Conflict)));
        let throttled = [reason("ThrottlingError", None), reason("None", None)];
        assert!(matches!(
            cancelled(&throttled, 1),
            Some(FastWrite::Conflict)
        ));
        let r = [reason("ProvisionedThroughputExceeded", None)];
        assert!(matches!(cancelled(&r, 1), Some(FastWrite::Conflict)));
        assert!(cancelled(&[reason("Unknown", None)], 1).is_none());
    }
}
