//! The counter journal at the stream shapes DynamoDB has and DynamoDB Local does not: many
//! shards, rollover, splits (the Streams test double, fed by DynamoDB Local's real stream),
//! read by the event source mapping emulator as Lambda reads it, and records the counter table
//! refuses. The harness here is the other journal tests' too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::mapping::{Mapping, MappingConfig, Stats};
use dev_testing::{client, Shape, StreamsDouble};
use dynamodb_exactly_once::counter::journal::{Rollup, RollupConfig};
use dynamodb_exactly_once::counter::{Counter, CounterConfig, CounterRecord};
use dynamodb_exactly_once::{Clock, ItemKey};
use dynamodb_exactly_once::{Deadline, Protocol};
use dynamodb_exactly_once_lambda::RollupFunction;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;

use crate::counter::journal::{apply, key, tables};

pub(crate) const HOUR: u64 = 3_600_000;
/// The harness's mapping's tumbling window (ms), and a second.
const WINDOW_MS: u64 = 61_000;

/// Counter and journal tables, the Streams double in front of the journal's stream, and one
/// clock (epoch ms) for the writers, the roll-ups, the double and the mappings, which the test
/// moves.
pub(crate) struct Harness {
    pub(crate) c: Client,
    pub(crate) counters: String,
    pub(crate) journal: String,
    pub(crate) double: StreamsDouble,
    pub(crate) now: Arc<AtomicU64>,
    pub(crate) clock: Clock,
    pub(crate) arn: String,
}

impl Harness {
    pub(crate) async fn new(shape: Shape) -> Harness {
        let c = client();
        let (counters, journal) = tables(&c).await;
        // Now: the journal items' TTLs (clock + 14 days) stay ahead of DynamoDB Local's real
        // clock, which deletes expired items, for every clock the tests reach.
        let now = Arc::new(AtomicU64::new(
            dynamodb_exactly_once::__private::epoch_millis(),
        ));
        let read = Arc::clone(&now);
        let clock = Clock::from_fn(move || read.load(Ordering::SeqCst));
        let double = StreamsDouble::start(shape, clock.clone())
            .await
            .expect("double");
        let arn = c
            .describe_table()
            .table_name(&journal)
            .send()
            .await
            .expect("journal")
            .table()
            .and_then(|t| t.latest_stream_arn())
            .expect("stream")
            .to_string();
        double.sync_stream(&arn).await.expect("sync");
        Harness {
            c,
            counters,
            journal,
            double,
            now,
            clock,
            arn,
        }
    }

    pub(crate) fn config(&self) -> CounterConfig {
        CounterConfig::builder(&self.counters)
            .journal(&self.journal)
            .cache_keys(0)
            .build()
            .expect("config")
    }

    pub(crate) fn counter(&self) -> Counter {
        Counter::new(self.c.clone(), self.config()).with_clock(self.clock.clone())
    }

    /// The roll-up function over the harness's tables with `ddb` (a new process).
    pub(crate) fn function_with(&self, ddb: Client) -> Arc<RollupFunction> {
        self.function_holding(ddb, false)
    }

    /// [`Self::function_with`], a window's keys held in its state when `hold`.
    pub(crate) fn function_holding(&self, ddb: Client, hold: bool) -> Arc<RollupFunction> {
        let config = RollupConfig::builder(self.config())
            .hold_in_window(hold)
            .build()
            .expect("config");
        let rollup = Rollup::new(ddb, config).with_clock(self.clock.clone());
        Arc::new(RollupFunction::new("counter-rollup", rollup))
    }

    /// The journal's event source mapping as the stack sets it (`INSERT`s only, partial batch
    /// responses, bisect on error, a 1-minute tumbling window), over the double.
    pub(crate) fn mapping(&self) -> Mapping {
        let config = MappingConfig::builder()
            .batch_size(100)
            .bisect_batch_on_function_error(true)
            .report_batch_item_failures(true)
            .tumbling_window_secs(60)
            .filter_pattern(serde_json::json!({"eventName": ["INSERT"]}))
            .build()
            .expect("mapping config");
        Mapping::new(self.double.client(), &self.arn, config).with_clock(self.clock.clone())
    }

