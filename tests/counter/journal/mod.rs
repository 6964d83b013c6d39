//! The counter's journal mode against DynamoDB Local: keys journaled once however often they
//! are put, counted once by the roll-up however often its batch is delivered, stops or races
//! another delivery; a lost response of either step; items of the inline layout read as they
//! are. The roll-up gets DynamoDB Local's stream (one shard) as one batch.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, StreamSpecification, StreamViewType,
};
use aws_sdk_dynamodb::Client;
use dev_testing::{client, client_with, unique_prefix, Fault, FaultInjector};
use dynamodb_exactly_once::counter::journal::{Rollup, RollupBatchReport, RollupConfig};
use dynamodb_exactly_once::counter::{Counter, CounterConfig, CounterOutcome, CounterRecord};
use dynamodb_exactly_once::ItemKey;
use dynamodb_exactly_once::{Deadline, Protocol, RecordResult};
use serde_json::Value;

/// A counter table (PK, SK) and a journal table with its stream, fresh.
pub(crate) async fn tables(client: &Client) -> (String, String) {
    let prefix = unique_prefix();
    let counters = format!("{prefix}counters");
    let journal = format!("{prefix}journal");
    let attr = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .expect("attribute")
    };
    let key = |name: &str, kind: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .expect("key")
    };
    client
        .create_table()
        .table_name(&counters)
        .attribute_definitions(attr("PK"))
        .attribute_definitions(attr("SK"))
        .key_schema(key("PK", KeyType::Hash))
        .key_schema(key("SK", KeyType::Range))
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .expect("counter table");
    let stream = StreamSpecification::builder()
        .stream_enabled(true)
        .stream_view_type(StreamViewType::NewImage)
        .build()
        .expect("stream");
    client
        .create_table()
        .table_name(&journal)
        .attribute_definitions(attr("pk"))
        .attribute_definitions(attr("sk"))
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .billing_mode(BillingMode::PayPerRequest)
        .stream_specification(stream)
        .send()
        .await
        .expect("journal table");
    (counters, journal)
}

pub(crate) fn counter(client: Client, counters: &str, journal: &str) -> Counter {
    let config = CounterConfig::builder(counters).journal(journal).build();
    Counter::new(client, config.expect("config"))
}

pub(crate) fn rollup(client: Client, counters: &str, journal: &str) -> Rollup {
    let counter = CounterConfig::builder(counters).journal(journal).build();
    let config = RollupConfig::builder(counter.expect("counter config")).build();
    let config = config.expect("config");
    Rollup::new(client, config)
}

pub(crate) fn key(pk: &str) -> ItemKey {
    ItemKey::partition("PK", pk)
        .and_then(|k| k.with_sort("SK", "day"))
        .expect("key")
}

pub(crate) fn record(counter: &Counter, pk: &str, delta: i64, idem: &str) -> CounterRecord {
    counter
        .record(key(pk), [("n", delta)], idem)
        .expect("record")
}

/// `n` records of one key each (`k0`, `k1`, …) adding 1 to item `pk`.
fn ones(counter: &Counter, pk: &str, n: usize) -> Vec<CounterRecord> {
    (0..n)
        .map(|i| record(counter, pk, 1, &format!("k{i}")))
        .collect()
}

pub(crate) async fn total(counter: &Counter, pk: &str) -> i64 {
    let item: Option<Value> = counter.get(&key(pk)).await.expect("get");
    item.and_then(|i| i.get("n").and_then(Value::as_i64))
        .unwrap_or(0)
}

pub(crate) async fn apply(counter: &Counter, records: &[CounterRecord]) -> Vec<&'static str> {
    let indexed = records.iter().cloned().enumerate().collect();
    let mut applied = counter.apply(indexed, Deadline::none()).await;
    applied.results.sort_by_key(|(i, _)| *i);
    applied.results.iter().map(|(_, r)| r.label()).collect()
}

