//! The checker's modes that touch the table directly: locks rewritten in the previous
//! release's format, and the pool item of the number-key mode.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::txn::ITEM_PROTOCOL_ATTRIBUTES;

use super::plan::Plan;

/// Rewrite every keep lock (`txId#attempt#k`) on the plan's accounts as the release before
/// keep locks wrote it: the plain lock `txId#attempt`, and the item's values saved as its
/// image unless the lock inserted the item (a check of an absent item: `_txTransient`).
/// Markers and token stay. Returns how many locks were rewritten.
pub async fn downgrade_keep_locks(client: &Client, table: &str, plan: &Plan) -> usize {
    let mut rewritten = 0;
    for pk in &plan.accounts {
        let Ok(out) = client
            .get_item()
            .table_name(table)
            .key("PK", AttributeValue::S(pk.clone()))
            .consistent_read(true)
            .send()
            .await
        else {
            continue;
        };
        let Some(item) = out.item().cloned() else {
            continue;
        };
        let Some(lock) = item.get("_txLock").and_then(|v| v.as_s().ok()).cloned() else {
            continue;
        };
        let Some(plain) = lock.strip_suffix("#k") else {
            continue;
        };
        let mut old = item.clone();
        old.insert("_txLock".into(), AttributeValue::S(plain.to_string()));
        let transient = matches!(item.get("_txTransient"), Some(AttributeValue::Bool(true)));
        if !transient {
            let values: HashMap<String, AttributeValue> = item
                .iter()
                .filter(|(k, _)| !ITEM_PROTOCOL_ATTRIBUTES.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            old.insert("_txImage".into(), AttributeValue::M(values));
        }
        let put = client
            .put_item()
            .table_name(table)
            .set_item(Some(old))
            .condition_expression("#l = :keep")
            .expression_attribute_names("#l", "_txLock")
            .expression_attribute_values(":keep", AttributeValue::S(lock.clone()))
            .send()
            .await;
        if put.is_ok() {
            rewritten += 1;
        }
    }
    rewritten
}

/// With the number-key mode, the pool item counts every applied transaction once (each
/// `ADD`s 1 to it, its key spelled its own way) and carries no protocol attribute.
pub async fn check_pool(
    client: &Client,
    numeric: &str,
    plan: &Plan,
    applied: usize,
) -> Result<(), String> {
    let Some(id) = plan.pool else {
        return Ok(());
    };
    let out = client
        .get_item()
        .table_name(numeric)
        .key("id", AttributeValue::N(id.to_string()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| format!("GetItem of the pool: {e}"))?;
    let item = out.item().cloned().unwrap_or_default();
    // A committed write's version token (`_txVer`) stays; nothing else may.
    if let Some(name) = ["_txLock", "_txImage", "_txDelete", "_txTransient"]
        .iter()
        .find(|n| item.contains_key(**n))
    {
        return Err(format!(
            "pool {id} still has {name} after a sweep: {item:?}"
        ));
    }
    let n = match item.get("n") {
        Some(AttributeValue::N(n)) => n.parse::<usize>().map_err(|e| e.to_string())?,
        None => 0,
        Some(other) => return Err(format!("pool {id}: n is {other:?}")),
    };
    if n != applied {
        return Err(format!(
            "pool {id} counts {n} transactions, {applied} applied (keys spelled several ways)"
        ));
    }
    Ok(())
}
