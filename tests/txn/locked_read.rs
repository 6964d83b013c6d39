//! Locked reads are a snapshot or an error: a reader whose locks were taken over while it read
//! (a contender rolled its read transaction back after the patience) never returns values
//! mixed from before and after the contender's transfer (review of transactions, finding 2).

use std::time::Duration;

use crate::txn::env::*;
use dev_testing::{client, At, Interleaving};
use dynamodb_exactly_once::txn::{TxError, TxOutcome};
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Map, Value};

fn key(pk: &str) -> Map<String, Value> {
    json!({ "PK": pk }).as_object().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_read_rolled_back_under_it_is_refused_never_a_mixed_snapshot() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    // Given a reader whose second read of `b` (after it locked both items) takes 1.5 s
    let il = Interleaving::new();
    il.delay_before(
        "R",
        At::op("GetItem").table(&table).containing("\"b\"").nth(2),
        Duration::from_millis(1500),
    );
    // (its snapshot read cancelled, as by a write in flight: it takes the lock-based read)
    il.conflict("R", At::op("TransactGetItems"));
    let reader = env.sequential(il.client("R", 1));
    let writer = env.coordinator(client());
    let keys = [(table.clone(), key("a")), (table.clone(), key("b"))];
    // When a transfer a → b meets the reader's silent locks, rolls it back and commits meanwhile
    let read = tokio::spawn({
        let keys = keys.clone();
        async move { reader.read_locked(&keys).await }
    });
    let moved = tokio::spawn({
        let body = transfer(&table, "t-under-read", "a", "b", 30);
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            writer.run(&message(&writer, &body), Deadline::none()).await
        }
    });
    let (read, moved) = (read.await.expect("reader"), moved.await.expect("writer"));
    for c in il.calls("R") {
        eprintln!(
            "CALL {} {} {}",
            c.index,
            c.operation,
            &c.body.chars().take(160).collect::<String>()
        );
    }
    eprintln!("READ {read:?}");
    assert_eq!(moved.expect("transfer").outcome, TxOutcome::Committed);
    // Then the read is refused (retryable), or its values are one consistent state
    match read {
        Err(TxError::Contention { .. }) => {}
        Ok(values) => {
            let sum: i64 = values
                .iter()
                .filter_map(|v| v.as_ref()?.get("balance")?.as_i64())
                .sum();
            assert_eq!(sum, 100, "a locked read mixed two states: {values:?}");
        }
        Err(other) => panic!("unexpected error {other}"),
    }
    // And once nothing runs, a locked read sees the committed transfer
    let values = env
        .coordinator(client())
        .read_locked(&keys)
        .await
        .expect("read");
    let balances: Vec<Option<i64>> = values
        .iter()
        .map(|v| v.as_ref().and_then(|i| i.get("balance")?.as_i64()))
        .collect();
    assert_eq!(balances, [Some(70), Some(30)]);
}

/// A locked read of items no transaction holds is one `TransactGetItems` and writes nothing;
/// with an item locked it takes the lock-based read (and still returns committed values).
#[tokio::test]
async fn a_locked_read_of_unlocked_items_is_one_snapshot_call() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    let keys = [
        (table.clone(), key("a")),
        (table.clone(), key("b")),
        (table.clone(), key("none")),
    ];
    let counting = dev_testing::FaultInjector::counting();
    let reader = env.coordinator(dev_testing::client_with(Some(counting.clone()), 1));
    let values = reader.read_locked(&keys).await.expect("read");
    let balances: Vec<Option<i64>> = values
        .iter()
        .map(|v| v.as_ref().and_then(|i| i.get("balance")?.as_i64()))
        .collect();
    assert_eq!(balances, [Some(100), Some(0), None]);
    assert_eq!(counting.calls(), 1, "one TransactGetItems, nothing written");
    assert_eq!(counting.calls_of("TransactGetItems"), 1);
    // A lock-path transfer that died holding both items: the read meets its locks.
    let dying = env.coordinator(dev_testing::client_with(
        Some(dev_testing::FaultInjector::fail_from(6)),
        1,
    ));
    let body = transfer(&table, "t-held", "a", "b", 30);
    assert!(dying
        .run(&message(&dying, &body), Deadline::none())
        .await
        .is_err());
    let values = reader.read_locked(&keys[..2]).await.expect("read");
    let sum: i64 = values
        .iter()
        .filter_map(|v| v.as_ref()?.get("balance")?.as_i64())
        .sum();
    assert_eq!(sum, 100, "{values:?}");
    assert!(
        counting.calls() > 3,
        "the lock-based read: {}",
        counting.calls()
    );
}

#[tokio::test]
async fn a_locked_read_too_large_for_one_snapshot_call_is_taken_under_locks() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = env.accounts().to_string();
    // Given 25 items of 180 KB: 4.5 MB, more than one `TransactGetItems` answers
    let pad = aws_sdk_dynamodb::types::AttributeValue::S("p".repeat(180_000));
    for i in 0..25 {
        base.put_item()
            .table_name(&table)
            .item(
                "PK",
                aws_sdk_dynamodb::types::AttributeValue::S(format!("k{i:02}")),
            )
            .item("pad", pad.clone())
            .send()
            .await
            .expect("seed");
    }
    let keys: Vec<(String, Map<String, Value>)> = (0..25)
        .map(|i| (table.clone(), key(&format!("k{i:02}"))))
        .collect();
    // When they are read together under `Locked`
    let c = env.coordinator(client());
    let values = c.read_locked(&keys).await;
    // Then DynamoDB's refusal of the snapshot call sends the read to the lock-based way
    let values = values.expect("a snapshot under locks");
    assert_eq!(values.len(), 25);
    assert!(values.iter().all(|v| v
        .as_ref()
        .and_then(|i| i.get("pad"))
        .and_then(Value::as_str)
        .map(str::len)
        == Some(180_000)));
    assert_clean(&base, &env).await;
}
