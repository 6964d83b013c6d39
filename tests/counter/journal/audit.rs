//! Lost records of the roll-up's event source mapping, driven through the mapping emulator
//! (`dev_testing::mapping`) over the Streams double fed by DynamoDB Local's real stream:
//! batches the mapping gives up on (retries exhausted, records too old) are described on its
//! on-failure destination; the repair takes those messages, derives the UTC days, and recounts
//! them exactly from the journal (`ops counter repair --messages` / `--from-queue`). The
//! repair honours the migration guard (J6).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dev_testing::mapping::{Mapping, MappingConfig};
use dev_testing::{client_with, Fault, FaultInjector, Shape};
use dynamodb_exactly_once::counter::journal::{
    AuditLimits, AuditOutcome, AuditReport, Repair, RepairDays, RepairOutcome, RepairReport,
    Rollup, RollupConfig, StreamFailure,
};
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once_lambda::RollupFunction;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;

use crate::counter::journal::shapes::{Harness, HOUR};
use crate::counter::journal::{apply, record};

const MINUTE: u64 = 60_000;
const DAY: u64 = 24 * HOUR;

/// Counter items whose roll-up updates are throttled (the roll-up's client; no SDK retry).
#[derive(Clone, Default)]
pub(crate) struct Throttled(Arc<Mutex<Vec<String>>>);

impl Throttled {
    pub(crate) fn set(&self, items: &[&str]) {
        if let Ok(mut t) = self.0.lock() {
            *t = items.iter().map(|i| format!("{{\"S\":\"{i}\"}}")).collect();
        }
    }

    fn injector(&self) -> FaultInjector {
        let items = Arc::clone(&self.0);
        FaultInjector::by_request(move |op, body| {
            let hit = op == "UpdateItem"
                && items
                    .lock()
                    .map(|t| t.iter().any(|i| body.contains(i.as_str())))
                    .unwrap_or(false);
            if hit {
                Fault::Throttle
            } else {
                Fault::None
            }
        })
    }
}

/// The roll-up function as the mapping invokes it, its updates throttled on `throttled`.
pub(crate) fn handler(
    h: &Harness,
    throttled: &Throttled,
) -> impl Fn(Value) -> futures::future::BoxFuture<'static, Result<Value, String>> + Send + Sync {
    handler_holding(h, throttled, false)
}

/// [`handler`], a window's keys held in its state when `hold`.
pub(crate) fn handler_holding(
    h: &Harness,
    throttled: &Throttled,
    hold: bool,
) -> impl Fn(Value) -> futures::future::BoxFuture<'static, Result<Value, String>> + Send + Sync {
    let config = RollupConfig::builder(h.config())
        .hold_in_window(hold)
        .build()
        .expect("config");
    let ddb = client_with(Some(throttled.injector()), 1);
    let rollup = Rollup::new(ddb, config).with_clock(h.clock.clone());
    let f = Arc::new(RollupFunction::new("counter-rollup", rollup));
    move |event: Value| {
        let f = Arc::clone(&f);
        Box::pin(async move {
            f.handle(LambdaEvent::new(event, Context::default()))
                .await
                .map_err(|e| format!("{e:?}"))
        })
    }
}

/// The stack's mapping settings, with `retries` and `max_age_secs` as given.
pub(crate) fn mapping(h: &Harness, retries: i64, max_age_secs: Option<i64>) -> Mapping {
    let mut config = MappingConfig::builder()
        .batch_size(10)
        .bisect_batch_on_function_error(true)
        .report_batch_item_failures(true)
        .maximum_retry_attempts(retries)
        .tumbling_window_secs(60)
        .filter_pattern(serde_json::json!({"eventName": ["INSERT"]}));
    if let Some(secs) = max_age_secs {
        config = config.maximum_record_age_secs(secs);
    }
    let config = config.build().expect("mapping config");
    Mapping::new(h.double.client(), &h.arn, config).with_clock(h.clock.clone())
}

/// Run the mapping until idle over `windows` minutes of clock (each window ends).
pub(crate) async fn drain<H: dev_testing::mapping::Handler>(
    h: &Harness,
    m: &mut Mapping,
    f: &H,
    windows: usize,
) {
    for _ in 0..windows {
        h.advance(2 * MINUTE);
        m.run_until_idle(f, 200).await.expect("mapping");
    }
}

