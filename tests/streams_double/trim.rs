//! Trimming: records past the retention, iterators at them, closed shards leaving the listing.

use std::time::Duration;

use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use dev_testing::Shape;

use super::{
    double, pk, put, read_all, read_shard, seq, shard_iterator, shards, table, HOUR, MINUTE,
};

#[tokio::test]
async fn an_iterator_after_a_trimmed_record_is_refused() {
    let (c, table, arn) = table().await;
    let (double, clock, streams) = double(Shape::shards(1)).await;
    put(&c, &table, "old", 1).await;
    let old = read_all(&streams, &arn).await;
    let old_seq = seq(old.values().flatten().next().expect("a record")).to_string();
    let shard = double.listed_shards(&arn)[0].shard_id.clone();
    clock.advance(25 * HOUR);
    put(&c, &table, "new", 2).await;
    let kind = ShardIteratorType::AfterSequenceNumber;
    let error = streams
        .get_shard_iterator()
        .stream_arn(&arn)
        .shard_id(&shard)
        .shard_iterator_type(kind)
        .sequence_number(&old_seq)
        .send()
        .await
        .expect_err("trimmed");
    assert!(
        error
            .as_service_error()
            .is_some_and(|e| e.is_trimmed_data_access_exception()),
        "{error:?}"
    );
    let kept = read_shard(&streams, &arn, &shard, 0).await;
    assert_eq!(kept.iter().map(pk).collect::<Vec<_>>(), vec!["new"]);
    assert_eq!(double.listed_shards(&arn)[0].records, 1);
}

#[tokio::test]
async fn get_records_at_records_trimmed_since_the_iterator_is_refused() {
    let (c, table, arn) = table().await;
    let shape = Shape::shards(1).retention(Duration::from_secs(600));
    let (double, clock, streams) = double(shape).await;
    put(&c, &table, "a", 1).await;
    double.sync_stream(&arn).await.expect("sync");
    let shard = double.listed_shards(&arn)[0].shard_id.clone();
    let kind = ShardIteratorType::TrimHorizon;
    let iterator = shard_iterator(&streams, &arn, &shard, kind, None)
        .await
        .expect("iterator");
    clock.advance(11 * MINUTE);
    let error = streams
        .get_records()
        .shard_iterator(iterator)
        .send()
        .await
        .expect_err("trimmed");
    assert!(
        error
            .as_service_error()
            .is_some_and(|e| e.is_trimmed_data_access_exception()),
        "{error:?}"
    );
}

#[tokio::test]
async fn closed_shards_trimmed_empty_leave_the_listing() {
    let (c, table, arn) = table().await;
    let shape = Shape::shards(1).rollover(Duration::from_secs(3600));
    let (double, clock, streams) = double(shape).await;
    double.sync_stream(&arn).await.expect("sync");
    let first = double.listed_shards(&arn)[0].shard_id.clone();
    put(&c, &table, "x", 4).await;
    double.sync().await.expect("sync");
    clock.advance(26 * HOUR);
    let listed = shards(&streams, &arn, None).await;
    assert!(listed.iter().all(|s| s.0 != first), "{listed:?}");
    // Closed at 2..=26 h (at most a retention ago) and the open one.
    assert_eq!(listed.len(), 26, "{listed:?}");
    let kind = ShardIteratorType::TrimHorizon;
    let error = shard_iterator(&streams, &arn, &first, kind, None)
        .await
        .expect_err("gone");
    assert!(
        matches!(
            error,
            aws_sdk_dynamodbstreams::Error::ResourceNotFoundException(_)
        ),
        "{error:?}"
    );
}