    /// Move the clock past the mapping's window and run it until idle; each invocation a new
    /// roll-up process (nothing kept between batches).
    pub(crate) async fn roll(&self, mapping: &mut Mapping) -> Stats {
        let ddb = self.c.clone();
        let config = RollupConfig::builder(self.config())
            .build()
            .expect("config");
        let clock = self.clock.clone();
        let fresh = move |event: Value| {
            let rollup = Rollup::new(ddb.clone(), config.clone()).with_clock(clock.clone());
            async move { invoke(&RollupFunction::new("counter-rollup", rollup), event).await }
        };
        // Past the window's end first: its final invoke applies the keys.
        self.advance(WINDOW_MS);
        mapping.run_until_idle(&fresh, 500).await.expect("mapping");
        mapping.stats().clone()
    }

    /// Move the clock past the mapping's window and run it until idle with the function `f`.
    pub(crate) async fn roll_with(&self, mapping: &mut Mapping, f: Arc<RollupFunction>) -> Stats {
        let handler = move |event: Value| {
            let f = Arc::clone(&f);
            async move { invoke(&f, event).await }
        };
        self.advance(WINDOW_MS);
        mapping
            .run_until_idle(&handler, 500)
            .await
            .expect("mapping");
        mapping.stats().clone()
    }

    /// The dead letters kept in the journal table.
    pub(crate) async fn dead_letters(
        &self,
    ) -> Vec<std::collections::HashMap<String, AttributeValue>> {
        self.c
            .query()
            .table_name(&self.journal)
            .key_condition_expression("pk = :p")
            .expression_attribute_values(":p", AttributeValue::S("~dead".into()))
            .consistent_read(true)
            .send()
            .await
            .expect("query")
            .items
            .unwrap_or_default()
    }

    /// Journal `records` and let the double take their stream records in now.
    pub(crate) async fn journal(
        &self,
        counter: &Counter,
        records: &[CounterRecord],
    ) -> Vec<&'static str> {
        let labels = apply(counter, records).await;
        self.sync().await;
        labels
    }

    pub(crate) async fn sync(&self) {
        self.double.sync_stream(&self.arn).await.expect("sync");
    }

    pub(crate) fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    pub(crate) async fn total(&self, pk: &str, counter_name: &str) -> i64 {
        let item: Option<Value> = self.counter().get(&key(pk)).await.expect("get");
        item.and_then(|i| i.get(counter_name).and_then(Value::as_i64))
            .unwrap_or(0)
    }

    /// Give counter item `pk` the counter `name` as a string: adding to it is refused
    /// (`ValidationException`), a poison record for the roll-up.
    pub(crate) async fn poison(&self, pk: &str, name: &str) {
        self.c
            .put_item()
            .table_name(&self.counters)
            .item("PK", AttributeValue::S(pk.into()))
            .item("SK", AttributeValue::S("day".into()))
            .item(name, AttributeValue::S("not a number".into()))
            .send()
            .await
            .expect("put");
    }

    /// Delete the tables (DynamoDB Local slows down as tables and their streams pile up: the
    /// checker's schedules each delete theirs).
    pub(crate) async fn drop_tables(&self) {
        for table in [&self.counters, &self.journal] {
            let _ = self.c.delete_table().table_name(table).send().await;
        }
    }

    /// Counter item `pk` as stored.
    pub(crate) async fn raw_item(
        &self,
        pk: &str,
    ) -> std::collections::HashMap<String, AttributeValue> {
        self.c
            .get_item()
            .table_name(&self.counters)
            .set_key(Some(key(pk).to_item().expect("key")))
            .consistent_read(true)
            .send()
            .await
            .expect("get")
            .item
            .unwrap_or_default()
    }

    /// The watermark attributes on item `pk`.
    pub(crate) async fn watermarks(&self, pk: &str) -> usize {
        let item = self
            .counter()
            .get_json(&key(pk))
            .await
            .expect("get")
            .unwrap_or_default();
        item.keys().filter(|k| k.starts_with("ctr_w_")).count()
    }
}

