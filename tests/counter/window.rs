//! The key window across settings changes, mixed settings, clock skew and the earlier item
//! layout (issue 9): every key stays a duplicate for the window of its first application, and
//! no writer is ever stuck writing into one bucket.

use super::*;
use dynamodb_exactly_once::counter::hash_key;
use dynamodb_exactly_once::Item;

/// An hour-aligned epoch second (every bucket length used here divides 3600).
const T0: u64 = 1_800_000_000;

/// A writer with a `window` of seconds over `buckets` buckets, on `clock`.
fn windowed(
    client: &Client,
    tables: &BTreeMap<String, String>,
    window: u64,
    buckets: u32,
    clock: &Arc<AtomicU64>,
) -> Writer<Counter> {
    let tweak = |c: CounterConfigBuilder| {
        c.window(Duration::from_secs(window))
            .window_buckets(buckets)
    };
    writer_on(client.clone(), tables, tweak, Some(clock.clone()))
}

/// Deliver `keys` (each adding 1 to `n` of item a|d) at `at` seconds: the labels.
async fn deliver(w: &Writer<Counter>, clock: &AtomicU64, at: u64, keys: &[&str]) -> Vec<String> {
    clock.store(at, Ordering::SeqCst);
    let bodies: Vec<Value> = keys
        .iter()
        .map(|k| record("a", "d", k, json!({"n": 1})))
        .collect();
    let report = w
        .handle_batch(&sqs_batch(&bodies, 0), Deadline::none())
        .await;
    assert!(report.response.failed_ids().is_empty(), "at {at}");
    report
        .results
        .iter()
        .map(|r| r.label().to_string())
        .collect()
}

/// Every key hash the item holds, in any bucket.
fn stored_keys(item: &Item) -> BTreeSet<String> {
    item.iter()
        .filter(|(name, _)| name.starts_with("ctr_keys_"))
        .filter_map(|(_, v)| v.as_ss().ok())
        .flatten()
        .cloned()
        .collect()
}

async fn item_a(client: &Client, tables: &BTreeMap<String, String>) -> Item {
    raw_item(client, &tables["CounterTable"], &item_key("a", "d")).await
}

async fn total(client: &Client, tables: &BTreeMap<String, String>) -> i64 {
    counters(client, &tables["CounterTable"]).await["a|d"]["n"]
}

#[tokio::test]
async fn raising_the_bucket_count_keeps_every_key_of_the_old_window() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let clock = Arc::new(AtomicU64::new(T0));
    let old = windowed(&client, &tables, 3600, 2, &clock); // buckets of 3600 s
    let new = windowed(&client, &tables, 3600, 4, &clock); // buckets of 1200 s

    // Given k1 applied under W = 2 ...
    assert_eq!(deliver(&old, &clock, T0 + 100, &["k1"]).await, ["applied"]);
    // ... when the function is redeployed with W = 4 and other keys roll the item over ...
    assert_eq!(deliver(&new, &clock, T0 + 1300, &["k2"]).await, ["applied"]);
    assert_eq!(deliver(&new, &clock, T0 + 2500, &["k3"]).await, ["applied"]);

    // ... then k1 stays a duplicate for its whole window, under either setting ...
    for (w, at) in [(&new, 2600), (&old, 3000), (&new, 3650)] {
        let labels = deliver(w, &clock, T0 + at, &["k1"]).await;
        assert_eq!(labels, ["duplicate"], "k1 redelivered {at} s after T0");
    }
    // ... and the new setting keeps rolling the item over: past the old window, k1 is gone.
    for i in 3..=12u64 {
        let key = format!("x{i}");
        let labels = deliver(&new, &clock, T0 + i * 1200, &[&key]).await;
        assert_eq!(labels, ["applied"]);
    }
    let item = item_a(&client, &tables).await;
    assert!(!stored_keys(&item).contains(&hash_key("k1")), "{item:?}");
    let buckets = item.keys().filter(|k| k.starts_with("ctr_keys_")).count();
    assert!(
        buckets <= 5,
        "at most W + 1 buckets, got {buckets}: {item:?}"
    );
    assert_eq!(total(&client, &tables).await, 13);
}

