//! Idempotent counters against DynamoDB Local: exactly once under redelivery, producer
//! duplicates, concurrency and lost responses; the bounded key window; the capacity rule; the
//! optimistic versioned write; the handler on the `events/` fixtures; dead letters.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use common::*;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::__private::item_size;
use dynamodb_exactly_once::counter::{
    Counter, CounterConfig, CounterConfigBuilder, CounterOutcome, KEY_BYTES,
};
use dynamodb_exactly_once::versioning::{RmwOutcome, VersionOutcome};
use dynamodb_exactly_once::Clock;
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once::ItemKey;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::Batch;
use dynamodb_exactly_once_lambda::Writer;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Map, Value};

pub(crate) mod check;
mod faults;
mod handler;
pub(crate) mod journal;
mod optimistic;
mod window;

pub(crate) const TABLES: [&str; 2] = ["CounterTable", "DeadLetterTable"];

fn record(pk: &str, sk: &str, key: &str, add: Value) -> Value {
    json!({"key":{"PK":pk,"SK":sk},"add":add,"idempotencyKey":key})
}

fn item_key(pk: &str, sk: &str) -> ItemKey {
    ItemKey::from_json(&json!({"PK":pk,"SK":sk})).expect("key")
}

/// A counter writer on existing tables, with a protocol built from `config` and `clock`
/// (whole epoch seconds that the test moves).
pub(crate) fn writer_on(
    client: Client,
    tables: &BTreeMap<String, String>,
    tweak: impl FnOnce(CounterConfigBuilder) -> CounterConfigBuilder,
    clock: Option<Arc<AtomicU64>>,
) -> Writer<Counter> {
    let config = tweak(CounterConfig::builder(&tables["CounterTable"]))
        .build()
        .expect("valid test configuration");
    let mut protocol = Counter::new(client.clone(), config);
    if let Some(clock) = clock {
        protocol = protocol.with_clock(Clock::from_fn(move || clock.load(Ordering::SeqCst) * 1000));
    }
    Writer::builder("counter-writer", protocol)
        .dead_letters(DeadLetters::new(
            client,
            &tables["DeadLetterTable"],
            "counter-writer",
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer")
}

async fn counter_writer(client: Client) -> (Writer<Counter>, BTreeMap<String, String>) {
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    (writer_on(client, &tables, |c| c, None), tables)
}

/// The counters of every item (protocol attributes left out), keyed by `PK|SK`.
pub(crate) async fn counters(
    client: &Client,
    table: &str,
) -> BTreeMap<String, BTreeMap<String, i64>> {
    scan(client, table)
        .await
        .into_iter()
        .map(|(id, item)| {
            let values = item
                .into_iter()
                .filter(|(k, _)| k != "PK" && k != "SK" && !k.starts_with("ctr_"))
                .filter_map(|(k, v)| v.as_i64().map(|n| (k, n)))
                .collect();
            (id, values)
        })
        .collect()
}

/// The sums the table must hold: the deltas of the distinct idempotency keys (first wins).
fn expected_sums(bodies: &[Value]) -> BTreeMap<String, BTreeMap<String, i64>> {
    let mut seen = BTreeSet::new();
    let mut out: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for b in bodies {
        let id = format!(
            "{}|{}",
            b["key"]["PK"].as_str().unwrap_or_default(),
            b["key"]["SK"].as_str().unwrap_or_default()
        );
        let key = b["idempotencyKey"].as_str().unwrap_or_default().to_string();
        if !seen.insert((id.clone(), key)) {
            continue;
        }
        let entry = out.entry(id).or_default();
        for (name, d) in b["add"].as_object().into_iter().flatten() {
            *entry.entry(name.clone()).or_default() += d.as_i64().unwrap_or(0);
        }
    }
    out
}

/// `n` records over `items` counter items, every `dup_every`-th repeating an earlier key.
fn traffic(n: usize, items: usize, dup_every: usize, tag: &str) -> Vec<Value> {
    (0..n)
        .map(|i| {
            // A duplicate repeats an earlier record that is not itself a duplicate.
            let k = if dup_every > 0 && i % dup_every == dup_every - 1 {
                let k = i / 2;
                if k % dup_every == dup_every - 1 {
                    k - 1
                } else {
                    k
                }
            } else {
                i
            };
            record(
                &format!("acct#{}", k % items),
                "2024-11-22",
                &format!("{tag}/{k}"),
                json!({"logins": 1 + (k % 3) as i64, "authz": 10}),
            )
        })
        .collect()
}

/// Deliver a batch the way SQS does: the failed records again until none fails.
async fn deliver_until_done(w: &Writer<Counter>, batch: &Batch) -> usize {
    let mut pending = batch.clone();
    for round in 1..=60 {
        let report = w.handle_batch(&pending, Deadline::none()).await;
        let failed: BTreeSet<String> = report.response.failed_ids().into_iter().collect();
        if failed.is_empty() {
            return round;
        }
        pending.records.retain(|r| failed.contains(&r.position.id));
    }
    panic!("records still failing after 60 deliveries");
}

async fn raw_item(client: &Client, table: &str, key: &ItemKey) -> dynamodb_exactly_once::Item {
    client
        .get_item()
        .table_name(table)
        .set_key(Some(key.to_item().expect("key")))
        .consistent_read(true)
        .send()
        .await
        .expect("get")
        .item
        .unwrap_or_default()
}

// ------------------------------------------------------------------------ exactly once

#[tokio::test]
async fn same_batch_delivered_twice_counts_once() {
    let injector = FaultInjector::counting();
    let client = client_with(Some(injector.clone()), 3);
    let (w, tables) = counter_writer(client.clone()).await;
    let bodies = traffic(60, 3, 0, "twice");
    let batch = sqs_batch(&bodies, 0);

    let first = w.handle_batch(&batch, Deadline::none()).await;
    let writes_before = injector.calls_of("UpdateItem");
    let reads_before = injector.calls_of("GetItem");
    let second = w.handle_batch(&batch, Deadline::none()).await;

    assert_eq!(first.summary.count("applied"), 60);
    assert!(second.response.failed_ids().is_empty());
    assert_eq!(second.summary.count("duplicate"), 60);
    assert_eq!(second.summary.count("applied"), 0);
    assert_eq!(
        injector.calls_of("UpdateItem") - writes_before,
        0,
        "a warm process answers a redelivered batch from its cache"
    );
    // Another process (its cache cold) pays one failed conditional write per item, no read
    let cold = writer_on(client.clone(), &tables, |c| c, None);
    let third = cold.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(third.summary.count("duplicate"), 60);
    assert_eq!(
        injector.calls_of("UpdateItem") - writes_before,
        3,
        "a cold redelivery costs one failed conditional write per item"
    );
    assert_eq!(injector.calls_of("GetItem"), reads_before, "and no read");
    assert_eq!(
        counters(&client, &tables["CounterTable"]).await,
        expected_sums(&bodies)
    );
}

#[tokio::test]
async fn producer_duplicates_within_and_across_batches_count_once() {
    let client = client();
    let (w, tables) = counter_writer(client.clone()).await;
    // Same key, different message ids, inside one batch ...
    let first = vec![
        record("acct#1", "d", "k1", json!({"logins": 3})),
        record("acct#1", "d", "k2", json!({"logins": 1})),
        record("acct#1", "d", "k1", json!({"logins": 3})),
        record("acct#2", "d", "k1", json!({"logins": 5})),
    ];
    // ... and across batches (k2 again, and k1 with other deltas: still the same key).
    let second = vec![
        record("acct#1", "d", "k2", json!({"logins": 1})),
        record("acct#1", "d", "k1", json!({"logins": 100})),
        record("acct#1", "d", "k3", json!({"authz": 7})),
    ];

    let r1 = w
        .handle_batch(&sqs_batch(&first, 0), Deadline::none())
        .await;
    let r2 = w
        .handle_batch(&sqs_batch(&second, 100), Deadline::none())
        .await;

    let labels1: Vec<&str> = r1.results.iter().map(|r| r.label()).collect();
    let labels2: Vec<&str> = r2.results.iter().map(|r| r.label()).collect();
    assert_eq!(labels1, ["applied", "applied", "duplicate", "applied"]);
    assert_eq!(labels2, ["duplicate", "duplicate", "applied"]);
    let got = counters(&client, &tables["CounterTable"]).await;
    assert_eq!(
        got["acct#1|d"],
        BTreeMap::from([("logins".into(), 4), ("authz".into(), 7)])
    );
    assert_eq!(got["acct#2|d"], BTreeMap::from([("logins".into(), 5)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_invocations_on_the_same_counters_count_each_key_once() {
    let client = client();
    let (w, tables) = counter_writer(client.clone()).await;
    let w = Arc::new(w);
    // Eight invocations: each gets the shared records (all overlapping) plus its own.
    let shared_part = traffic(80, 4, 0, "shared");
    let mut all = shared_part.clone();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let mut bodies = shared_part.clone();
        bodies.extend(traffic(20, 4, 0, &format!("own{t}")));
        all.extend(bodies.clone());
        let w = Arc::clone(&w);
        tasks.push(tokio::spawn(async move {
            deliver_until_done(&w, &sqs_batch(&bodies, t * 1000)).await
        }));
    }

    for t in tasks {
        t.await.expect("task");
    }

    assert_eq!(
        counters(&client, &tables["CounterTable"]).await,
        expected_sums(&all)
    );
}

/// Lose the response of about `percent`% of UpdateItem calls, after DynamoDB applied them.
fn lose_responses(percent: usize) -> FaultInjector {
    let n = Arc::new(AtomicUsize::new(0));
    FaultInjector::new(move |_, op| {
        if op != "UpdateItem" {
            return Fault::None;
        }
        let i = n.fetch_add(1, Ordering::SeqCst);
        // A fixed scramble of the call index: deterministic, but not periodic in the batch.
        if (i.wrapping_mul(2_654_435_761) >> 7) % 100 < percent {
            Fault::LoseResponse
        } else {
            Fault::None
        }
    })
}

#[tokio::test]
async fn lost_responses_with_sdk_retries_never_double_count() {
    let injector = lose_responses(40);
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &TABLES).await;
    let w = writer_on(
        client_with(Some(injector.clone()), 4),
        &tables,
        |c| c.concurrency(4),
        None,
    );
    let bodies = traffic(400, 8, 10, "lost-sdk");

    for chunk in 0..4 {
        let part = &bodies[chunk * 100..(chunk + 1) * 100];
        deliver_until_done(&w, &sqs_batch(part, chunk * 100)).await;
    }
    // And the whole stream once more, as a late redelivery.
    deliver_until_done(&w, &sqs_batch(&bodies, 0)).await;

    assert!(
        injector.injected() >= 5,
        "faults were injected: {}",
        injector.injected()
    );
    assert_eq!(
        counters(&setup, &tables["CounterTable"]).await,
        expected_sums(&bodies)
    );
}

#[tokio::test]
async fn lost_responses_without_sdk_retries_are_redelivered_and_never_double_count() {
    let injector = lose_responses(50);
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &TABLES).await;
    let w = writer_on(client_with(Some(injector.clone()), 1), &tables, |c| c, None);
    let bodies = traffic(300, 6, 10, "lost-redelivery");

    let first = w
        .handle_batch(&sqs_batch(&bodies, 0), Deadline::none())
        .await;
    let rounds = deliver_until_done(&w, &sqs_batch(&bodies, 0)).await;

    assert!(
        !first.response.failed_ids().is_empty(),
        "lost responses surfaced as failures to redeliver"
    );
    assert!(rounds >= 1 && injector.injected() >= 3);
    assert_eq!(
        counters(&setup, &tables["CounterTable"]).await,
        expected_sums(&bodies)
    );
}

#[tokio::test]
async fn a_lost_response_retried_by_the_sdk_is_recognised_as_its_own_write() {
    let lose_first = FaultInjector::new(|i, op| {
        if i == 0 && op == "UpdateItem" {
            Fault::LoseResponse
        } else {
            Fault::None
        }
    });
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &TABLES).await;
    let w = writer_on(
        client_with(Some(lose_first.clone()), 3),
        &tables,
        |c| c,
        None,
    );
    let r = w
        .protocol()
        .parse_record(
            record("a", "d", "k", json!({"n": 2}))
                .to_string()
                .as_bytes(),
        )
        .expect("valid");

    let outcome = w.protocol().add(&r).await.expect("add");

    assert_eq!(lose_first.injected(), 1);
    assert_eq!(
        outcome,
        CounterOutcome::Duplicate,
        "the retry found its own key"
    );
    assert_eq!(
        counters(&setup, &tables["CounterTable"]).await["a|d"]["n"],
        2
    );
}

// ------------------------------------------------------------------------ coalescing

#[tokio::test]
async fn a_batch_is_coalesced_into_one_write_per_item_and_chunk() {
    let injector = FaultInjector::counting();
    let client = client_with(Some(injector.clone()), 3);
    let (w, tables) = counter_writer(client.clone()).await;
    let bodies = traffic(1000, 10, 10, "coalesce");
    let before = injector.calls_of("UpdateItem");

    let report = w
        .handle_batch(&sqs_batch(&bodies, 0), Deadline::none())
        .await;

    let calls = injector.calls_of("UpdateItem") - before;
    assert_eq!(report.summary.write_calls, calls);
    assert!(report.response.failed_ids().is_empty());
    assert_eq!(report.summary.count("duplicate"), 100);
    let mut distinct: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for b in &bodies {
        distinct
            .entry(b["key"]["PK"].to_string())
            .or_default()
            .insert(b["idempotencyKey"].to_string());
    }
    let max_keys = w.protocol().config().max_keys_per_write();
    let expected_calls: usize = distinct.values().map(|k| k.len().div_ceil(max_keys)).sum();
    assert_eq!(
        calls, expected_calls,
        "one write per item and chunk of {max_keys} keys"
    );
    assert!(
        calls as f64 / 1000.0 <= 0.05,
        "{calls} write calls for 1000 records"
    );
    assert_eq!(
        counters(&client, &tables["CounterTable"]).await,
        expected_sums(&bodies)
    );
}

// ------------------------------------------------------------------------ the window

#[tokio::test]
async fn a_duplicate_inside_the_window_is_rejected_and_past_the_window_is_forgotten() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let clock = Arc::new(AtomicU64::new(1_000_000));
    // Window 100 s over 2 buckets: buckets of 100 s, keys kept at most 200 s.
    let w = writer_on(
        client.clone(),
        &tables,
        |c| c.window(Duration::from_secs(100)),
        Some(clock.clone()),
    );
    let one = sqs_batch(&[record("a", "d", "k-window", json!({"n": 1}))], 0);
    let apply = |at: u64| {
        clock.store(at, Ordering::SeqCst);
        w.handle_batch(&one, Deadline::none())
    };

    // Given the key applied at t = 1_000_099 (the last second of its bucket) ...
    assert_eq!(apply(1_000_099).await.summary.count("applied"), 1);
    // ... it is rejected for the whole window, across a bucket boundary ...
    for t in [1_000_100, 1_000_150, 1_000_199] {
        assert_eq!(apply(t).await.summary.count("duplicate"), 1, "at {t}");
    }
    // ... even when other keys roll the item over into a newer bucket meanwhile.
    clock.store(1_000_150, Ordering::SeqCst);
    let _ = w
        .handle_batch(
            &sqs_batch(&[record("a", "d", "other", json!({"n": 10}))], 5),
            Deadline::none(),
        )
        .await;
    assert_eq!(apply(1_000_198).await.summary.count("duplicate"), 1);

    // Past the window, once a write has moved the item two buckets on (removing the key's
    // bucket), it counts again: the documented limit, which is why the sources never deliver
    // records older than the window.
    clock.store(1_000_200, Ordering::SeqCst);
    let _ = w
        .handle_batch(
            &sqs_batch(&[record("a", "d", "rolls-over", json!({"n": 100}))], 6),
            Deadline::none(),
        )
        .await;
    let item = raw_item(&client, &tables["CounterTable"], &item_key("a", "d")).await;
    assert!(
        !item.contains_key("ctr_keys_1000000_1000200"),
        "the old bucket is gone: {item:?}"
    );
    assert_eq!(apply(1_000_201).await.summary.count("applied"), 1);
    assert_eq!(
        counters(&client, &tables["CounterTable"]).await["a|d"]["n"],
        112
    );
}

#[tokio::test]
async fn item_size_stays_bounded_across_many_windows() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let clock = Arc::new(AtomicU64::new(5_000_000));
    let w = writer_on(
        client.clone(),
        &tables,
        |c| c.window(Duration::from_secs(10)),
        Some(clock.clone()),
    );
    let key = item_key("hot", "d");
    let per_bucket = 40;
    let mut sizes = Vec::new();
    let mut total = 0i64;

    // 60 buckets (30 windows) of traffic, 40 new keys per bucket on one item.
    for bucket in 0..60u64 {
        clock.store(5_000_000 + bucket * 10, Ordering::SeqCst);
        let bodies: Vec<Value> = (0..per_bucket)
            .map(|i| record("hot", "d", &format!("b{bucket}/k{i}"), json!({"n": 1})))
            .collect();
        total += per_bucket as i64;
        let report = w
            .handle_batch(&sqs_batch(&bodies, 0), Deadline::none())
            .await;
        assert_eq!(report.summary.count("applied"), per_bucket);
        let item = raw_item(&client, &tables["CounterTable"], &key).await;
        let buckets = item.keys().filter(|k| k.starts_with("ctr_keys_")).count();
        assert!(buckets <= 2, "at most W bucket attributes, got {buckets}");
        sizes.push(item_size(&item));
    }

    let max = sizes.iter().copied().max().unwrap_or(0);
    let bound = 2 * per_bucket * KEY_BYTES + 200;
    assert!(max <= bound, "item size {max} exceeds {bound}: {sizes:?}");
    assert_eq!(
        sizes[10], sizes[59],
        "steady state: the size no longer grows"
    );
    assert_eq!(
        counters(&client, &tables["CounterTable"]).await["hot|d"]["n"],
        total
    );
}

