//! The counter journal's exact repair of an outage: a key's journal item keeps its *first*
//! put time (a redelivery changes nothing and makes no stream record), the roll-up keeps per
//! UTC day the sums it applied, and `ops counter repair` recounts whole days from the journal
//! exactly, as the runbook (`docs/operate.md`) says, run here as written: the mapping stopped
//! for longer than the stream keeps records, the repair of the days since it last ran, the
//! counters exact; a repair run twice changes nothing; a delivery during the repair, or of a
//! repaired day's records after it, counts nothing twice.

use std::sync::atomic::Ordering;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use dev_testing::Shape;
use dynamodb_exactly_once::counter::journal::{Repair, RepairDays, RepairOutcome};
use dynamodb_exactly_once::counter::Counter;

use crate::counter::journal::shapes::{adding, Harness, HOUR};

const DAY: u64 = 24 * HOUR;

/// The journaled keys' items: their `at` and `ttl`.
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

/// A writer without the warm-redelivery cache (a new process).
fn cold(h: &Harness) -> Counter {
    h.counter()
}

#[tokio::test]
async fn a_key_put_again_keeps_its_first_put_time_and_makes_no_stream_record() {
    let h = Harness::new(Shape::shards(1)).await;
    let first_ms = h.now.load(Ordering::SeqCst);
    let record = adding(&cold(&h), "a", "n", 1, "k1");
    assert_eq!(
        h.journal(&cold(&h), std::slice::from_ref(&record)).await,
        ["journaled"]
    );
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
    h.roll(&mut h.mapping()).await;
    assert_eq!(h.total("a", "n").await, 1);
    h.drop_tables().await;
}

/// Move the harness's clock forward to `hour` o'clock UTC of the next day.
fn to_next_day_at(h: &Harness, hour: u64) -> u64 {
    let now = h.now.load(Ordering::SeqCst);
    let target = (now / DAY + 1) * DAY + hour * HOUR;
    h.advance(target - now);
    target
}

/// The UTC day (`YYYY-MM-DD`) of epoch seconds `secs`.
fn day_of(secs: u64) -> String {
    RepairDays::utc_day(secs)
}

/// The runbook's repair command (`docs/operate.md`), as written, with the gap's days in.
fn runbook_command(from: &str, to: &str) -> Vec<String> {
    let page = include_str!("../../../docs/operate.md");
    let line = page
        .lines()
        .find(|l| l.trim_start().starts_with("ops counter repair --from <"))
        .expect("the runbook names the repair command");
    line.split_whitespace()
        .map(|w| match w {
            "<FIRST_DAY>" => from.to_string(),
            "<LAST_DAY>" => to.to_string(),
            w => w.to_string(),
        })
        .collect()
}

/// Run `ops counter repair ...` (its arguments parsed as the CLI parses them) with the
/// harness's clock.
async fn run_repair(h: &Harness, args: &[String]) -> RepairOutcome {
    let arg = |name: &str| {
        let at = args.iter().position(|a| a == name).expect("argument");
        args[at + 1].clone()
    };
    assert_eq!(&args[..3], ["ops", "counter", "repair"], "{args:?}");
    let days = RepairDays::parse(&arg("--from"), &arg("--to")).expect("days");
    let config = dynamodb_exactly_once::counter::journal::RollupConfig::builder(h.config())
        .build()
        .expect("config");
    Repair::new(h.c.clone(), config)
        .with_clock(h.clock.clone())
        .run(days, &|_| {})
        .await
        .expect("repair")
}

/// Repair the days of epoch seconds `from` to `to` with the runbook's command.
pub(crate) async fn run_repair_days(h: &Harness, from: u64, to: u64) -> RepairOutcome {
    let command = runbook_command(&day_of(from), &day_of(to));
    run_repair(h, &command).await
}