#[tokio::test]
async fn lowering_the_bucket_count_keeps_the_old_keys_and_still_rolls_over() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let clock = Arc::new(AtomicU64::new(T0));
    let old = windowed(&client, &tables, 3600, 4, &clock); // buckets of 1200 s
    let new = windowed(&client, &tables, 3600, 2, &clock); // buckets of 3600 s

    // Given k1 applied under W = 4, then the function redeployed with W = 2 ...
    assert_eq!(deliver(&old, &clock, T0 + 100, &["k1"]).await, ["applied"]);
    let labels = deliver(&new, &clock, T0 + 1300, &["k1", "k2"]).await;
    assert_eq!(labels, ["duplicate", "applied"]);

    // ... when it writes a new key every 10 minutes for 10 hours ...
    for i in 0..60u64 {
        let key = format!("x{i}");
        let at = T0 + 1400 + i * 600;
        let labels = deliver(&new, &clock, at, &[&key]).await;
        assert_eq!(labels, ["applied"], "x{i}");
        if at < T0 + 3700 {
            let labels = deliver(&new, &clock, at, &["k1"]).await;
            assert_eq!(labels, ["duplicate"], "k1 at {at}: inside its window");
        }
    }

    // ... then the item rolled over: it holds only the keys of its last buckets, not all 62.
    let item = item_a(&client, &tables).await;
    let keys = stored_keys(&item);
    assert!(keys.len() <= 18, "{} keys kept: {item:?}", keys.len());
    assert!(!keys.contains(&hash_key("k1")));
    assert_eq!(total(&client, &tables).await, 62);
}

#[tokio::test]
async fn two_writers_with_different_settings_on_one_item_keep_each_others_windows() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let clock = Arc::new(AtomicU64::new(T0));
    // A: a 600 s window (buckets of 600 s); B: a 60 s window over 4 buckets of 20 s.
    let a = windowed(&client, &tables, 600, 2, &clock);
    let b = windowed(&client, &tables, 60, 4, &clock);

    // Every 20 s both write a new key and redeliver older keys, each inside its own window:
    // A's keys 300 s later (A's window is 600 s), B's keys 40 s later (B's window is 60 s).
    for i in 0..40u64 {
        let at = T0 + i * 20;
        let (a_new, b_new) = (format!("a{i}"), format!("b{i}"));
        let mut a_keys = vec![a_new.clone()];
        let mut b_keys = vec![b_new.clone()];
        if i >= 15 {
            a_keys.push(format!("a{}", i - 15));
            b_keys.push(format!("a{}", i - 15));
        }
        if i >= 2 {
            a_keys.push(format!("b{}", i - 2));
            b_keys.push(format!("b{}", i - 2));
        }
        for (w, keys) in [(&a, a_keys), (&b, b_keys)] {
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            let labels = deliver(w, &clock, at, &refs).await;
            assert_eq!(labels[0], "applied", "{keys:?} at step {i}");
            assert!(
                labels[1..].iter().all(|l| l == "duplicate"),
                "redelivered inside the window at step {i}: {keys:?} -> {labels:?}"
            );
        }
    }

    assert_eq!(total(&client, &tables).await, 80);
}

#[tokio::test]
async fn a_writer_whose_clock_is_far_ahead_evicts_no_key_inside_the_window_of_the_others() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let clock = Arc::new(AtomicU64::new(T0));
    let ahead = Arc::new(AtomicU64::new(T0 + 10 * 86_400));
    let a = windowed(&client, &tables, 100, 2, &clock);
    let b = windowed(&client, &tables, 100, 2, &ahead);

    // Given k1 applied by A, then k2 by B whose clock is ten days ahead ...
    assert_eq!(deliver(&a, &clock, T0, &["k1"]).await, ["applied"]);
    let t_ahead = ahead.load(Ordering::SeqCst);
    assert_eq!(deliver(&b, &ahead, t_ahead, &["k2"]).await, ["applied"]);

    // ... then k1, redelivered to A inside its window, is still a duplicate, and so is k2 ...
    let labels = deliver(&a, &clock, T0 + 10, &["k1", "k2"]).await;
    assert_eq!(labels, ["duplicate", "duplicate"]);
    // ... and A keeps rolling the item over on its own clock (not into B's future bucket).
    for i in 1..=10u64 {
        let key = format!("x{i}");
        assert_eq!(deliver(&a, &clock, T0 + i * 50, &[&key]).await, ["applied"]);
    }
    let mut keys = stored_keys(&item_a(&client, &tables).await);
    assert!(keys.remove(&hash_key("k2")), "B's key stays for B's window");
    assert!(
        keys.len() <= 6,
        "A's old keys were evicted on A's clock: {} kept",
        keys.len()
    );
    assert_eq!(total(&client, &tables).await, 12);
}