#[tokio::test]
async fn a_writer_whose_clock_is_behind_sees_the_newer_keys_and_writes_its_own_bucket() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let ahead = Arc::new(AtomicU64::new(2_000_500));
    let behind = Arc::new(AtomicU64::new(2_000_000));
    let window = |c: CounterConfigBuilder| c.window(Duration::from_secs(100));
    let w_ahead = writer_on(client.clone(), &tables, window, Some(ahead));
    let w_behind = writer_on(client.clone(), &tables, window, Some(behind));

    let _ = w_ahead
        .handle_batch(
            &sqs_batch(&[record("a", "d", "k1", json!({"n": 1}))], 0),
            Deadline::none(),
        )
        .await;
    let r = w_behind
        .handle_batch(
            &sqs_batch(
                &[
                    record("a", "d", "k1", json!({"n": 1})),
                    record("a", "d", "k2", json!({"n": 1})),
                ],
                0,
            ),
            Deadline::none(),
        )
        .await;

    let labels: Vec<&str> = r.results.iter().map(|x| x.label()).collect();
    assert_eq!(labels, ["duplicate", "applied"]);
    // Buckets are named by absolute times: the writer behind adds its own bucket (its keys
    // are kept for its window on its clock) and removes nothing of the newer one.
    let item = raw_item(&client, &tables["CounterTable"], &item_key("a", "d")).await;
    assert_eq!(
        item.get("ctr_bucket"),
        Some(&AttributeValue::S("2000000_2000200,2000500_2000700".into()))
    );
    assert!(
        item.contains_key("ctr_keys_2000000_2000200")
            && item.contains_key("ctr_keys_2000500_2000700")
            && item.len() == 6,
        "{item:?}"
    );
}