/// Move the clock to `hour` o'clock (UTC) of the next day; that time.
pub(crate) fn next_day_at(h: &Harness, hour: u64) -> u64 {
    let now = h.now.load(Ordering::SeqCst);
    let target = (now / DAY + 1) * DAY + hour * HOUR;
    h.advance(target - now);
    target
}

/// The destination's messages as the repair reads them (each named by its place).
fn failures(m: &Mapping) -> Vec<(String, StreamFailure)> {
    m.on_failure_messages()
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let name = format!("message {i}");
            let f = StreamFailure::parse(&name, &v.to_string()).expect("a valid message");
            (name, f)
        })
        .collect()
}

/// `ops counter repair --messages`: the days of the messages, recounted.
pub(crate) async fn repair_from(h: &Harness, failures: &[(String, StreamFailure)]) -> RepairReport {
    let days = RepairDays::of_failures(&h.journal, failures)
        .expect("messages of the journal's stream")
        .expect("some messages");
    let config = RollupConfig::builder(h.config()).build().expect("config");
    let outcome = Repair::new(h.c.clone(), config)
        .with_clock(h.clock.clone())
        .run(days, &|_| {})
        .await
        .expect("repair");
    match outcome {
        RepairOutcome::Repaired(report) => report,
        other => panic!("{other:?}"),
    }
}

/// `ops counter audit [--repair]` over the auditable days, within `limits`.
pub(crate) async fn audit(h: &Harness, limits: AuditLimits, repair: bool) -> AuditReport {
    let days = RepairDays::auditable(h.clock.now_ms()).expect("auditable days");
    let config = RollupConfig::builder(h.config()).build().expect("config");
    let outcome = Repair::new(h.c.clone(), config)
        .with_clock(h.clock.clone())
        .audit(days, limits, repair, &|_| {})
        .await
        .expect("audit");
    match outcome {
        AuditOutcome::Audited(report) => report,
        other => panic!("{other:?}"),
    }
}

