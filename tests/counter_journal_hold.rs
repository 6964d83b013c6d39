//! The journal roll-up's hold (`RollupConfig::hold`): a cold item's keys wait in the process's
//! memory and go with its next keys (one update for several), never behind a saved
//! checkpoint, and a process that stops with keys held loses nothing and counts nothing twice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dynamo_testing::{client_with, Fault, FaultInjector, Shape};
use dynamodb_exactly_once::counter::journal::{Rollup, RollupConfig, RollupReport};
use dynamodb_exactly_once::counter::Counter;

use crate::counter_journal_shapes::{adding, Harness};

const MINUTE: u64 = 60_000;

fn with_hold(h: &Harness, ddb: aws_sdk_dynamodb::Client, secs: u64, keys: usize) -> Rollup {
    let config = RollupConfig::builder(h.config())
        .hold(Duration::from_secs(secs))
        .hold_keys(keys)
        .build()
        .expect("config");
    Rollup::new(ddb, h.double.client(), config).with_clock(h.clock.clone())
}

/// Journal key `i` of item `a` (adding `1 << i`), then run `roll`.
async fn key_then_run(h: &Harness, counter: &Counter, roll: &Rollup, i: u32) -> RollupReport {
    let record = adding(counter, "a", "n", 1 << i, &format!("k{i}"));
    h.journal(counter, &[record]).await;
    h.run(roll).await
}

/// A key a minute on item `a` for `minutes` minutes after a first key: the reports of the runs
/// after the first (whose checkpoint, first seen, is saved: nothing is held in it).
async fn minutes(h: &Harness, roll: &Rollup, minutes: u32) -> Vec<RollupReport> {
    let counter = h.counter();
    let first = key_then_run(h, &counter, roll, 0).await;
    assert_eq!((first.applied, first.held), (1, 0), "{first:?}");
    let mut reports = Vec::new();
    for i in 1..=minutes {
        h.advance(MINUTE);
        reports.push(key_then_run(h, &counter, roll, i).await);
    }
    reports
}

#[tokio::test]
async fn a_hold_of_two_minutes_applies_a_key_a_minute_with_one_update_per_two_keys() {
    let h = Harness::new(Shape::shards(1)).await;
    let roll = with_hold(&h, h.c.clone(), 120, 2);
    let reports = minutes(&h, &roll, 4).await;
    let seen: Vec<_> = reports
        .iter()
        .map(|r| (r.keys, r.applied, r.item_updates, r.held))
        .collect();
    assert_eq!(
        seen,
        [(1, 0, 0, 1), (1, 2, 1, 0), (1, 0, 0, 1), (1, 2, 1, 0)],
        "{reports:?}"
    );
    assert!(
        reports[0].caught_up && reports[0].held_age_ms < 120_000,
        "{reports:?}"
    );
    assert_eq!(h.total("a", "n").await, 0b11111);
    h.drop_tables().await;
}

#[tokio::test]
async fn without_a_hold_every_run_applies_its_key() {
    let h = Harness::new(Shape::shards(1)).await;
    let roll = with_hold(&h, h.c.clone(), 0, 2);
    let reports = minutes(&h, &roll, 3).await;
    let seen: Vec<_> = reports
        .iter()
        .map(|r| (r.keys, r.applied, r.item_updates, r.held, r.held_age_ms))
        .collect();
    assert_eq!(seen, [(1, 1, 1, 0, 0); 3], "{reports:?}");
    assert_eq!(h.total("a", "n").await, 0b1111);
    h.drop_tables().await;
}