/// Deliver the journal's whole stream (DynamoDB Local's one shard) to `rollup` as one batch.
pub(crate) async fn run(rollup: &Rollup, journal: &str) -> RollupBatchReport {
    let (shard, batch) = crate::counter::journal::mapping::journal_batch(journal).await;
    let changes = crate::counter::journal::mapping::changes(&batch);
    let report = rollup.apply_batch(&shard, &changes).await;
    eprintln!("roll-up: {report:?}");
    report
}

#[tokio::test]
async fn a_key_counts_once_however_often_it_is_journaled_or_delivered() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let counter = counter(c.clone(), &counters, &journal);
    let roll = rollup(c.clone(), &counters, &journal);
    let batch = [
        record(&counter, "a", 5, "k1"),
        record(&counter, "a", 7, "k2"),
        record(&counter, "a", 5, "k1"), // same key, same deltas
        record(&counter, "a", 9, "k2"), // same key, other deltas
        record(&counter, "b", 1, "k1"), // the same key on another item counts there
    ];
    let labels = apply(&counter, &batch).await;
    assert_eq!(
        labels,
        [
            "journaled",
            "journaled",
            "duplicate",
            "conflicting_duplicate",
            "journaled"
        ]
    );
    let first = run(&roll, &journal).await;
    assert_eq!(
        (first.keys, first.applied, first.duplicates),
        (3, 3, 0),
        "{first:?}"
    );
    assert_eq!(
        (total(&counter, "a").await, total(&counter, "b").await),
        (12, 1)
    );

    // Redelivered to a cold process (no warm cache): put again, no INSERT, nothing counted.
    let cold = counter_cold(c.clone(), &counters, &journal);
    assert_eq!(apply(&cold, &batch[..2]).await, ["journaled", "journaled"]);
    let second = run(&roll, &journal).await;
    assert_eq!((second.keys, second.applied), (3, 0), "{second:?}");
    assert_eq!(total(&counter, "a").await, 12);

    // Redelivered to the warm process: no call at all.
    assert_eq!(
        apply(&counter, &batch[..2]).await,
        ["duplicate", "duplicate"]
    );

    // A new process given the stream again from its start (a second mapping): every key is
    // below its item's watermark.
    let again = run(&rollup(c.clone(), &counters, &journal), &journal).await;
    assert_eq!((again.applied, again.duplicates), (0, 3), "{again:?}");
    assert_eq!(
        (total(&counter, "a").await, total(&counter, "b").await),
        (12, 1)
    );
}

fn counter_cold(client: Client, counters: &str, journal: &str) -> Counter {
    let config = CounterConfig::builder(counters)
        .journal(journal)
        .cache_keys(0)
        .build()
        .expect("config");
    Counter::new(client, config)
}

/// `fault` on the first call of `operation`, nothing else.
pub(crate) fn first_of(operation: &'static str, fault: Fault) -> FaultInjector {
    let seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    FaultInjector::new(move |_, op| {
        let first = op == operation && !seen.swap(true, std::sync::atomic::Ordering::SeqCst);
        if first {
            fault
        } else {
            Fault::None
        }
    })
}

#[tokio::test]
async fn a_lost_response_of_a_roll_up_update_is_not_counted_twice() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let counter = counter(c.clone(), &counters, &journal);
    let records: Vec<_> = (0..4)
        .map(|i| record(&counter, "a", 1 << i, &format!("k{i}")))
        .collect();
    apply(&counter, &records).await;
    // The first UpdateItem lands but its answer is lost; the SDK sends it again.
    let faults = first_of("UpdateItem", Fault::LoseResponse);
    let roll = rollup(client_with(Some(faults), 3), &counters, &journal);
    let report = run(&roll, &journal).await;
    assert_eq!(total(&counter, "a").await, 15, "{report:?}");
    assert_eq!(report.applied + report.duplicates, 4, "{report:?}");
}