#[tokio::test]
async fn a_chunk_tested_against_many_buckets_is_written_in_smaller_updates() {
    let injector = FaultInjector::counting();
    let client = client_with(Some(injector.clone()), 3);
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let clock = Arc::new(AtomicU64::new(T0));
    // Given an item holding 24 buckets of 1 s (W = 24, a 23 s window) ...
    let fine = windowed(&client, &tables, 23, 24, &clock);
    for i in 0..24u64 {
        let key = format!("f{i}");
        assert_eq!(deliver(&fine, &clock, T0 + i, &[&key]).await, ["applied"]);
    }
    // ... when a writer with W = 2 (72 keys per update) writes 72 new keys to it ...
    let coarse = windowed(&client, &tables, 3600, 2, &clock);
    let keys: Vec<String> = (0..72).map(|i| format!("c{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let before = injector.calls_of("UpdateItem");
    let labels = deliver(&coarse, &clock, T0 + 24, &refs).await;

    // ... every key is applied, in several updates that each stay within the limits.
    assert!(labels.iter().all(|l| l == "applied"), "{labels:?}");
    let calls = injector.calls_of("UpdateItem") - before;
    assert!(calls > 2, "{calls} updates for 72 keys against 24 buckets");
    let labels = deliver(&coarse, &clock, T0 + 25, &refs).await;
    assert!(labels.iter().all(|l| l == "duplicate"), "{labels:?}");
    assert_eq!(total(&client, &tables).await, 96);
}

/// One record of key `k` that reached its source at `arrived_ms`, delivered at the writer's
/// clock: its label.
async fn deliver_arrived(w: &Writer<Counter>, k: &str, arrived_ms: u64) -> String {
    let mut batch = sqs_batch(&[record("a", "d", k, json!({"n": 1}))], 0);
    batch.records[0].position.arrived_at_ms = Some(arrived_ms);
    let report = w.handle_batch(&batch, Deadline::none()).await;
    report.results[0].label().to_string()
}

#[tokio::test]
async fn a_raised_window_keeps_the_old_age_guard_until_the_old_buckets_are_gone() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let now = dynamodb_exactly_once::__private::epoch_millis() / 1000;
    let (then, later) = (
        Arc::new(AtomicU64::new(now - 125)),
        Arc::new(AtomicU64::new(now)),
    );
    // Key k counted 125 s ago under a 60 s window (its bucket is kept 60 to 120 s).
    let old = windowed(&client, &tables, 60, 2, &then);
    let k = old
        .protocol()
        .parse_record(
            record("a", "d", "k", json!({"n": 1}))
                .to_string()
                .as_bytes(),
        )
        .expect("valid record");
    assert_eq!(
        old.protocol().add(&k).await.expect("added"),
        CounterOutcome::Applied
    );
    // The window is raised to 600 s, the age guard kept at the old window (the documented
    // procedure); another key rolls the old bucket out.
    let raised = writer_on(
        client.clone(),
        &tables,
        |c| {
            c.window(Duration::from_secs(600))
                .max_record_age(Duration::from_secs(60))
        },
        Some(later.clone()),
    );
    assert_eq!(
        deliver_arrived(&raised, "other", now * 1000).await,
        "applied"
    );
    assert!(!stored_keys(&item_a(&client, &tables).await).contains(&hash_key("k")));
    // k redelivered with its first arrival time: kept as too old, not counted twice.
    assert_eq!(
        deliver_arrived(&raised, "k", (now - 125) * 1000).await,
        "invalid"
    );
    assert_eq!(total(&client, &tables).await, 2);
    // A guard longer than the window is refused when the configuration is built.
    let refused = CounterConfig::builder(&tables["CounterTable"])
        .max_record_age(Duration::from_secs(7200))
        .build()
        .expect_err("longer than the window");
    assert_eq!(refused.setting, "max_record_age_seconds");
}