/// One invocation of `f` as Lambda makes it.
pub(crate) async fn invoke(f: &RollupFunction, event: Value) -> Result<Value, String> {
    f.handle(LambdaEvent::new(event, Context::default()))
        .await
        .map_err(|e| format!("{e:?}"))
}

pub(crate) fn adding(
    counter: &Counter,
    pk: &str,
    name: &str,
    delta: i64,
    idem: &str,
) -> CounterRecord {
    counter
        .record(key(pk), [(name, delta)], idem)
        .expect("record")
}

fn ones(counter: &Counter, pk: &str, from: usize, n: usize) -> Vec<CounterRecord> {
    (from..from + n)
        .map(|i| adding(counter, pk, "n", 1, &format!("{pk}-k{i}")))
        .collect()
}

// ---------------------------------------------------------------- poison records

#[tokio::test]
async fn a_key_the_counter_table_refuses_is_an_invalid_key_dead_letter_not_journaled() {
    let h = Harness::new(Shape::shards(1)).await;
    let counter = h.counter();
    let wrong = counter
        .record(ItemKey::partition("PK", "a").expect("key"), [("n", 1)], "x")
        .expect("record");
    let good = adding(&counter, "a", "n", 1, "y");
    let indexed = vec![(0, wrong), (1, good)];
    let mut applied = counter.apply(indexed, Deadline::none()).await;
    applied.results.sort_by_key(|(i, _)| *i);
    let labels: Vec<&str> = applied.results.iter().map(|(_, r)| r.label()).collect();
    assert_eq!(labels, ["invalid", "journaled"], "{:?}", applied.results);
}

#[tokio::test]
async fn a_record_the_counter_table_refuses_is_a_dead_letter_and_the_rest_of_its_item_counts() {
    let h = Harness::new(Shape::shards(4)).await;
    // Item b holds `n` as a string: adding to it is refused (ValidationException).
    h.poison("b", "n").await;
    let counter = h.counter();
    let mut records = ones(&counter, "a", 0, 5);
    records.push(adding(&counter, "b", "m", 2, "b-m1"));
    records.push(adding(&counter, "b", "n", 1, "b-n1"));
    records.push(adding(&counter, "b", "m", 3, "b-m2"));
    h.journal(&counter, &records).await;
    let mut mapping = h.mapping();
    let stats = h.roll(&mut mapping).await;
    assert_eq!(h.total("a", "n").await, 5, "{stats:?}");
    assert_eq!(
        h.total("b", "m").await,
        5,
        "b's other keys count: {stats:?}"
    );
    let letters = h.dead_letters().await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    // The shard moved past it: later keys count, nothing is discarded or retried for ever.
    h.journal(&counter, &ones(&counter, "a", 5, 3)).await;
    h.advance(2 * 60_000);
    let stats = h.roll(&mut mapping).await;
    assert_eq!(h.total("a", "n").await, 8, "{stats:?}");
    assert_eq!(h.dead_letters().await.len(), 1);
    assert!(mapping.on_failure_messages().is_empty(), "{stats:?}");
    h.drop_tables().await;
}

