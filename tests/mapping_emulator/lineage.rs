//! Shards: lineage, one batch per shard at a time, lanes by partition key, the batching
//! window, the starting position, trimmed positions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dev_testing::mapping::StartingPosition;
use dev_testing::Shape;
use serde_json::Value;

use super::{all_keys, config, env, events, handler, keys, seqs, HOUR, SECOND};

#[tokio::test]
async fn a_child_shard_is_read_only_after_its_parent_is_done() {
    let e = env(Shape::shards(1).rollover(Duration::from_secs(3600))).await;
    e.insert(&["p1", "p2"]);
    e.clock.advance(HOUR);
    e.insert(&["c1"]);
    let mut m = e.mapping(config().batch_size(1));
    // The parent's first record fails three times: nothing of the child may be invoked.
    let (log, h) = handler(|ev, n| {
        if n < 3 && super::keys(ev) == ["p1"] {
            Err("boom".into())
        } else {
            Ok(Value::Null)
        }
    });
    for _ in 0..3 {
        m.step(&h).await.expect("step");
    }
    assert_eq!(all_keys(&log), ["p1", "p1", "p1"]);
    m.run_until_idle(&h, 20).await.expect("run");
    assert_eq!(all_keys(&log), ["p1", "p1", "p1", "p1", "p2", "c1"]);
    let listed = e.double.listed_shards(&e.arn);
    assert_eq!(listed.len(), 2);
    assert!(m.checkpoints()[&listed[0].shard_id].done, "parent done");
}

#[tokio::test]
async fn one_batch_per_shard_at_a_time_and_shards_in_parallel() {
    let e = env(Shape::shards(3)).await;
    let keys: Vec<String> = (0..60).map(|i| format!("k{i}")).collect();
    e.insert(&keys.iter().map(String::as_str).collect::<Vec<_>>());
    let mut m = e.mapping(config().batch_size(5));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (f, p) = (Arc::clone(&in_flight), Arc::clone(&peak));
    let h = move |ev: Value| {
        let (f, p) = (Arc::clone(&f), Arc::clone(&p));
        async move {
            let now = f.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(5)).await;
            f.fetch_sub(1, Ordering::SeqCst);
            assert!(super::records(&ev).len() <= 5);
            Ok::<_, String>(Value::Null)
        }
    };
    let mut steps = 0;
    while m.stats().records_succeeded < 60 && steps < 100 {
        let r = m.step(&h).await.expect("step");
        assert!(
            r.invocations <= 3,
            "at most one batch per shard per step: {r:?}"
        );
        steps += 1;
    }
    assert_eq!(m.stats().records_succeeded, 60);
    assert!(
        peak.load(Ordering::SeqCst) > 1,
        "shards are invoked at once"
    );
}

#[tokio::test]
async fn parallelization_runs_lanes_at_once_and_keeps_order_per_partition_key() {
    let e = env(Shape::shards(1)).await;
    let writes: Vec<String> = (0..80).map(|i| format!("k{}", i % 8)).collect();
    e.insert(&writes.iter().map(String::as_str).collect::<Vec<_>>());
    let mut m = e.mapping(config().batch_size(4).parallelization_factor(4));
    let (log, h) = handler(|_, _| Ok(Value::Null));
    let mut max_per_step = 0;
    for _ in 0..60 {
        let r = m.step(&h).await.expect("step");
        max_per_step = max_per_step.max(r.invocations);
        if r.is_idle() {
            break;
        }
    }
    assert_eq!(m.stats().records_succeeded, 80);
    assert!(
        max_per_step > 1 && max_per_step <= 4,
        "lanes at once: {max_per_step}"
    );
    // Each key's records arrive in sequence order.
    let mut last: HashMap<String, u128> = HashMap::new();
    for ev in events(&log) {
        for (k, s) in keys(&ev).into_iter().zip(seqs(&ev)) {
            let s: u128 = s.parse().expect("seq");
            let prev = last.insert(k.clone(), s);
            assert!(prev.is_none_or(|p| p < s), "{k} out of order");
        }
    }
}

#[tokio::test]
async fn the_batching_window_waits_for_a_full_batch_or_its_end() {
    let e = env(Shape::shards(1)).await;
    e.insert(&["a", "b"]);
    let mut m = e.mapping(config().batch_size(3).maximum_batching_window_secs(10));
    let (log, h) = handler(|_, _| Ok(Value::Null));
    m.step(&h).await.expect("step");
    assert!(events(&log).is_empty(), "2 of 3 records, window not passed");
    e.clock.advance(10 * SECOND);
    m.step(&h).await.expect("step");
    assert_eq!(all_keys(&log), ["a", "b"]);
    e.insert(&["c", "d", "e", "f"]);
    m.step(&h).await.expect("step");
    assert_eq!(
        super::keys(&events(&log)[1]),
        ["c", "d", "e"],
        "a full batch goes at once"
    );
}

#[tokio::test]
async fn starting_position_latest_skips_what_was_written_before() {
    let e = env(Shape::shards(2)).await;
    e.insert(&["old1", "old2"]);
    let mut m = e.mapping(config().starting_position(StartingPosition::Latest));
    let (log, h) = handler(|_, _| Ok(Value::Null));
    m.run_until_idle(&h, 10).await.expect("run");
    e.insert(&["new1"]);
    m.run_until_idle(&h, 10).await.expect("run");
    assert_eq!(all_keys(&log), ["new1"]);
}

#[tokio::test]
async fn a_trimmed_position_restarts_at_the_trim_horizon_and_is_counted() {
    let e = env(Shape::shards(1).retention(Duration::from_secs(3600))).await;
    e.insert(&["a", "lost"]);
    let mut m = e.mapping(config().batch_size(1));
    let (log, h) = handler(|_, _| Ok(Value::Null));
    m.step(&h).await.expect("step"); // reads and delivers a; "lost" is not read yet
    e.clock.advance(2 * HOUR);
    e.insert(&["after"]);
    m.run_until_idle(&h, 10).await.expect("run");
    assert_eq!(all_keys(&log), ["a", "after"]);
    assert_eq!(m.stats().trimmed_skips, 1);
    assert_eq!(m.trimmed().len(), 1);
    assert!(m.trimmed()[0].after.is_some(), "{:?}", m.trimmed());
}
