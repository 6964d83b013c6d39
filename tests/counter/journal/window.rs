//! The roll-up's hold as the mapping's tumbling window: a window's keys travel in the state
//! Lambda keeps with the shard's checkpoint and are applied at the window's final invoke, one
//! update per counter item and window; killed, lost or duplicated invocations count each key
//! once (the mapping invokes again with the state it gave).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dev_testing::mapping::{Fault, Mapping, MappingConfig};
use dev_testing::{client_with, FaultInjector, Shape};
use serde_json::Value;

use crate::counter::journal::shapes::{adding, invoke, Harness};

const MINUTE: u64 = 60_000;

/// The mapping with a 15-minute tumbling window and no batching window.
fn mapping(h: &Harness) -> Mapping {
    let config = MappingConfig::builder()
        .batch_size(100)
        .bisect_batch_on_function_error(true)
        .report_batch_item_failures(true)
        .tumbling_window_secs(900)
        .filter_pattern(serde_json::json!({"eventName": ["INSERT"]}))
        .build()
        .expect("mapping config");
    Mapping::new(h.double.client(), &h.arn, config).with_clock(h.clock.clone())
}

/// The roll-up function whose DynamoDB client counts its `UpdateItem`s in `updates`.
fn counting(
    h: &Harness,
    updates: &Arc<AtomicUsize>,
) -> impl Fn(Value) -> futures::future::BoxFuture<'static, Result<Value, String>> {
    let seen = Arc::clone(updates);
    let faults = FaultInjector::by_request(move |op, _| {
        if op == "UpdateItem" {
            seen.fetch_add(1, Ordering::SeqCst);
        }
        dev_testing::Fault::None
    });
    let f = h.function_holding(client_with(Some(faults), 3), true);
    move |event: Value| {
        let f = Arc::clone(&f);
        Box::pin(async move { invoke(&f, event).await })
    }
}

/// Fifteen minutes of a key a minute on items a and b, the mapping stepped each minute, then
/// the window's end: the totals before and after it.
async fn fifteen_minutes(
    h: &Harness,
    mapping: &mut Mapping,
    handler: &(impl dev_testing::mapping::Handler + ?Sized),
) -> ((i64, i64), (i64, i64)) {
    let counter = h.counter();
    // Start at a window's start (windows are aligned on the epoch).
    let now = h.now.load(Ordering::SeqCst);
    h.advance(15 * MINUTE - now % (15 * MINUTE) + 1000);
    for minute in 0..15 {
        let records = [
            adding(&counter, "a", "n", 1, &format!("a{minute}")),
            adding(&counter, "b", "n", 2, &format!("b{minute}")),
        ];
        h.journal(&counter, &records).await;
        mapping.run_until_idle(handler, 100).await.expect("mapping");
        if minute < 14 {
            h.advance(MINUTE);
        }
    }
    let before = (h.total("a", "n").await, h.total("b", "n").await);
    h.advance(2 * MINUTE);
    mapping.run_until_idle(handler, 100).await.expect("mapping");
    (before, (h.total("a", "n").await, h.total("b", "n").await))
}

#[tokio::test]
async fn a_window_holds_an_items_keys_and_applies_them_with_one_update_at_its_end() {
    let h = Harness::new(Shape::shards(1)).await;
    let mut mapping = mapping(&h);
    let updates = Arc::new(AtomicUsize::new(0));
    let handler = counting(&h, &updates);
    let (before, after) = fifteen_minutes(&h, &mut mapping, &handler).await;
    assert_eq!(before, (0, 0), "held in the window's state");
    assert_eq!(after, (15, 30), "{:?}", mapping.stats());
    assert_eq!(
        updates.load(Ordering::SeqCst),
        2,
        "one update per item and window"
    );
    assert!(mapping.on_failure_messages().is_empty());
    h.drop_tables().await;
}

#[tokio::test]
async fn a_final_invoke_killed_its_answer_lost_or_delivered_twice_counts_each_key_once() {
    let h = Harness::new(Shape::shards(1)).await;
    let mut mapping = mapping(&h);
    // The window's final invoke: killed at its second await, then its answer lost, then
    // delivered twice; every other invocation: killed once at its first await (a non-final
    // invocation of records the journal wrote awaits nothing: it only adds them to the state,
    // so it is never cut there).
    mapping.set_faults(|info| match (info.final_for_window, info.attempt) {
        (true, 0) => Fault::KillAfterPolls(2),
        (true, 1) => Fault::LoseResponse,
        (true, 2) => Fault::Duplicate,
        (false, 0) => Fault::KillAfterPolls(1),
        _ => Fault::None,
    });
    let updates = Arc::new(AtomicUsize::new(0));
    let handler = counting(&h, &updates);
    let (before, after) = fifteen_minutes(&h, &mut mapping, &handler).await;
    assert_eq!(before, (0, 0));
    assert_eq!(after, (15, 30), "{:?}", mapping.stats());
    assert!(
        mapping.stats().failed_invocations >= 2,
        "{:?}",
        mapping.stats()
    );
    assert!(mapping.on_failure_messages().is_empty());
    h.drop_tables().await;
}
