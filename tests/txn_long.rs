//! Transactions that take long (issue 8, findings 8 and 10): heartbeats keep a coordinator
//! that is still working from being rolled back, by the sweeper between two deliveries and by
//! contenders while it locks; and what a plain (non-transactional) write does next to a
//! transaction, exactly as the protocol documents it.

mod common;
mod txn_env;

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dynamo_protocols::txn::{Coordinator, TxOutcome};
use dynamo_protocols::Deadline;
use dynamo_testing::{client, At, Interleaving};
use serde_json::{json, Value};
use txn_env::*;

/// The header's `Attempt`.
async fn attempt_of(base: &Client, env: &Env, tx_id: &str) -> u64 {
    let header = base
        .get_item()
        .table_name(env.tx())
        .key("TxId", AttributeValue::S(tx_id.into()))
        .key("Part", AttributeValue::S("#".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get")
        .item
        .expect("header");
    header["Attempt"]
        .as_n()
        .expect("n")
        .parse()
        .expect("attempt")
}

fn add_one_to_each(table: &str, tx_id: &str, keys: &[String]) -> Value {
    let requests: Vec<Value> = keys.iter().map(|k| update(table, k, 1)).collect();
    json!({"txId": tx_id, "requests": requests})
}

/// A coordinator with the production patience and heartbeat (1 s, 250 ms).
fn coordinator_with_heartbeats(env: &Env, client: Client) -> Coordinator {
    let mut c = env.config();
    c.lock_patience = dynamo_protocols::txn::DEFAULT_LOCK_PATIENCE;
    c.heartbeat_every = dynamo_protocols::txn::DEFAULT_HEARTBEAT_EVERY;
    c.concurrency = 1;
    Coordinator::new(client, c)
}

/// Finding 8: a transaction whose lock phase needs three deliveries (each invocation ends
/// after two lock writes) is resumed, not rolled back by a sweeper that runs between the
/// deliveries: each delivery writes a heartbeat before locking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_spanning_three_deliveries_is_not_rolled_back_between_them() {
    let base = client();
    let env = Env::new(&base).await;
    let table = env.accounts().to_string();
    let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    for k in &keys {
        seed(&base, &table, k, 0).await;
    }
    let body = add_one_to_each(&table, "long", &keys);
    let il = Interleaving::new();
    // Given a first delivery that locks two items, then ends (its third lock write never
    // leaves: the invocation timed out),
    il.refuse("d1", At::op("TransactWriteItems").nth(3));
    let d1 = coordinator_with_heartbeats(&env, il.client("d1", 1));
    assert!(d1
        .run(&message(&d1, &body), Deadline::none())
        .await
        .is_err());
    // and a second delivery, longer than the sweeper's stale threshold after the creation,
    // that adopts those two, locks two more and ends the same way,
    tokio::time::sleep(Duration::from_millis(2200)).await;
    il.refuse("d2", At::op("TransactWriteItems").nth(3));
    let d2 = coordinator_with_heartbeats(&env, il.client("d2", 1));
    assert!(d2
        .run(&message(&d2, &body), Deadline::none())
        .await
        .is_err());
    // when the sweeper (stale after 2 s) runs before the third delivery,
    let summary = env
        .sweeper(client(), 2, 3600)
        .sweep(Deadline::none())
        .await
        .expect("sweep");
    // then it leaves the transaction alone (the second delivery's heartbeat is recent),
    assert_eq!((summary.stale, summary.rolled_back), (0, 0), "{summary:?}");
    // and the third delivery commits it in its first attempt, each item changed once.
    let d3 = coordinator_with_heartbeats(&env, client());
    let report = d3
        .run(&message(&d3, &body), Deadline::none())
        .await
        .expect("third delivery");
    assert_eq!(report.outcome, TxOutcome::Committed);
    assert_eq!(attempt_of(&base, &env, "long").await, 1);
    let now = items(&base, &table).await;
    for k in &keys {
        assert_eq!(balance(&now, k), Some(1), "{k}");
    }
    assert_clean(&base, &env).await;
}

/// Finding 8: a contender that meets the lock of a coordinator that is still locking (slowly:
/// every lock write takes 250 ms) waits for it instead of rolling it back after its patience.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contender_does_not_roll_back_a_holder_that_is_still_locking() {
    let base = client();
    let env = Env::new(&base).await;
    let table = env.accounts().to_string();
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    for k in &keys {
        seed(&base, &table, k, 0).await;
    }
    let il = Interleaving::new();
    for _ in &keys {
        il.delay_before(
            "slow",
            At::op("TransactWriteItems"),
            Duration::from_millis(250),
        );
    }
    // Given a holder whose lock phase takes about 2 s (twice the contenders' patience),
    let slow = coordinator_with_heartbeats(&env, il.client("slow", 1));
    let body = add_one_to_each(&table, "slow", &keys);
    let holder = tokio::spawn(async move {
        let m = message(&slow, &body);
        slow.run(&m, Deadline::none()).await
    });
    // (it holds the first item once its second lock write is on its way),
    while il
        .calls("slow")
        .iter()
        .filter(|c| c.operation == "TransactWriteItems")
        .count()
        < 2
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // when a contender needs that item meanwhile,
    let contender = coordinator_with_heartbeats(&env, client());
    let body = add_one_to_each(&table, "contender", &keys[..1]);
    let report = contender
        .run(&message(&contender, &body), Deadline::none())
        .await
        .expect("contender");
    // then both commit, the holder in its first attempt (it was never rolled back).
    assert_eq!(report.outcome, TxOutcome::Committed);
    let held = holder.await.expect("join").expect("holder");
    assert_eq!(held.outcome, TxOutcome::Committed);
    assert_eq!(attempt_of(&base, &env, "slow").await, 1);
    let now = items(&base, &table).await;
    assert_eq!(balance(&now, "k0"), Some(2));
    assert_clean(&base, &env).await;
}