#[tokio::test]
async fn a_refused_record_whose_dead_letter_was_not_kept_is_kept_by_the_next_delivery() {
    // Found by the randomized checker (seed 751895003): the watermark moved past the refused
    // record, then its dead letter's put failed; the next delivery dropped it as applied.
    let h = Harness::new(Shape::shards(1)).await;
    h.poison("b", "n").await;
    let counter = h.counter();
    h.journal(&counter, &[adding(&counter, "b", "n", 1, "poison")])
        .await;
    let faults = crate::counter::journal::first_of("BatchWriteItem", dev_testing::Fault::Refuse);
    let dying = h.function_with(dev_testing::client_with(Some(faults), 1));
    let mut mapping = h.mapping();
    let stats = h.roll_with(&mut mapping, dying).await;
    assert!(
        stats.failed_invocations + stats.invocations >= 2,
        "{stats:?}"
    );
    assert_eq!(h.dead_letters().await.len(), 1, "{stats:?}");
    h.drop_tables().await;
}

// ---------------------------------------------------------------- shards, rollovers, bounds

#[tokio::test]
async fn keys_count_once_over_thirty_shards_with_rollovers_splits_and_two_mappings() {
    let shape = Shape::shards(30)
        .rollover(Duration::from_secs(4 * 3600))
        .split_every(Duration::from_secs(3 * 3600));
    let h = Harness::new(shape).await;
    let counter = h.counter();
    // Two mappings on one stream (a mapping replaced, or two by mistake): each delivers every
    // record; the watermarks count each key once.
    let (mut a, mut b) = (h.mapping(), h.mapping());
    let mut want = [0i64; 40];
    // 4.5 hours: a rollover (4 h) and a split (3 h) of every shard.
    for step in 0..3 {
        let records: Vec<_> = (0..40)
            .map(|i| {
                want[i] += 1;
                adding(&counter, &format!("i{i}"), "n", 1, &format!("s{step}k{i}"))
            })
            .collect();
        h.journal(&counter, &records).await;
        // Redelivered: counted once.
        h.journal(&counter, &records[..10]).await;
        h.advance(HOUR + HOUR / 2);
        h.sync().await;
        let (sa, sb) = futures::join!(h.roll(&mut a), h.roll(&mut b));
        assert!(a.on_failure_messages().is_empty(), "{sa:?} {sb:?}");
    }
    assert!(a.checkpoints().len() > 30, "{:?}", a.checkpoints().len());
    for (i, n) in want.iter().enumerate() {
        assert_eq!(h.total(&format!("i{i}"), "n").await, *n, "item i{i}");
    }
    h.drop_tables().await;
}

#[tokio::test]
async fn an_item_updated_by_a_new_process_each_batch_stays_bounded_over_eight_days_of_rollovers() {
    // Review J4: pruning lived in one process's memory; a new process per batch (Lambda's
    // recycles, many items) never pruned, and the item grew every day.
    let h = Harness::new(Shape::shards(2).rollover(Duration::from_secs(4 * 3600))).await;
    let counter = h.counter();
    let mut mapping = h.mapping();
    let mut largest = 0;
    // Eight days, a key every 6 hours on item a with two counters.
    for step in 0..32 {
        let record = counter
            .record(
                key("a"),
                [("orders", 1), ("amount_cents", 12_345)],
                format!("s{step}"),
            )
            .expect("record");
        h.journal(&counter, &[record]).await;
        h.advance(6 * HOUR);
        h.sync().await;
        h.roll(&mut mapping).await;
        let item = h.raw_item("a").await;
        largest = largest.max(dynamodb_exactly_once::__private::item_size(&item));
    }
    assert_eq!(h.total("a", "orders").await, 32);
    let item = h.raw_item("a").await;
    let days = item.keys().filter(|k| k.starts_with("ctr_d")).count();
    let marks = h.watermarks("a").await;
    eprintln!("watermarks {marks}, day sums {days}, largest item {largest} bytes: {item:?}");
    // Live: the lanes of the last 30 hours (at most 5 updates) and 5 days of 2 counters; fewer
    // than 8 stale attributes besides.
    assert!(marks <= 5 + 7, "{marks} watermarks");
    assert!(days <= 10 + 7, "{days} day sums");
    assert!(largest < 1024, "{largest} bytes: a write unit per update");
    h.drop_tables().await;
}