async fn journal(h: &Harness, counter: &Counter, keys: &[(&str, i64, &str)]) {
    let records: Vec<_> = keys
        .iter()
        .map(|(item, delta, idem)| record(counter, item, *delta, idem))
        .collect();
    h.journal(counter, &records).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_the_mapping_gave_up_on_after_its_retries_are_repaired_exactly_from_its_destination_messages(
) {
    // Given the roll-up's updates of item "lost" throttled past the mapping's 2 retries ...
    let h = Harness::new(Shape::shards(2)).await;
    let counter = h.counter();
    next_day_at(&h, 22);
    let throttled = Throttled::default();
    let f = handler(&h, &throttled);
    let mut m = mapping(&h, 2, None);
    throttled.set(&["lost"]);
    let first = [
        ("kept", 1, "k1"),
        ("lost", 10, "l1"),
        ("kept", 2, "k2"),
        ("lost", 20, "l2"),
        ("kept", 3, "k3"),
    ];
    journal(&h, &counter, &first).await;
    drain(&h, &mut m, &f, 3).await;
    // ... the mapping discarded their batches to the on-failure destination ...
    let messages = failures(&m);
    assert!(!messages.is_empty(), "{:?}", m.stats());
    assert_eq!(h.total("kept", "n").await, 6);
    assert_eq!(h.total("lost", "n").await, 0, "{:?}", m.stats());
    let described: u64 = messages.iter().map(|(_, f)| f.batch_size).sum();
    assert!(described >= 2, "{messages:?}");
    // ... and went on: a later key of the item counts once the throttle is gone.
    throttled.set(&[]);
    h.advance(30 * MINUTE);
    journal(&h, &counter, &[("lost", 100, "l3")]).await;
    drain(&h, &mut m, &f, 2).await;
    assert_eq!(h.total("lost", "n").await, 100);
    // A key journaled at 23:30 the mapping has not delivered yet.
    h.advance(55 * MINUTE);
    journal(&h, &counter, &[("late", 7, "t1")]).await;

    // When the operator repairs the messages' days once they ended an hour ago ...
    next_day_at(&h, 1);
    h.advance(MINUTE);
    let report = repair_from(&h, &messages).await;

    // Then every counter is exact, and the day is marked.
    assert_eq!(h.total("kept", "n").await, 6, "{report:?}");
    assert_eq!(h.total("lost", "n").await, 130, "{report:?}");
    assert_eq!(h.total("late", "n").await, 7, "{report:?}");
    assert_eq!(report.corrected, 2, "{report:?}");
    // A second repair changes nothing.
    let again = repair_from(&h, &messages).await;
    assert_eq!((again.corrected, again.unchanged), (0, 3), "{again:?}");
    // The late key delivered after the repair counts once (its day is marked repaired).
    drain(&h, &mut m, &f, 2).await;
    assert_eq!(h.total("late", "n").await, 7, "{:?}", m.stats());
    assert_eq!(m.on_failure_messages().len(), messages.len());
    h.drop_tables().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_too_old_for_the_mapping_are_repaired_exactly_from_its_destination_messages() {
    // Given a mapping that discards records older than 2 minutes, stopped for 10 ...
    let h = Harness::new(Shape::shards(1)).await;
    let counter = h.counter();
    next_day_at(&h, 23);
    h.advance(50 * MINUTE);
    let throttled = Throttled::default();
    let f = handler(&h, &throttled);
    let mut m = mapping(&h, -1, Some(120));
    journal(
        &h,
        &counter,
        &[("a", 1, "k1"), ("b", 2, "k2"), ("a", 4, "k3")],
    )
    .await;
    h.advance(10 * MINUTE);
    drain(&h, &mut m, &f, 1).await;
    // ... the keys are described on the destination, not counted ...
    let messages = failures(&m);
    assert_eq!(m.stats().records_discarded, 3, "{:?}", m.stats());
    assert_eq!(
        messages[0].1.condition.as_deref(),
        Some("RecordAgeExceeded")
    );
    assert_eq!(h.total("a", "n").await, 0);
    // When the messages' days are repaired (23:50 yesterday: an hour either side, so today
    // too, which has not ended: refused until it has) ...
    let days = RepairDays::of_failures(&h.journal, &messages)
        .expect("days")
        .expect("some");
    assert_eq!(days.last(), RepairDays::utc_day(h.clock.now_secs()));
    h.advance(days.repairable_from_ms() - h.clock.now_ms());
    let report = repair_from(&h, &messages).await;
    // Then each counter is exact.
    assert_eq!(h.total("a", "n").await, 5, "{report:?}");
    assert_eq!(h.total("b", "n").await, 2, "{report:?}");
    h.drop_tables().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_of_a_lost_batch_keeps_the_migration_guard() {
    // J6. Given k applied inline (arrived t0), the counter switched to the journal, and the
    // mapping's roll-up removing the expired inline buckets at t0 + 3 h (`ctr_forgot`) ...
    let h = Harness::new(Shape::shards(1)).await;
    let t0 = next_day_at(&h, 10);
    let inline = Counter::new(
        h.c.clone(),
        CounterConfig::builder(&h.counters)
            .build()
            .expect("inline config"),
    )
    .with_clock(h.clock.clone());
    let k = record(&inline, "a", 1, "k").arrived_at(t0);
    assert_eq!(apply(&inline, &[k]).await, ["applied"]);
    h.advance(3 * HOUR);
    let counter = h.counter();
    let k2 = record(&counter, "a", 2, "k2").arrived_at(t0 + 3 * HOUR);
    h.journal(&counter, &[k2]).await;
    let throttled = Throttled::default();
    let f = handler(&h, &throttled);
    let mut m = mapping(&h, 1, None);
    drain(&h, &mut m, &f, 2).await;
    assert_eq!(h.total("a", "n").await, 3);
    // ... when a late redelivery of k (arrived t0) and a key that arrived after the buckets
    // (k3) are journaled and their batch is lost (throttled past the retries) ...
    throttled.set(&["a"]);
    let late = record(&counter, "a", 1, "k").arrived_at(t0);
    let after = record(&counter, "a", 4, "k3").arrived_at(t0 + 3 * HOUR / 2);
    h.journal(&counter, &[late, after]).await;
    drain(&h, &mut m, &f, 2).await;
    let messages = failures(&m);
    assert_eq!(m.stats().records_discarded, 2, "{:?}", m.stats());
    assert_eq!(h.total("a", "n").await, 3);
    // ... and the day is repaired from the destination's message ...
    next_day_at(&h, 1);
    h.advance(MINUTE);
    let report = repair_from(&h, &messages).await;
    // Then k is not counted again (a too_old dead letter), k3 is.
    assert_eq!(h.total("a", "n").await, 7, "{report:?}");
    assert_eq!(report.dead_letters, 1, "{report:?}");
    let again = repair_from(&h, &messages).await;
    assert_eq!(h.total("a", "n").await, 7, "{again:?}");
    assert_eq!(again.corrected, 0, "{again:?}");
    h.drop_tables().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_finds_exactly_a_dropped_batch_and_its_repair_makes_every_counter_exact() {
    // Given keys on three items, the batch of one of them dropped by the mapping (its
    // updates throttled past the retries), the rest counted ...
    let h = Harness::new(Shape::shards(2)).await;
    let counter = h.counter();
    next_day_at(&h, 12);
    let throttled = Throttled::default();
    let f = handler(&h, &throttled);
    let mut m = mapping(&h, 1, None);
    journal(
        &h,
        &counter,
        &[("a", 1, "a1"), ("b", 2, "b1"), ("a", 3, "a2")],
    )
    .await;
    drain(&h, &mut m, &f, 2).await;
    throttled.set(&["lost"]);
    journal(&h, &counter, &[("lost", 5, "l1"), ("lost", 6, "l2")]).await;
    drain(&h, &mut m, &f, 2).await;
    throttled.set(&[]);
    journal(&h, &counter, &[("b", 4, "b2")]).await;
    drain(&h, &mut m, &f, 2).await;
    assert!(m.stats().records_discarded >= 2, "{:?}", m.stats());
    assert_eq!((h.total("a", "n").await, h.total("b", "n").await), (4, 6));
    // ... when the day can no longer be delivered (ended over 25 hours ago) ...
    next_day_at(&h, 2);
    h.advance(DAY);

    // Then an audit cut short by its limits compares nothing and says so ...
    let tiny = AuditLimits::new(1, Duration::from_secs(60)).expect("limits");
    let cut = audit(&h, tiny, false).await;
    assert!(!cut.complete && cut.differences.is_empty(), "{cut:?}");
    // ... a whole one finds exactly the dropped keys ...
    let report = audit(&h, AuditLimits::default(), false).await;
    assert!(report.complete, "{report:?}");
    assert_eq!((report.item_days, report.exact), (3, 2), "{report:?}");
    assert_eq!((report.short, report.over), (1, 0), "{report:?}");
    let d = &report.differences[0];
    assert!(d.item.contains("lost"), "{d:?}");
    assert_eq!(
        (d.counter.as_str(), d.journal.as_str(), d.counted.as_str()),
        ("n", "11", "0")
    );
    assert_eq!(
        h.total("lost", "n").await,
        0,
        "an audit alone writes nothing"
    );
    // ... with --repair it repairs them, and the next audit finds nothing.
    let fixed = audit(&h, AuditLimits::default(), true).await;
    let repaired = fixed.repaired.expect("repaired");
    assert_eq!(
        (repaired.item_days, repaired.corrected),
        (1, 1),
        "{repaired:?}"
    );
    assert_eq!(h.total("lost", "n").await, 11);
    let again = audit(&h, AuditLimits::default(), false).await;
    assert_eq!(
        (again.exact, again.short, again.over),
        (3, 0, 0),
        "{again:?}"
    );
    h.drop_tables().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_whose_sum_needs_more_than_38_digits_is_listed_not_an_aborted_repair() {
    // J5, the repair's part. Given two keys of item a whose sum needs 41 digits (each is
    // valid) and a key of item b, all lost ...
    let h = Harness::new(Shape::shards(1)).await;
    let counter = h.counter();
    next_day_at(&h, 10);
    let n = |x: f64| serde_json::Number::from_f64(x).expect("number");
    let a = crate::counter::journal::key("a");
    let records = vec![
        counter
            .record(a.clone(), [("n", n(1e20))], "a1")
            .expect("record"),
        counter.record(a, [("n", n(1e-20))], "a2").expect("record"),
        record(&counter, "b", 2, "b1"),
    ];
    h.journal(&counter, &records).await;
    let day = RepairDays::utc_day(h.clock.now_secs());
    // ... when their day is repaired ...
    next_day_at(&h, 1);
    h.advance(MINUTE);
    let config = RollupConfig::builder(h.config()).build().expect("config");
    let outcome = Repair::new(h.c.clone(), config)
        .with_clock(h.clock.clone())
        .run(RepairDays::parse(&day, &day).expect("days"), &|_| {})
        .await
        .expect("the repair is not aborted");
    // Then b is repaired and a is listed, not repaired.
    let RepairOutcome::Repaired(report) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(h.total("b", "n").await, 2, "{report:?}");
    assert_eq!(report.refused_items.len(), 1, "{report:?}");
    assert!(report.refused_items[0].contains("\"a\""), "{report:?}");
    h.drop_tables().await;
}
