//! Migrating a counter from the inline mode to the journal mode without an operator step:
//! once the roll-up removes an item's inline key buckets, a late redelivery of a key that
//! arrived before what the buckets covered is refused (`too_old`, kept as a dead letter), as
//! the inline writer would have refused it; a key that arrived after still counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dev_testing::client;
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::Clock;
use serde_json::Value;

use crate::counter::journal::{apply, counter, key, record, rollup, run, tables, total};

const HOUR_MS: u64 = 3600 * 1000;

#[tokio::test]
async fn a_late_redelivery_of_a_key_applied_inline_is_too_old_once_its_bucket_is_gone() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let t0 = 1_800_000_000_000u64;
    let now = Arc::new(AtomicU64::new(t0));
    let clock = {
        let now = Arc::clone(&now);
        Clock::from_fn(move || now.load(Ordering::SeqCst))
    };
    // Given k applied inline (arrived t0) ...
    let inline = Counter::new(
        c.clone(),
        CounterConfig::builder(&counters)
            .build()
            .expect("valid configuration"),
    )
    .with_clock(clock.clone());
    let k = record(&inline, "a", 1, "k").arrived_at(t0);
    assert_eq!(apply(&inline, &[k]).await, ["applied"]);
    // ... the counter switched to the journal 10 minutes later ...
    now.store(t0 + HOUR_MS / 6, Ordering::SeqCst);
    let counter = counter(c.clone(), &counters, &journal).with_clock(clock.clone());
    let roll = rollup(c.clone(), &counters, &journal).with_clock(clock.clone());
    // ... and at t0 + 3 h, a roll-up that removes the expired inline buckets.
    now.store(t0 + 3 * HOUR_MS, Ordering::SeqCst);
    let k2 = record(&counter, "a", 2, "k2").arrived_at(t0 + 3 * HOUR_MS);
    assert_eq!(apply(&counter, &[k2]).await, ["journaled"]);
    run(&roll, &journal).await;
    assert_eq!(total(&counter, "a").await, 3);
    let item: Value = counter
        .get_json(&key("a"))
        .await
        .expect("get")
        .expect("item")
        .into();
    assert!(item.get("ctr_bucket").is_none(), "buckets removed: {item}");

    // When k is redelivered late (its source received it at t0), with a key that arrived
    // after the inline writer's last bucket (t0 + 90 min) ...
    let late = record(&counter, "a", 1, "k").arrived_at(t0);
    let after = record(&counter, "a", 4, "k3").arrived_at(t0 + 3 * HOUR_MS / 2);
    assert_eq!(
        apply(&counter, &[late, after]).await,
        ["journaled", "journaled"]
    );
    let report = run(&roll, &journal).await;

    // Then k is not counted again (a dead letter says why), k3 is.
    assert_eq!(total(&counter, "a").await, 7, "{report:?}");
    assert_eq!(report.dead_letters, 1, "{report:?}");
    assert!(
        report.letters[0].reason.contains("too_old"),
        "{:?}",
        report.letters
    );
    // Delivered again: nothing changes.
    let again = run(&roll, &journal).await;
    assert_eq!(total(&counter, "a").await, 7, "{again:?}");

    // Once no record that arrived before it can be journaled and read (the window, an hour
    // of clock, the stream's day), the item's next updates remove `ctr_forgot`.
    now.store(t0 + (15 * 24 + 3) * HOUR_MS, Ordering::SeqCst);
    for (i, idem) in ["k4", "k5"].into_iter().enumerate() {
        let at = now.load(Ordering::SeqCst) + i as u64 * 60_000;
        now.store(at, Ordering::SeqCst);
        let r = record(&counter, "a", 1, idem).arrived_at(at);
        assert_eq!(apply(&counter, &[r]).await, ["journaled"]);
        run(&roll, &journal).await;
    }
    assert_eq!(total(&counter, "a").await, 9);
    let item: Value = counter
        .get_json(&key("a"))
        .await
        .expect("get")
        .expect("item")
        .into();
    assert!(item.get("ctr_forgot").is_none(), "marker removed: {item}");
}