#[tokio::test]
async fn a_checkpoint_save_applies_the_held_keys_of_its_shard_first() {
    let h = Harness::new(Shape::shards(1)).await;
    // Held for up to two hours and 100 keys: only the hourly checkpoint applies them.
    let roll = with_hold(&h, h.c.clone(), 7200, 100);
    let reports = minutes(&h, &roll, 2).await;
    assert_eq!((reports[1].held, reports[1].applied), (2, 0), "{reports:?}");
    assert_eq!(h.total("a", "n").await, 1);
    h.advance(3_600_000);
    let counter = h.counter();
    let hourly = key_then_run(&h, &counter, &roll, 3).await;
    assert_eq!(
        (hourly.held, hourly.applied, hourly.item_updates),
        (0, 3, 1),
        "{hourly:?}"
    );
    assert_eq!(h.total("a", "n").await, 0b1111);
    // A new process reads from the saved checkpoint: nothing was behind it unapplied.
    h.advance(MINUTE);
    let next = with_hold(&h, h.c.clone(), 0, 2);
    let report = key_then_run(&h, &counter, &next, 4).await;
    assert_eq!(
        (report.keys, report.applied, report.duplicates),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(h.total("a", "n").await, 0b11111);
    h.drop_tables().await;
}

#[tokio::test]
async fn a_process_that_stops_with_keys_held_loses_nothing_and_counts_nothing_twice() {
    let h = Harness::new(Shape::shards(1)).await;
    let roll = with_hold(&h, h.c.clone(), 120, 2);
    let reports = minutes(&h, &roll, 1).await;
    assert_eq!(reports[0].held, 1, "{reports:?}");
    // Another process (the first one frozen, not dead) reads from the checkpoint and applies
    // the held key; then the first one merges it with its next key: a duplicate.
    let other = with_hold(&h, h.c.clone(), 0, 2);
    let report = h.run(&other).await;
    assert_eq!((report.keys, report.applied), (1, 1), "{report:?}");
    assert_eq!(h.total("a", "n").await, 0b11);
    h.advance(MINUTE);
    let counter = h.counter();
    let thawed = key_then_run(&h, &counter, &roll, 2).await;
    assert_eq!((thawed.applied, thawed.duplicates), (1, 1), "{thawed:?}");
    assert_eq!(h.total("a", "n").await, 0b111);
    // The first process dies holding key 3: a new one reads it again from the checkpoint.
    h.advance(MINUTE);
    let held = key_then_run(&h, &counter, &roll, 3).await;
    assert_eq!(held.held, 1, "{held:?}");
    drop(roll);
    let fresh = with_hold(&h, h.c.clone(), 120, 2);
    h.advance(MINUTE);
    let report = key_then_run(&h, &counter, &fresh, 4).await;
    assert_eq!(h.total("a", "n").await, 0b11111, "{report:?}");
    h.drop_tables().await;
}

#[tokio::test]
async fn held_keys_of_an_item_whose_update_fails_stay_held_and_count_once() {
    let h = Harness::new(Shape::shards(1)).await;
    let armed = Arc::new(AtomicBool::new(false));
    let fire = Arc::clone(&armed);
    let faults = FaultInjector::new(move |_, op| {
        if op == "UpdateItem" && fire.swap(false, Ordering::SeqCst) {
            Fault::Refuse
        } else {
            Fault::None
        }
    });
    let roll = with_hold(&h, client_with(Some(faults), 1), 120, 2);
    let reports = minutes(&h, &roll, 1).await;
    assert_eq!(reports[0].held, 1, "{reports:?}");
    armed.store(true, Ordering::SeqCst);
    h.advance(MINUTE);
    let counter = h.counter();
    let failed = key_then_run(&h, &counter, &roll, 2).await;
    assert_eq!((failed.failed_items, failed.held), (1, 1), "{failed:?}");
    assert_eq!(h.total("a", "n").await, 1);
    let again = h.run(&roll).await;
    assert_eq!((again.applied, again.held), (2, 0), "{again:?}");
    assert_eq!(h.total("a", "n").await, 0b111);
    h.drop_tables().await;
}

#[tokio::test]
async fn a_shard_read_to_its_end_applies_its_held_keys_before_it_is_done() {
    let h = Harness::new(Shape::shards(1).rollover(Duration::from_secs(600))).await;
    let roll = with_hold(&h, h.c.clone(), 7200, 100);
    let reports = minutes(&h, &roll, 1).await;
    assert_eq!(reports[0].held, 1, "{reports:?}");
    // The shard closes (a rollover): the run that reads it to its end applies key 1.
    h.advance(10 * MINUTE);
    let closed = h.run(&roll).await;
    assert_eq!((closed.held, closed.applied), (0, 1), "{closed:?}");
    assert_eq!(h.total("a", "n").await, 0b11);
    let fresh = with_hold(&h, h.c.clone(), 0, 2);
    let report = h.run(&fresh).await;
    assert_eq!((report.keys, report.applied), (0, 0), "{report:?}");
    assert_eq!(h.total("a", "n").await, 0b11);
    h.drop_tables().await;
}
