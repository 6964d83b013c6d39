//! Disabling and re-enabling the stream: a new stream with shards of its own, the old one
//! closed, readable until trimmed, then unknown.

use dev_testing::Shape;

use super::{double, pk, put, read_all, read_shard, table, HOUR};

#[tokio::test]
async fn a_re_enabled_stream_is_new_and_the_old_one_is_read_to_its_end_until_trimmed() {
    let (c, table, old) = table().await;
    let (double, clock, streams) = double(Shape::shards(2)).await;
    put(&c, &table, "before", 1).await;
    double.sync_stream(&old).await.expect("sync");

    let new = double
        .disable_and_enable_stream(&c, &table)
        .await
        .expect("re-enabled");
    put(&c, &table, "after", 2).await;

    // The new stream: other shards, no parent, only what was written after.
    assert_ne!(new, old);
    let new_shards = double.listed_shards(&new);
    assert_eq!(new_shards.len(), 2);
    let old_shards = double.listed_shards(&old);
    assert!(new_shards.iter().all(
        |s| s.parent_shard_id.is_none() && !old_shards.iter().any(|o| o.shard_id == s.shard_id)
    ));
    let after: Vec<String> = read_all(&streams, &new)
        .await
        .values()
        .flatten()
        .map(pk)
        .collect();
    assert_eq!(after, ["after"]);
    // The old one: every shard closed, read to its end (no next iterator), with its records.
    assert!(old_shards.iter().all(|s| s.closed), "{old_shards:?}");
    let mut before = Vec::new();
    for shard in &old_shards {
        before.extend(
            read_shard(&streams, &old, &shard.shard_id, 0)
                .await
                .iter()
                .map(pk),
        );
    }
    assert_eq!(before, ["before"]);
    let description = streams
        .describe_stream()
        .stream_arn(&old)
        .send()
        .await
        .expect("describe");
    let status = description
        .stream_description()
        .and_then(|d| d.stream_status());
    assert_eq!(status.map(|s| s.as_str()), Some("DISABLED"));

    // A day later: trimmed, the old stream is unknown; no rollover made it new shards.
    clock.advance(25 * HOUR);
    assert!(double.listed_shards(&old).is_empty());
    let error = streams
        .describe_stream()
        .stream_arn(&old)
        .send()
        .await
        .expect_err("gone");
    assert!(
        error
            .as_service_error()
            .is_some_and(|e| e.is_resource_not_found_exception()),
        "{error:?}"
    );
}