fn repaired(outcome: RepairOutcome) -> dynamodb_exactly_once::counter::journal::RepairReport {
    match outcome {
        RepairOutcome::Repaired(report) => report,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_outage_longer_than_the_stream_keeps_records_is_recounted_exactly_by_the_runbook() {
    let h = Harness::new(Shape::shards(2).rollover(Duration::from_secs(4 * 3600))).await;
    let c = cold(&h);
    let mut mapping = h.mapping();
    // Day 0, 10:00: counted.
    to_next_day_at(&h, 10);
    let early: Vec<_> = (0..4)
        .map(|i| adding(&c, &format!("i{}", i % 2), "n", 1, &format!("e{i}")))
        .collect();
    h.journal(&c, &early).await;
    h.advance(2 * 60_000);
    h.roll(&mut mapping).await;
    assert_eq!(h.total("i0", "n").await + h.total("i1", "n").await, 4);
    let last_ran = h.now.load(Ordering::SeqCst) / 1000;
    // The mapping stops. Day 0, 20:00 and day 1, 09:00 and 21:00: keys (one of them a
    // redelivery of a key counted before the outage), delivered to nobody for 34 hours.
    h.advance(10 * HOUR);
    let mut outage: Vec<_> = (0..5)
        .map(|i| adding(&c, &format!("i{}", i % 2), "n", 10, &format!("o{i}")))
        .collect();
    outage.push(early[0].clone());
    h.journal(&c, &outage).await;
    h.advance(13 * HOUR);
    let later: Vec<_> = (0..3)
        .map(|i| adding(&c, "i0", "n", 100, &format!("l{i}")))
        .collect();
    h.journal(&c, &later).await;
    h.advance(12 * HOUR);
    let last: Vec<_> = (0..2)
        .map(|i| adding(&c, "i1", "n", 1000, &format!("z{i}")))
        .collect();
    h.journal(&c, &last).await;
    h.advance(HOUR);
    h.sync().await;
    let want = |i: usize| match i {
        0 => 2 + 30 + 300,
        _ => 2 + 20 + 2000,
    };
    // The mapping runs again: the first outage records were trimmed.
    let stats = h.roll(&mut mapping).await;
    assert!(
        h.total("i0", "n").await < want(0),
        "short by the trimmed keys: {stats:?}"
    );
    // The runbook: wait until the last day has ended (an hour past midnight UTC), then repair
    // the days from the one the mapping last ran to the last one.
    let to_secs = h.now.load(Ordering::SeqCst) / 1000;
    to_next_day_at(&h, 2);
    h.roll(&mut mapping).await;
    let first = repaired(run_repair_days(&h, last_ran, to_secs).await);
    assert!(first.corrected >= 1, "{first:?}");
    for i in 0..2 {
        assert_eq!(
            h.total(&format!("i{i}"), "n").await,
            want(i),
            "item i{i}: {first:?}"
        );
    }
    // Twice: nothing changes.
    let command = runbook_command(&day_of(last_ran), &day_of(to_secs));
    let again = repaired(run_repair(&h, &command).await);
    assert_eq!(again.corrected, 0, "{again:?}");
    h.roll(&mut mapping).await;
    for i in 0..2 {
        assert_eq!(h.total(&format!("i{i}"), "n").await, want(i), "item i{i}");
    }
    h.drop_tables().await;
}

#[tokio::test]
async fn records_of_a_repaired_day_read_during_or_after_the_repair_count_once() {
    let h = Harness::new(Shape::shards(2)).await;
    let c = cold(&h);
    let mut mapping = h.mapping();
    let keys = |day: &str, n: usize| -> Vec<_> {
        (0..n)
            .map(|i| {
                adding(
                    &c,
                    &format!("i{}", i % 2),
                    "n",
                    1 + i as i64,
                    &format!("{day}k{i}"),
                )
            })
            .collect()
    };
    // Day 0, 23:00: keys journaled, half of them delivered.
    to_next_day_at(&h, 23);
    let day0 = keys("d0", 6);
    h.journal(&c, &day0[..3]).await;
    h.advance(2 * 60_000);
    h.roll(&mut mapping).await;
    assert_eq!(
        h.total("i0", "n").await + h.total("i1", "n").await,
        1 + 2 + 3
    );
    h.journal(&c, &day0[3..]).await;
    // Day 1, 01:30: the repair of day 0 counts the other half; the mapping then delivers
    // their records and nothing is counted.
    h.advance(2 * HOUR + HOUR / 2);
    let now_secs = || h.now.load(Ordering::SeqCst) / 1000;
    let day = day_of(now_secs() - 3 * 3600);
    let report = repaired(run_repair(&h, &runbook_command(&day, &day)).await);
    assert_eq!((report.keys, report.corrected), (6, 2), "{report:?}");
    let late = h.roll(&mut mapping).await;
    assert_eq!(h.total("i0", "n").await, 1 + 3 + 5, "{late:?}");
    assert_eq!(h.total("i1", "n").await, 2 + 4 + 6);
    // Day 1, 22:00: keys journaled; day 2, 01:30: the repair of day 1 and a delivery at once.
    h.advance(20 * HOUR + HOUR / 2);
    h.journal(&c, &keys("d1", 4)).await;
    h.advance(3 * HOUR + HOUR / 2);
    let day = day_of(now_secs() - 3 * 3600);
    let command = runbook_command(&day, &day);
    let mut other = h.mapping();
    let (outcome, run) = tokio::join!(run_repair(&h, &command), h.roll(&mut other));
    let report = repaired(outcome);
    let last = h.roll(&mut mapping).await;
    let want = [1 + 3 + 5 + 1 + 3, 2 + 4 + 6 + 2 + 4];
    for (i, want) in want.iter().enumerate() {
        let got = h.total(&format!("i{i}"), "n").await;
        assert_eq!(got, *want, "i{i}: {report:?} {run:?} {last:?}");
    }
    // A day not ended an hour ago, or begun more than 3 days ago, is refused.
    for day in [day_of(now_secs()), day_of(now_secs() - 4 * 86_400)] {
        match run_repair(&h, &runbook_command(&day, &day)).await {
            RepairOutcome::Refused(_) => {}
            other => panic!("{day}: {other:?}"),
        }
    }
    h.drop_tables().await;
}
