//! The DynamoDB Streams test double (`dev_testing::streams_double`) fed by DynamoDB Local:
//! partitions by key, lineage on rollover, trimming, expired iterators, empty pages,
//! throttling, `DescribeStream` pages and injected records, all through the SDK.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::{AttributeValue as StreamValue, Record, ShardIteratorType};
use aws_sdk_dynamodbstreams::Client as Streams;
use dev_testing::{client, unique_prefix, Shape, StreamsDouble};
use dynamodb_exactly_once::Clock;

mod pages;
mod reenable;
mod trim;

const HOUR: u64 = 3_600_000;
const MINUTE: u64 = 60_000;

/// A clock the test moves.
#[derive(Clone)]
struct TestClock(Arc<AtomicU64>);

impl TestClock {
    fn new() -> (TestClock, Clock) {
        let now = Arc::new(AtomicU64::new(1_700_000_000_000));
        let read = Arc::clone(&now);
        (
            TestClock(now),
            Clock::from_fn(move || read.load(Ordering::SeqCst)),
        )
    }

    fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

/// A fresh table (`pk` S) with a NEW_IMAGE stream; its client and stream ARN.
async fn table() -> (aws_sdk_dynamodb::Client, String, String) {
    let c = client();
    let name = format!("{}double", unique_prefix());
    let arn = crate::common::stream_table(&c, &name).await;
    (c, name, arn)
}

async fn put(c: &aws_sdk_dynamodb::Client, table: &str, pk: &str, n: i64) {
    c.put_item()
        .table_name(table)
        .item("pk", AttributeValue::S(pk.into()))
        .item("n", AttributeValue::N(n.to_string()))
        .send()
        .await
        .expect("put");
}

async fn double(shape: Shape) -> (StreamsDouble, TestClock, Streams) {
    let (test_clock, clock) = TestClock::new();
    let double = StreamsDouble::start(shape, clock).await.expect("double");
    let streams = double.client();
    (double, test_clock, streams)
}

fn pk(record: &Record) -> String {
    match record
        .dynamodb()
        .and_then(|d| d.keys())
        .and_then(|k| k.get("pk"))
    {
        Some(StreamValue::S(s)) => s.clone(),
        other => panic!("no pk: {other:?}"),
    }
}

fn n(record: &Record) -> i64 {
    match record
        .dynamodb()
        .and_then(|d| d.new_image())
        .and_then(|i| i.get("n"))
    {
        Some(StreamValue::N(n)) => n.parse().expect("number"),
        other => panic!("no n: {other:?}"),
    }
}

fn seq(record: &Record) -> u128 {
    let s = record.dynamodb().and_then(|d| d.sequence_number());
    s.expect("sequence number").parse().expect("number")
}

/// Every listed shard (paged by `limit`), in order: (id, parent, ending sequence number).
async fn shards(
    streams: &Streams,
    arn: &str,
    limit: Option<i32>,
) -> Vec<(String, Option<String>, Option<String>)> {
    let mut out = Vec::new();
    let mut start: Option<String> = None;
    loop {
        let page = streams
            .describe_stream()
            .stream_arn(arn)
            .set_limit(limit)
            .set_exclusive_start_shard_id(start.clone())
            .send()
            .await
            .expect("describe");
        let description = page.stream_description().expect("description");
        assert_eq!(
            description.stream_status().map(|s| s.as_str()),
            Some("ENABLED")
        );
        for s in description.shards() {
            let range = s.sequence_number_range().expect("range");
            out.push((
                s.shard_id().expect("id").to_string(),
                s.parent_shard_id().map(str::to_string),
                range.ending_sequence_number().map(str::to_string),
            ));
        }
        match description.last_evaluated_shard_id() {
            Some(last) => start = Some(last.to_string()),
            None => return out,
        }
    }
}

/// A shard from `TRIM_HORIZON` until its end (closed) or its open tip; counts empty pages.
async fn read_shard(streams: &Streams, arn: &str, shard: &str, empties: usize) -> Vec<Record> {
    let mut iterator = streams
        .get_shard_iterator()
        .stream_arn(arn)
        .shard_id(shard)
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await
        .expect("iterator")
        .shard_iterator
        .expect("iterator");
    let (mut records, mut empty) = (Vec::new(), 0);
    loop {
        let page = streams
            .get_records()
            .shard_iterator(&iterator)
            .limit(7)
            .send()
            .await
            .expect("records");
        let got = page.records().len();
        records.extend(page.records().iter().cloned());
        match page.next_shard_iterator() {
            None => return records,
            Some(next) => iterator = next.to_string(),
        }
        if got == 0 {
            empty += 1;
            if empty > empties {
                return records;
            }
        }
    }
}

async fn read_all(streams: &Streams, arn: &str) -> BTreeMap<String, Vec<Record>> {
    let mut out = BTreeMap::new();
    for (id, _, _) in shards(streams, arn, None).await {
        let records = read_shard(streams, arn, &id, 0).await;
        out.insert(id, records);
    }
    out
}

#[tokio::test]
async fn four_shards_serve_each_insert_once_and_one_key_in_one_shard_in_order() {
    let (c, table, arn) = table().await;
    let (_double, _clock, streams) = double(Shape::shards(4)).await;
    for i in 0..200 {
        put(&c, &table, &format!("k{i}"), 0).await;
    }
    for version in 1..4 {
        for i in 0..10 {
            put(&c, &table, &format!("k{i}"), version).await;
        }
    }
    let by_shard = read_all(&streams, &arn).await;
    assert_eq!(by_shard.len(), 4);
    let mut shard_of: BTreeMap<String, String> = BTreeMap::new();
    let mut versions: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut inserts = BTreeSet::new();
    for (shard, records) in &by_shard {
        for r in records {
            let key = pk(r);
            let first = shard_of.entry(key.clone()).or_insert(shard.clone());
            assert_eq!(first, shard, "{key} in two shards");
            if r.event_name().map(|e| e.as_str()) == Some("INSERT") {
                assert!(inserts.insert(key.clone()), "{key} inserted twice");
            }
            versions.entry(key).or_default().push(n(r));
        }
    }
    assert_eq!(inserts.len(), 200);
    assert!(
        by_shard.values().all(|r| !r.is_empty()),
        "a shard got nothing"
    );
    for i in 0..10 {
        assert_eq!(versions[&format!("k{i}")], vec![0, 1, 2, 3]);
    }
}

#[tokio::test]
async fn rollover_makes_lineages_read_once_with_growing_sequence_numbers() {
    let (c, table, arn) = table().await;
    let (double, clock, streams) =
        double(Shape::shards(2).rollover(Duration::from_secs(3600))).await;
    double.sync_stream(&arn).await.expect("sync");
    for round in 0..4 {
        if round > 0 {
            clock.advance(HOUR + 1000);
        }
        for i in 0..6 {
            put(&c, &table, &format!("r{round}k{i}"), round).await;
        }
        // Records are timed when the double ingests them: before the clock moves.
        double.sync().await.expect("sync");
    }
    let listed = shards(&streams, &arn, None).await;
    assert_eq!(listed.len(), 8, "{listed:?}");
    let ids: BTreeSet<_> = listed.iter().map(|s| s.0.clone()).collect();
    let roots: Vec<_> = listed.iter().filter(|s| s.1.is_none()).collect();
    assert_eq!(roots.len(), 2);
    assert_eq!(listed.iter().filter(|s| s.2.is_some()).count(), 6);
    let mut seen = BTreeSet::new();
    for root in roots {
        let mut current = Some(root.clone());
        let (mut last, mut generations) = (0u128, 0);
        while let Some((id, _, ending)) = current {
            generations += 1;
            for r in read_shard(&streams, &arn, &id, 0).await {
                assert!(seq(&r) > last, "sequence numbers grow along the lineage");
                let created = r
                    .dynamodb()
                    .and_then(|d| d.approximate_creation_date_time());
                let expected = 1_700_000_000 + n(&r) * 3601;
                assert_eq!(created.expect("creation time").secs(), expected);
                last = seq(&r);
                assert!(seen.insert(pk(&r)), "{} read twice", pk(&r));
            }
            if let Some(end) = ending {
                assert!(end.parse::<u128>().expect("number") >= last);
            }
            current = listed.iter().find(|s| s.1.as_deref() == Some(&id)).cloned();
            assert!(current.as_ref().is_none_or(|c| ids.contains(&c.0)));
        }
        assert_eq!(generations, 4);
    }
    assert_eq!(seen.len(), 24);
    let views = double.listed_shards(&arn);
    assert_eq!(views.iter().filter(|v| v.closed).count(), 6);
}

async fn shard_iterator(
    streams: &Streams,
    arn: &str,
    shard: &str,
    kind: ShardIteratorType,
    sequence: Option<String>,
) -> Result<String, aws_sdk_dynamodbstreams::Error> {
    let answer = streams
        .get_shard_iterator()
        .stream_arn(arn)
        .shard_id(shard)
        .shard_iterator_type(kind)
        .set_sequence_number(sequence)
        .send()
        .await?;
    Ok(answer.shard_iterator.expect("iterator"))
}

#[tokio::test]
async fn a_split_keeps_each_key_in_its_lineage() {
    let (c, table, arn) = table().await;
    let (double, clock, streams) =
        double(Shape::shards(2).split_every(Duration::from_secs(3600))).await;
    double.sync_stream(&arn).await.expect("sync");
    for round in 0..3 {
        if round > 0 {
            clock.advance(HOUR + 1000);
        }
        for i in 0..20 {
            put(&c, &table, &format!("s{i}"), round).await;
        }
        double.sync().await.expect("sync");
    }
    // Two roots, each split once into two children.
    let listed = shards(&streams, &arn, None).await;
    assert_eq!(listed.len(), 6, "{listed:?}");
    assert_eq!(listed.iter().filter(|s| s.2.is_some()).count(), 2);
    let parent: BTreeMap<String, Option<String>> =
        listed.iter().map(|s| (s.0.clone(), s.1.clone())).collect();
    let mut trail: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for (shard, records) in read_all(&streams, &arn).await {
        for r in records {
            trail
                .entry(pk(&r))
                .or_default()
                .push((n(&r), shard.clone()));
        }
    }
    assert_eq!(trail.len(), 20);
    for (key, mut versions) in trail {
        versions.sort();
        assert_eq!(
            versions.iter().map(|v| v.0).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        for pair in versions.windows(2) {
            let (earlier, later) = (&pair[0].1, &pair[1].1);
            let continues = earlier == later || parent[later].as_ref() == Some(earlier);
            assert!(continues, "{key}: {earlier} then {later}");
        }
    }
}