#[tokio::test]
async fn a_lost_response_of_a_journal_put_is_not_counted_twice() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let faults = first_of("BatchExecuteStatement", Fault::LoseResponse);
    let counter = counter(client_with(Some(faults), 3), &counters, &journal);
    let records = ones(&counter, "a", 3);
    assert_eq!(apply(&counter, &records).await, ["journaled"; 3]);
    let report = run(&rollup(c.clone(), &counters, &journal), &journal).await;
    assert_eq!(total(&counter, "a").await, 3, "{report:?}");
}

#[tokio::test]
async fn concurrent_writers_and_concurrent_deliveries_count_each_key_once() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let writers: Vec<_> = (0..3)
        .map(|_| Arc::new(counter_cold(c.clone(), &counters, &journal)))
        .collect();
    let records: Vec<_> = (0..60)
        .map(|i| record(&writers[0], &format!("i{}", i % 4), 1, &format!("k{i}")))
        .collect();
    let mut tasks = Vec::new();
    for w in &writers {
        let (w, records) = (Arc::clone(w), records.clone());
        tasks.push(tokio::spawn(async move { apply(&w, &records).await.len() }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    let rolls: Vec<_> = (0..3)
        .map(|_| rollup(c.clone(), &counters, &journal))
        .collect();
    let reports = futures::future::join_all(rolls.iter().map(|r| run(r, &journal))).await;
    let applied: usize = reports.iter().map(|r| r.applied).sum();
    assert_eq!(applied, 60, "{reports:?}");
    for i in 0..4 {
        assert_eq!(total(&writers[0], &format!("i{i}")).await, 15);
    }
}

#[tokio::test]
async fn a_record_result_of_the_journal_is_final_or_delivered_again() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let faults = first_of("BatchExecuteStatement", Fault::Refuse);
    let counter = counter(client_with(Some(faults), 1), &counters, &journal);
    let records = ones(&counter, "a", 2);
    let indexed = records.iter().cloned().enumerate().collect();
    let applied = counter.apply(indexed, Deadline::none()).await;
    assert!(applied
        .results
        .iter()
        .all(|(_, r)| matches!(r, RecordResult::Failed(_))));
    assert_eq!(
        counter.add(&records[0]).await.expect("add"),
        CounterOutcome::Journaled
    );
}

#[tokio::test]
async fn keys_of_an_inline_item_stay_duplicates_and_its_buckets_go_once_expired() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let now = Arc::new(std::sync::atomic::AtomicU64::new(1_800_000_000_000));
    let clock = {
        let now = Arc::clone(&now);
        dynamodb_exactly_once::Clock::from_fn(move || now.load(std::sync::atomic::Ordering::SeqCst))
    };
    let inline = Counter::new(
        c.clone(),
        CounterConfig::builder(&counters)
            .build()
            .expect("valid configuration"),
    )
    .with_clock(clock.clone());
    let old = [record(&inline, "a", 1, "k1"), record(&inline, "a", 2, "k2")];
    assert_eq!(apply(&inline, &old).await, ["applied", "applied"]);

    let counter = counter(c.clone(), &counters, &journal).with_clock(clock.clone());
    let roll = rollup(c.clone(), &counters, &journal).with_clock(clock.clone());
    let new = [
        record(&counter, "a", 1, "k1"),
        record(&counter, "a", 4, "k3"),
    ];
    apply(&counter, &new).await;
    let report = run(&roll, &journal).await;
    assert_eq!((report.applied, report.duplicates), (1, 1), "{report:?}");
    assert_eq!(total(&counter, "a").await, 7);
    let item: Value = counter
        .get_json(&key("a"))
        .await
        .expect("get")
        .expect("item")
        .into();
    assert!(
        item.get("ctr_bucket").is_some(),
        "buckets kept within their window: {item}"
    );

    // Past the inline window (1 h, kept 2 h): the next update removes the buckets.
    now.fetch_add(3 * 3600 * 1000, std::sync::atomic::Ordering::SeqCst);
    apply(&counter, &[record(&counter, "a", 8, "k4")]).await;
    let report = run(&roll, &journal).await;
    assert_eq!(report.applied, 1, "{report:?}");
    assert_eq!(total(&counter, "a").await, 15);
    let item: Value = counter
        .get_json(&key("a"))
        .await
        .expect("get")
        .expect("item")
        .into();
    let left: Vec<&String> = item
        .as_object()
        .map(|o| {
            o.keys()
                .filter(|k| k.starts_with("ctr_") && !k.starts_with("ctr_w_"))
                .filter(|k| *k != "ctr_forgot") // kept 15 days (counter_journal_migrate)
                // The roll-up's day sums (`ctr_d<yyyymmdd>_<name>`) are journal state.
                .filter(|k| !k.starts_with("ctr_d2"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "inline state left: {left:?} in {item}");
}

#[tokio::test]
async fn a_roll_up_that_stops_at_any_call_leaves_the_next_delivery_exact() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let counter = counter(c.clone(), &counters, &journal);
    let mut expected = [0i64; 3];
    for round in 0..6 {
        let records: Vec<_> = (0..9)
            .map(|i| {
                record(
                    &counter,
                    &format!("i{}", i % 3),
                    1 + i,
                    &format!("r{round}k{i}"),
                )
            })
            .collect();
        for (i, r) in records.iter().enumerate() {
            expected[i % 3] += r.deltas()["n"].to_i64().expect("an integer delta");
        }
        apply(&counter, &records).await;
        // This round's delivery dies at its `round`-th call (0: at once).
        let dying = rollup(
            client_with(Some(FaultInjector::fail_from(round)), 1),
            &counters,
            &journal,
        );
        let _ = run(&dying, &journal).await;
    }
    let report = run(&rollup(c.clone(), &counters, &journal), &journal).await;
    for (i, want) in expected.iter().enumerate() {
        assert_eq!(
            total(&counter, &format!("i{i}")).await,
            *want,
            "item i{i}: {report:?}"
        );
    }
}

#[tokio::test]
async fn a_writer_clock_behind_or_other_settings_neither_shortens_the_window_nor_counts_twice() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let real_now = dynamodb_exactly_once::__private::epoch_seconds();
    let behind = dynamodb_exactly_once::Clock::from_fn(move || (real_now - 1800) * 1000);
    let slow = counter(c.clone(), &counters, &journal).with_clock(behind);
    apply(&slow, &[record(&slow, "a", 3, "k1")]).await;
    let short = CounterConfig::builder(&counters)
        .journal(&journal)
        .window(Duration::from_secs(86_400))
        .cache_keys(0)
        .build()
        .expect("config");
    let other = Counter::new(c.clone(), short);
    apply(
        &other,
        &[record(&other, "a", 3, "k1"), record(&other, "a", 4, "k2")],
    )
    .await;
    run(&rollup(c.clone(), &counters, &journal), &journal).await;
    assert_eq!(total(&slow, "a").await, 7);
    let items = c
        .scan()
        .table_name(&journal)
        .send()
        .await
        .expect("scan")
        .items
        .unwrap_or_default();
    let window = 14 * 86_400; // the journal mode's default window: 14 days
    for item in items.iter().filter(|i| i.contains_key("k")) {
        let Some(AttributeValue::N(ttl)) = item.get("ttl") else {
            panic!("no ttl: {item:?}")
        };
        let ttl: u64 = ttl.parse().expect("ttl");
        // The last put of a key sets its TTL: k1's, put last by the 1-day writer, still
        // covers the 14-day window of the others (also from the slow writer's real time).
        assert!(
            ttl >= real_now + window,
            "ttl {ttl}, now {real_now}: {item:?}"
        );
    }
    assert!(window >= 14 * 86_400);
}

pub(crate) mod audit;
pub(crate) mod mapping;
pub(crate) mod mapping_check;
pub(crate) mod migrate;
pub(crate) mod repair;
pub(crate) mod shapes;
pub(crate) mod window;
pub(crate) mod window_state;