#[tokio::test]
async fn an_item_about_to_overflow_keeps_its_deltas_as_dead_letters() {
    let client = client();
    let (w, tables) = counter_writer(client.clone()).await;
    let table = &tables["CounterTable"];
    // Given an item so close to 400 KB that no key fits any more.
    let mut item = item_key("full", "d").to_item().expect("key");
    item.insert(
        "filler".into(),
        AttributeValue::S("x".repeat(400 * 1024 - 30)),
    );
    client
        .put_item()
        .table_name(table)
        .set_item(Some(item))
        .send()
        .await
        .expect("filler item");
    let bodies = vec![
        record("full", "d", "f1", json!({"n": 1})),
        record("full", "d", "f2", json!({"n": 2})),
        record("room", "d", "r1", json!({"n": 3})),
    ];

    let report = w
        .handle_batch(&sqs_batch(&bodies, 0), Deadline::none())
        .await;

    // Then nothing is lost: the full item's records are kept with their reason, the rest counts.
    assert!(report.response.failed_ids().is_empty());
    let labels: Vec<&str> = report.results.iter().map(|r| r.label()).collect();
    assert_eq!(labels, ["invalid", "invalid", "applied"]);
    let letters = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 2);
    assert!(letters.iter().all(|l| l.reason.code == "item_full"));

    // When room is made (here: the filler goes), replaying the dead letters applies them once.
    client
        .update_item()
        .table_name(table)
        .set_key(Some(item_key("full", "d").to_item().expect("key")))
        .update_expression("REMOVE filler")
        .send()
        .await
        .expect("make room");
    let replay = Batch::new(
        dynamodb_exactly_once_lambda::source::SourceKind::Sqs,
        letters
            .iter()
            .map(|l| {
                dynamodb_exactly_once_lambda::source::SourceRecord::new(
                    l.position.clone(),
                    l.payload.clone(),
                )
            })
            .collect(),
    );
    deliver_until_done(&w, &replay).await;
    deliver_until_done(&w, &replay).await;
    let got = counters(&client, table).await;
    assert_eq!(got["full|d"]["n"], 3);
    assert_eq!(got["room|d"]["n"], 3);
}

#[test]
fn the_capacity_check_rejects_an_impossible_configuration() {
    // A day-long window at 10 new keys per second per item needs megabytes of keys.
    let day = CounterConfig::builder("CounterTable").window(Duration::from_secs(86_400));

    let err = day
        .clone()
        .max_keys_per_second(10.0)
        .build()
        .expect_err("cannot fit in 400 KB");

    assert_eq!(err.setting, "window_seconds");
    assert!(
        err.message.contains("cannot fit in one item"),
        "{}",
        err.message
    );
    assert!(err.message.contains("> budget"), "{}", err.message);

    // The same window fits at the rate it names.
    let config = day.max_keys_per_second(0.08).build().expect("fits");
    assert!(config.capacity().worst_case_item_bytes <= config.item_budget_bytes() as f64);
    // And a budget above DynamoDB's limit is refused too.
    assert_eq!(
        config
            .to_builder()
            .item_budget_bytes(500 * 1024)
            .build()
            .expect_err("over 400 KB")
            .setting,
        "item_budget_bytes"
    );
}
