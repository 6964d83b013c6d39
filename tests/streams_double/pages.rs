//! Iterators and pages: expiry, empty pages, throttling (by share and by readers per shard),
//! `DescribeStream` pages and injected records.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_dynamodbstreams::error::ProvideErrorMetadata;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use dev_testing::Shape;
use serde_json::json;

use super::{double, pk, put, read_all, shard_iterator, shards, table, MINUTE};

#[tokio::test]
async fn an_iterator_expires_after_fifteen_minutes_of_clock() {
    let (c, table, arn) = table().await;
    let (double, clock, streams) = double(Shape::shards(1)).await;
    put(&c, &table, "a", 1).await;
    double.sync_stream(&arn).await.expect("sync");
    let shard = double.listed_shards(&arn)[0].shard_id.clone();
    let kind = ShardIteratorType::TrimHorizon;
    let iterator = shard_iterator(&streams, &arn, &shard, kind, None)
        .await
        .expect("iterator");
    clock.advance(16 * MINUTE);
    let error = streams
        .get_records()
        .shard_iterator(iterator)
        .send()
        .await
        .expect_err("expired");
    assert!(
        error
            .as_service_error()
            .is_some_and(|e| e.is_expired_iterator_exception()),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_fresh_iterator_answers_empty_pages_before_the_records() {
    let (c, table, arn) = table().await;
    let (double, _clock, streams) = double(Shape::shards(1).empty_pages(5)).await;
    for i in 0..3 {
        put(&c, &table, &format!("k{i}"), i).await;
    }
    double.sync_stream(&arn).await.expect("sync");
    let shard = double.listed_shards(&arn)[0].shard_id.clone();
    let kind = ShardIteratorType::TrimHorizon;
    let mut iterator = shard_iterator(&streams, &arn, &shard, kind, None)
        .await
        .expect("iterator");
    let mut sizes = Vec::new();
    for _ in 0..6 {
        let page = streams
            .get_records()
            .shard_iterator(&iterator)
            .send()
            .await
            .expect("page");
        sizes.push(page.records().len());
        iterator = page.next_shard_iterator().expect("open shard").to_string();
    }
    assert_eq!(sizes, vec![0, 0, 0, 0, 0, 3]);
    assert_eq!(double.stats().empty_pages_served, 5);
}

#[tokio::test]
async fn throttled_calls_are_retried_by_the_sdk_then_fail() {
    let (_c, _table, arn) = table().await;
    let (double, _clock, _) = double(Shape::shards(1).throttle_percent(100)).await;
    double.sync_stream(&arn).await.expect("sync");
    let shard = double.listed_shards(&arn)[0].shard_id.clone();
    let streams = double.client_with_attempts(3);
    let error = streams
        .get_shard_iterator()
        .stream_arn(&arn)
        .shard_id(&shard)
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await
        .expect_err("throttled");
    // The SDK's model has no LimitExceededException for GetShardIterator: it is unmodeled
    // (`Unhandled`) with that code, classified as throttling and retried all the same.
    assert_eq!(
        error.as_service_error().and_then(|e| e.code()),
        Some("LimitExceededException"),
        "{error:?}"
    );
    let stats = double.stats();
    assert_eq!(stats.calls.get("GetShardIterator"), Some(&3), "{stats:?}");
    assert_eq!(stats.throttled, 3);
    double.set_throttle_percent(0);
    let kind = ShardIteratorType::TrimHorizon;
    let iterator = shard_iterator(&streams, &arn, &shard, kind, None)
        .await
        .expect("no longer throttled");
    double.set_throttle_percent(100);
    let error = streams
        .get_records()
        .shard_iterator(iterator)
        .send()
        .await
        .expect_err("throttled");
    assert!(
        error
            .as_service_error()
            .is_some_and(|e| e.is_limit_exceeded_exception()),
        "{error:?}"
    );
    assert_eq!(double.stats().calls.get("GetRecords"), Some(&3));
}

#[tokio::test]
async fn a_third_reader_of_one_shard_is_throttled() {
    let (_c, _table, arn) = table().await;
    let shape = Shape::shards(1).latency(Duration::from_secs(1));
    let (double, _clock, _) = double(shape).await;
    double.sync_stream(&arn).await.expect("sync");
    let shard = double.listed_shards(&arn)[0].shard_id.clone();
    let streams = double.client_with_attempts(1);
    let kind = ShardIteratorType::TrimHorizon;
    let iterator = shard_iterator(&streams, &arn, &shard, kind, None)
        .await
        .expect("iterator");
    let read = || streams.get_records().shard_iterator(&iterator).send();
    let (a, b, c) = tokio::join!(read(), read(), read());
    let throttled = [a, b, c]
        .into_iter()
        .filter(|r| {
            r.as_ref()
                .err()
                .and_then(|e| e.as_service_error())
                .is_some_and(|e| e.is_limit_exceeded_exception())
        })
        .count();
    assert_eq!(throttled, 1);
}

#[tokio::test]
async fn describe_stream_pages_by_limit() {
    let (_c, _table, arn) = table().await;
    let (_double, _clock, streams) = double(Shape::shards(5)).await;
    let all = shards(&streams, &arn, None).await;
    let paged = shards(&streams, &arn, Some(2)).await;
    assert_eq!(all.len(), 5);
    assert_eq!(paged, all);
    let first = streams
        .describe_stream()
        .stream_arn(&arn)
        .limit(2)
        .send()
        .await
        .expect("describe");
    let description = first.stream_description().expect("description");
    assert_eq!(description.shards().len(), 2);
    assert_eq!(
        description.last_evaluated_shard_id(),
        description.shards()[1].shard_id()
    );
}

#[tokio::test]
async fn injected_records_are_served_like_the_tables_own() {
    let (c, table, arn) = table().await;
    let (double, _clock, streams) = double(Shape::shards(4)).await;
    put(&c, &table, "real", 1).await;
    double.sync_stream(&arn).await.expect("sync");
    let synthetic = (0..50)
        .map(|i| {
            let key = json!({ "pk": { "S": format!("synthetic{i}") } });
            let image =
                json!({ "pk": { "S": format!("synthetic{i}") }, "n": { "N": i.to_string() } });
            json!({ "dynamodb": { "Keys": key, "NewImage": image } })
        })
        .collect();
    double.inject(&arn, synthetic).expect("inject");
    let keys: Vec<String> = read_all(&streams, &arn)
        .await
        .into_values()
        .flatten()
        .map(|r| pk(&r))
        .collect();
    let distinct: BTreeSet<_> = keys.iter().cloned().collect();
    assert_eq!(keys.len(), 51);
    assert_eq!(distinct.len(), 51);
    assert!(distinct.contains("real"));

    let other = "arn:aws:dynamodb:ddblocal:000000000000:table/none/stream/2026-01-01T00:00:00.000";
    double.add_stream(other, "pk");
    let record = json!({ "dynamodb": { "Keys": { "pk": { "S": "x" } }, "NewImage": { "pk": { "S": "x" } } } });
    double.inject(other, vec![record]).expect("inject");
    let served = read_all(&streams, other).await;
    assert_eq!(served.values().flatten().count(), 1);
}
