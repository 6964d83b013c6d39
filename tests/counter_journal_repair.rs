//! The counter journal's exact repair of an outage: a key's journal item keeps its *first*
//! put time (a redelivery changes nothing and makes no stream record), the roll-up keeps per
//! UTC day the sums it applied, and `ops counter repair` recounts whole days from the journal
//! exactly, as the runbook (`docs/operate.md`, `CounterRollupTrimmedAlarm`) says, run here as
//! written: an outage longer than the stream keeps records, the gap reported, the repair of
//! the days named, the counters exact; a repair run twice changes nothing; a roll-up running
//! during the repair, or reading a repaired day's records after it, counts nothing twice.

use std::sync::atomic::Ordering;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use dynamo_testing::Shape;
use dynamodb_exactly_once::counter::Counter;

use crate::counter_journal_shapes::{adding, Harness, HOUR};

/// The journal item of key `idem` on item `pk`: its `at` and `ttl`.
async fn journal_times(h: &Harness) -> Vec<(u64, u64)> {
    let items =
        h.c.scan()
            .table_name(&h.journal)
            .consistent_read(true)
            .send()
            .await
            .expect("scan")
            .items
            .unwrap_or_default();
    let n = |i: &std::collections::HashMap<String, AttributeValue>, name: &str| match i.get(name) {
        Some(AttributeValue::N(n)) => n.parse::<u64>().expect("number"),
        _ => 0,
    };
    items
        .iter()
        .filter(|i| matches!(i.get("pk"), Some(AttributeValue::S(pk)) if !pk.starts_with('~')))
        .map(|i| (n(i, "at"), n(i, "ttl")))
        .collect()
}

fn cold(h: &Harness) -> Counter {
    h.counter()
}

#[tokio::test]
async fn a_key_put_again_keeps_its_first_put_time_and_makes_no_stream_record() {
    let h = Harness::new(Shape::shards(1)).await;
    let first_ms = h.now.load(Ordering::SeqCst);
    let record = adding(&cold(&h), "a", "n", 1, "k1");
    assert_eq!(h.journal(&cold(&h), &[record.clone()]).await, ["journaled"]);
    let before = h.double.stats().records_ingested;
    // Redelivered two hours later to a cold process (no warm cache): put again.
    h.advance(2 * HOUR);
    assert_eq!(h.journal(&cold(&h), &[record]).await, ["journaled"]);
    let times = journal_times(&h).await;
    assert_eq!(times.len(), 1);
    assert_eq!(times[0].0, first_ms, "the first put's time is kept");
    assert!(
        times[0].1 <= first_ms / 1000 + 15 * 86_400 + 3600,
        "the TTL is the first put's: {times:?}"
    );
    assert_eq!(
        h.double.stats().records_ingested,
        before,
        "a put again makes no stream record"
    );
    let report = h.run(&h.rollup()).await;
    assert_eq!((report.applied, h.total("a", "n").await), (1, 1));
    h.drop_tables().await;
}
