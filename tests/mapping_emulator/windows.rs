//! Tumbling windows: state carried between the batches of a window, the final invoke, a
//! failed invoke retried with its state, a missing state, a state over 1 MB, a shard's end.

use std::time::Duration;

use dev_testing::Shape;
use serde_json::{json, Value};

use super::{config, env, events, handler, keys, HOUR, SECOND};

/// Adds the batch's record count to `state.count` (a string: Lambda's Java and Rust types
/// read the state as a map of strings).
fn counting(ev: &Value) -> Value {
    let before: usize = ev["state"]["count"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let count = before + keys(ev).len();
    json!({"state": {"count": count.to_string()}, "batchItemFailures": []})
}

fn flags(ev: &Value) -> (bool, bool) {
    (
        ev["isFinalInvokeForWindow"].as_bool().unwrap_or(false),
        ev["isWindowTerminatedEarly"].as_bool().unwrap_or(false),
    )
}

#[tokio::test]
async fn a_window_carries_state_between_batches_and_ends_with_a_final_invoke() {
    let e = env(Shape::shards(1)).await;
    e.insert(&["a", "b", "c"]);
    let mut m = e.mapping(config().batch_size(2).tumbling_window_secs(60));
    let (log, h) = handler(|ev, _| Ok(counting(ev)));
    m.run_until_idle(&h, 10).await.expect("run");
    let evs = events(&log);
    assert_eq!(evs.len(), 2, "two batches, the window still open: {evs:?}");
    assert_eq!(evs[0]["state"], json!({}));
    assert_eq!(evs[1]["state"], json!({"count": "2"}));
    assert_eq!(flags(&evs[1]), (false, false));
    let shard = e.double.listed_shards(&e.arn)[0].shard_id.clone();
    assert_eq!(evs[0]["shardId"], json!(shard));
    assert_eq!(evs[0]["eventSourceARN"], json!(e.arn));
    e.clock.advance(60 * SECOND);
    m.run_until_idle(&h, 10).await.expect("run");
    let evs = events(&log);
    assert_eq!(evs.len(), 3);
    assert_eq!(
        keys(&evs[2]).len(),
        0,
        "the final invoke may have no records"
    );
    assert_eq!(flags(&evs[2]), (true, false));
    assert_eq!(evs[2]["state"], json!({"count": "3"}));
    e.insert(&["d"]);
    m.run_until_idle(&h, 10).await.expect("run");
    let evs = events(&log);
    assert_eq!(
        evs[3]["state"],
        json!({}),
        "a new window starts with a fresh state"
    );
    assert_ne!(evs[3]["window"]["start"], evs[0]["window"]["start"]);
}

#[tokio::test]
async fn a_failed_invoke_is_retried_with_the_state_it_was_given() {
    let e = env(Shape::shards(1)).await;
    e.insert(&["a", "b", "c"]);
    let mut m = e.mapping(config().batch_size(1).tumbling_window_secs(60));
    let (log, h) = handler(|ev, n| {
        if n == 1 {
            Err("crash".into())
        } else {
            Ok(counting(ev))
        }
    });
    m.run_until_idle(&h, 10).await.expect("run");
    let evs = events(&log);
    assert_eq!(keys(&evs[1]), keys(&evs[2]), "the same batch again");
    assert_eq!(evs[1]["state"], evs[2]["state"], "with the same state");
    assert_eq!(evs[3]["state"], json!({"count": "2"}), "b counted once");
}

#[tokio::test]
async fn a_response_without_state_is_a_failed_invoke() {
    let e = env(Shape::shards(1)).await;
    e.insert(&["a"]);
    let mut m = e.mapping(config().tumbling_window_secs(60));
    let (log, h) = handler(|ev, n| {
        if n == 0 {
            Ok(Value::Null)
        } else {
            Ok(counting(ev))
        }
    });
    m.run_until_idle(&h, 10).await.expect("run");
    let evs = events(&log);
    assert_eq!(evs.len(), 2);
    assert_eq!(keys(&evs[0]), keys(&evs[1]));
    assert_eq!(m.stats().failed_invocations, 1);
}

#[tokio::test]
async fn a_state_over_one_megabyte_ends_the_window_early() {
    let e = env(Shape::shards(1)).await;
    e.insert(&["a", "b"]);
    let mut m = e.mapping(config().batch_size(1).tumbling_window_secs(60));
    let big = "x".repeat(1 << 20);
    let (log, h) = handler(move |ev, n| {
        if n == 0 {
            Ok(json!({"state": {"big": big.clone()}}))
        } else {
            Ok(counting(ev))
        }
    });
    m.run_until_idle(&h, 10).await.expect("run");
    let evs = events(&log);
    assert_eq!(keys(&evs[0]), ["a"]);
    assert_eq!(
        flags(&evs[1]),
        (true, true),
        "the next invoke ends the window early"
    );
    assert_eq!(keys(&evs[1]).len(), 0);
    assert!(
        evs[1]["state"]["big"].is_string(),
        "with the state it carried"
    );
    assert_eq!(keys(&evs[2]), ["b"]);
    assert_eq!(
        evs[2]["state"],
        json!({}),
        "the window continues with a fresh state"
    );
    assert_eq!(evs[2]["window"], evs[0]["window"]);
    assert_eq!(m.stats().windows_terminated_early, 1);
}

#[tokio::test]
async fn a_shards_end_ends_its_window_before_the_child_is_read() {
    let e = env(Shape::shards(1).rollover(Duration::from_secs(3600))).await;
    e.clock.advance(HOUR - 10 * SECOND);
    e.insert(&["p"]);
    e.clock.advance(20 * SECOND);
    e.insert(&["c"]);
    let mut m = e.mapping(config().tumbling_window_secs(900));
    let (log, h) = handler(|ev, _| Ok(counting(ev)));
    m.run_until_idle(&h, 20).await.expect("run");
    let evs = events(&log);
    let seen: Vec<(Vec<String>, bool)> = evs.iter().map(|e| (keys(e), flags(e).0)).collect();
    assert_eq!(
        seen[0],
        (vec!["p".to_string()], true),
        "the parent's last batch is its window's final invoke"
    );
    assert_eq!(seen[1], (vec!["c".to_string()], false));
    assert_ne!(evs[1]["shardId"], evs[0]["shardId"]);
    assert_eq!(evs[1]["state"], json!({}));
}
