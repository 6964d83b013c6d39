//! The checker's modes that touch the table directly: locks rewritten in the previous
//! release's format, and the pool item of the number-key mode.

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

use dev_testing::Interleaving;
use dynamodb_exactly_once::txn::Coordinator;
use dynamodb_exactly_once::Deadline;
use rand::rngs::StdRng;
use rand::Rng;

use super::plan::Plan;
use super::Tables;
use crate::txn::env::{downgrade_keep_lock, message};

/// Previous-format mode, before the schedule's actors: "an older coordinator" starts every
/// message on the lock path and dies after a few calls (their attempts are left
/// locking), then every keep lock left is rewritten as that release writes it. Returns how
/// many locks were rewritten.
pub async fn leave_attempts_of_the_previous_release(
    tables: &Tables,
    client: &Client,
    plan: &Plan,
    rng: &mut StdRng,
) -> Result<usize, String> {
    let il = Interleaving::new();
    for (t, m) in plan.messages.iter().enumerate() {
        let name = format!("old{t}");
        il.crash_from(&name, rng.random_range(3..9));
        let config = tables
            .builder()
            .fast_path(false)
            .lock_chunk(rng.random_range(1..=3))
            .build()
            .map_err(|e| e.to_string())?;
        let old = Coordinator::new(il.client(&name, 1), config);
        let _ = old.run(&message(&old, &m.body), Deadline::none()).await;
    }
    Ok(downgrade_keep_locks(client, tables.env.accounts(), plan).await)
}

/// Rewrite every keep lock (`txId#attempt#k`) on the plan's accounts as the release before
/// keep locks wrote it ([`downgrade_keep_lock`]). Returns how many locks were rewritten.
pub async fn downgrade_keep_locks(client: &Client, table: &str, plan: &Plan) -> usize {
    let mut rewritten = 0;
    for pk in &plan.accounts {
        if downgrade_keep_lock(client, table, pk).await {
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
