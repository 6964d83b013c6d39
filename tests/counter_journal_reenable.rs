//! The journal table's stream disabled and re-enabled (a new stream, new ARN): the roll-up
//! finishes the old stream's shards, alongside the new one's, before they are trimmed, and
//! reports a gap only for what the old stream really lost.

use dynamo_testing::Shape;

use crate::counter_journal_shapes::{adding, Harness, HOUR};

#[tokio::test]
async fn a_re_enabled_stream_s_old_shards_are_read_to_their_end_not_reported_as_gaps() {
    let mut h = Harness::new(Shape::shards(2)).await;
    let counter = h.counter();
    let roll = h.rollup();
    // Given keys counted, then keys journaled that no run has read yet ...
    h.journal(&counter, &[adding(&counter, "a", "n", 1, "k1")])
        .await;
    h.run(&roll).await;
    let unread = [
        adding(&counter, "a", "n", 2, "k2"),
        adding(&counter, "b", "n", 4, "k3"),
    ];
    h.journal(&counter, &unread).await;
    // ... when the stream is disabled and enabled again, and more keys are journaled ...
    h.arn = h
        .double
        .disable_and_enable_stream(&h.c, &h.journal)
        .await
        .expect("re-enabled");
    h.advance(60_000);
    h.journal(&counter, &[adding(&counter, "a", "n", 8, "k4")])
        .await;

    // Then one run counts both streams' keys, with no gap.
    let report = h.run(&roll).await;
    assert_eq!(report.trimmed, 0, "{report:?}");
    assert_eq!(h.total("a", "n").await, 11, "{report:?}");
    assert_eq!(h.total("b", "n").await, 4, "{report:?}");
    assert!(report.caught_up, "{report:?}");

    // A day later (a run at half-time) the old stream is gone: nothing left of it, no gap,
    // nothing counted twice.
    h.advance(12 * HOUR);
    h.run(&roll).await;
    h.advance(13 * HOUR);
    h.journal(&counter, &[adding(&counter, "b", "n", 16, "k5")])
        .await;
    let report = h.run(&roll).await;
    assert_eq!(report.trimmed, 0, "{report:?}");
    assert_eq!(h.total("a", "n").await, 11, "{report:?}");
    assert_eq!(h.total("b", "n").await, 20, "{report:?}");
}

#[tokio::test]
async fn an_old_stream_trimmed_before_its_shards_were_finished_is_a_gap() {
    let mut h = Harness::new(Shape::shards(1)).await;
    let counter = h.counter();
    let roll = h.rollup();
    h.journal(&counter, &[adding(&counter, "a", "n", 1, "k1")])
        .await;
    h.run(&roll).await;
    h.journal(&counter, &[adding(&counter, "a", "n", 2, "k2")])
        .await;
    h.arn = h
        .double
        .disable_and_enable_stream(&h.c, &h.journal)
        .await
        .expect("re-enabled");
    // No run for 25 hours: the old stream's unread record was trimmed.
    h.advance(25 * HOUR);
    h.journal(&counter, &[adding(&counter, "a", "n", 4, "k3")])
        .await;
    let report = h.run(&roll).await;
    assert!(report.trimmed >= 1, "{report:?}");
    assert_eq!(h.total("a", "n").await, 5, "{report:?}");
}
