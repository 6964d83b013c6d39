//! The sweeper against DynamoDB Local: it acts on stale transactions only, reads the sharded
//! index (its 16 keys, nothing else), writes nothing for finished ones (they expire through
//! TTL), and stops at its deadline.

use crate::common;

use std::time::Duration;

use crate::txn::env::*;
use aws_sdk_dynamodb::types::AttributeValue;
use common::*;
use dev_testing::{client, client_with, FaultInjector};
use dynamodb_exactly_once::__private::epoch_seconds;
use dynamodb_exactly_once::txn::sweep::{SweepConfig, Sweeper};
use dynamodb_exactly_once::txn::{RollbackReason, TxState};
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Value};

#[tokio::test]
async fn sweeper_touches_only_stale_transactions() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    let c = env.coordinator(client());
    for a in 0..8 {
        seed(&base, &table, &format!("acc{a}"), 1000).await;
    }
    // Given 30 finished transactions
    for t in 0..30 {
        let body = transfer(&table, &format!("done{t}"), "acc0", "acc1", 1);
        let _ = c
            .run(&message(&c, &body), Deadline::none())
            .await
            .expect("done");
    }
    // and 3 abandoned after locking both of their accounts (pending),
    for t in 0..3 {
        let dying = env.coordinator(client_with(Some(FaultInjector::fail_from(6)), 1));
        let (from, to) = (format!("acc{}", 2 + 2 * t), format!("acc{}", 3 + 2 * t));
        let body = transfer(&table, &format!("stale{t}"), &from, &to, 5);
        assert!(dying
            .run(&message(&dying, &body), Deadline::none())
            .await
            .is_err());
    }
    let counting = FaultInjector::counting();
    let sweeper = env.sweeper(client_with(Some(counting.clone()), 1), 0, 3600);
    let summary = sweeper.sweep(Deadline::none()).await.expect("sweep");
    // then the sweep acts on the 3 stale ones only: no scan, one index query per shard (16),
    // and writes only for them (rollback + 2 undos + complete, at most).
    assert_eq!(summary.stale, 3, "{summary:?}");
    assert_eq!(counting.calls_of("Scan"), 0);
    assert_eq!(counting.calls_of("Query"), 16);
    assert_eq!(summary.index_queries, 16);
    assert!(summary.oldest_stale_ms > 0);
    let writes = counting.calls_of("UpdateItem")
        + counting.calls_of("PutItem")
        + counting.calls_of("DeleteItem");
    assert!(writes <= 3 * 4, "writes {writes}");
    assert_eq!(summary.write_calls as usize, writes);
    assert!(
        counting.calls_of("GetItem") <= 3 * 3,
        "{}",
        counting.calls_of("GetItem")
    );
    let now = items(&base, &table).await;
    assert_eq!(balance(&now, "acc2"), Some(1000));
    assert_eq!(balance(&now, "acc0"), Some(970));
    assert_clean(&base, &env).await;
    // and an operator reads each one's outcome from its TX record.
    let rolled_back = sweeper
        .status("stale0")
        .await
        .expect("read")
        .expect("record");
    assert_eq!(rolled_back.state, TxState::Completed);
    assert_eq!(rolled_back.decision, Some(TxState::RolledBack));
    assert_eq!(rolled_back.reason, Some(RollbackReason::Abandoned));
    let done = sweeper
        .status("done0")
        .await
        .expect("read")
        .expect("record");
    assert_eq!((done.decision, done.attempt), (Some(TxState::Committed), 1));
    assert_eq!(sweeper.status("never-sent").await.expect("read"), None);

    // A second sweep finds nothing and writes nothing: the 33 completed records left the
    // index; they expire through TTL at the end of the retention (no deletes by the sweeper).
    let again = sweep_all(&env, client()).await;
    assert_eq!((again.stale, again.write_calls), (0, 0));
    let retain = dynamodb_exactly_once::txn::TxConfig::builder("TxTable", ["Table"])
        .build()
        .expect("the defaults are valid")
        .retain();
    let horizon = epoch_seconds() + retain.as_secs();
    for (_, item) in scan(&base, env.tx()).await {
        let expires = item.get("ExpiresAt").and_then(Value::as_u64).unwrap_or(0);
        assert!(expires.abs_diff(horizon) < 600, "{item:?}");
    }
}

#[tokio::test]
async fn sweeper_stops_at_its_deadline() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 10).await;
    let dying = env.coordinator(client_with(Some(FaultInjector::fail_from(3)), 1));
    let body = json!({"txId":"late","requests":[update(&table, "a", 1)]});
    let _ = dying.run(&message(&dying, &body), Deadline::none()).await;
    let expired = Deadline::after(Duration::ZERO);
    let summary = env
        .sweeper(client(), 0, 3600)
        .sweep(expired)
        .await
        .expect("sweep");
    assert!(summary.stopped_early);
    assert_eq!(summary.stale, 0);
    assert_eq!(sweep_all(&env, client()).await.rolled_back, 1);
}

/// Review finding 10: stale entries were read oldest first, at most 1,000 per shard, so a
/// backlog of records that fail to drive (here, naming a table that does not exist) starved
/// every transaction that went stale after them. Half of each shard's budget now goes to the
/// newest.
#[tokio::test]
async fn a_backlog_of_undrivable_records_does_not_starve_newer_stale_ones() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    // Given a transfer abandoned holding both items (stale at once for this sweeper),
    abandon(&env, &transfer(&table, "t-starved", "alice", "bob", 30)).await;
    // in a shard whose oldest entries are six records that can never be driven,
    let shard = "open#00";
    set_header(
        &base,
        &env,
        "t-starved",
        "SweepKey",
        AttributeValue::S(shard.into()),
    )
    .await;
    for i in 0..6 {
        let requests = json!([{"Delete":{"TableName":"NoSuchTable","Key":{"PK":"x"}}}]);
        base.put_item()
            .table_name(env.tx())
            .item("TxId", AttributeValue::S(format!("poison-{i}")))
            .item("Part", AttributeValue::S("#".into()))
            .item("State", AttributeValue::S("pending".into()))
            .item("Version", AttributeValue::N("1".into()))
            .item("Attempt", AttributeValue::N("1".into()))
            .item("Requests", AttributeValue::S(requests.to_string()))
            .item("SweepKey", AttributeValue::S(shard.into()))
            .item("LastTouched", AttributeValue::N((1_000 + i).to_string()))
            .send()
            .await
            .expect("a poison record");
    }
    // when a sweeper that reads 4 entries per shard runs,
    let config = SweepConfig::builder(env.tx())
        .stale_after(Duration::ZERO)
        .retain(Duration::from_secs(3600))
        .redelivery_gap(Duration::ZERO)
        .redelivery_horizon(Duration::ZERO)
        .max_due_per_shard(4)
        .build()
        .expect("valid configuration");
    let sweeper = Sweeper::new(client(), config);
    let _ = sweeper.sweep(Deadline::none()).await;
    // then the abandoned transfer is rolled back and its items restored.
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(100), Some(0))
    );
    assert!(!now["alice"].contains_key("_txLock"), "{now:?}");
}
