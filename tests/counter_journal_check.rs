//! The randomized checker of the counter's journal mode, at the stream shapes DynamoDB has:
//! each seeded schedule draws a stream shape for the Streams double (1 to 8 shards, rollovers,
//! splits, empty pages, throttles) fed by DynamoDB Local's real stream, then interleaves
//! deliveries (warm, cold, with lost responses and refused calls, duplicates within and
//! across batches, poison records the counter table refuses), roll-ups (dying at a random
//! call, losing responses, two at once) and clock moves (minutes to hours; sometimes an
//! outage of 24 to 48 hours, longer than the stream keeps records). In the end every key is
//! delivered once more and clean roll-ups run until caught up.
//!
//! The invariant: each item holds exactly the sum of its distinct keys, but for the poison
//! keys, which are never counted and each kept as a dead letter. After a gap the roll-up
//! reported (an outage), the runbook's repair runs (`ops counter repair`, from the day of the
//! last roll-up that had caught up before the gap to the day before the next): then too each
//! item holds exactly that sum. A gap whose first day is older than the repair takes (more
//! than 3 days: two long outages in a row) is only checked for nothing counted twice.
//!
//! `COUNTER_CHECK_SEED` sets the first seed (default: from the clock, printed);
//! `COUNTER_CHECK_SCHEDULES` how many (default 12); `COUNTER_CHECK_PARALLEL` how many at once
//! (default 4). A failure names its seed: `COUNTER_CHECK_SEED=<seed> COUNTER_CHECK_SCHEDULES=1`
//! replays its faults (`COUNTER_CHECK_TRACE=1` prints each step).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use dynamo_testing::{client_with, Fault, FaultInjector, Shape};
use dynamodb_exactly_once::counter::{Counter, CounterRecord};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::checker::Seeds;
use crate::counter_journal::{apply, key};
use crate::counter_journal_repair::run_repair_days;
use crate::counter_journal_shapes::{Harness, HOUR};
use dynamodb_exactly_once::counter::journal::{RepairOutcome, RollupReport, REPAIR_DAYS};

const ITEMS: usize = 3;
const KEYS: usize = 24;
/// Keys whose record adds to `bad`, a string on item i0: the counter table refuses them.
const POISON_EVERY: usize = 7;

/// A fault plan for one client: each call independently refused or its response lost.
fn faults(rng: &mut StdRng) -> (FaultInjector, u32) {
    let refuse = rng.random_range(0..4u32) * 10; // percent
    let lose = rng.random_range(0..4u32) * 10;
    let seed: u64 = rng.random();
    let n = Arc::new(AtomicUsize::new(0));
    let plan = FaultInjector::new(move |_, _| {
        let i = n.fetch_add(1, Ordering::SeqCst) as u64;
        let roll = (seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(i.wrapping_mul(1442695040888963407))
            >> 33)
            % 100;
        match roll as u32 {
            r if r < refuse => Fault::Refuse,
            r if r < refuse + lose => Fault::LoseResponse,
            _ => Fault::None,
        }
    });
    (plan, rng.random_range(1..4u32))
}

/// `COUNTER_CHECK_TRACE=1`: each step of a schedule on stderr (to read a replayed failure).
fn trace(line: &str) {
    if std::env::var_os("COUNTER_CHECK_TRACE").is_some() {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let at = START.get_or_init(std::time::Instant::now).elapsed();
        eprintln!("{:>8.3} {line}", at.as_secs_f64());
    }
}

fn poison(k: usize) -> bool {
    k % POISON_EVERY == POISON_EVERY - 1
}

fn delta(k: usize) -> i64 {
    i64::try_from(k * k + 1).unwrap_or(1)
}

/// A key's record depends on the key only: a redelivery is the same record.
fn key_record(counter: &Counter, k: usize) -> CounterRecord {
    match poison(k) {
        true => counter.record(key("i0"), [("bad", 1)], format!("key{k}")),
        false => counter.record(
            key(&format!("i{}", k % ITEMS)),
            [("n", delta(k))],
            format!("key{k}"),
        ),
    }
    .expect("record")
}

fn shape(rng: &mut StdRng) -> Shape {
    let mut shape = Shape::shards([1, 1, 4, 8][rng.random_range(0..4)]).seed(rng.random());
    if rng.random_bool(0.6) {
        shape = shape.rollover(Duration::from_secs(rng.random_range(1..7) * 3600));
    }
    if rng.random_bool(0.3) {
        shape = shape.split_every(Duration::from_secs(rng.random_range(2..9) * 3600));
    }
    if rng.random_bool(0.3) {
        shape = shape.empty_pages(rng.random_range(1..7));
    }
    if rng.random_bool(0.3) {
        shape = shape.throttle_percent(rng.random_range(1..4) * 10);
    }
    shape
}

/// What a schedule did that the check needs.
#[derive(Debug, Default)]
struct Seen {
    delivered: BTreeSet<usize>,
    gaps: usize,
    shape: String,
    /// The clock (epoch ms) at the start of the last roll-up that ended caught up.
    caught_up_ms: u64,
    /// The first day to repair: the last roll-up caught up before the first gap reported.
    repair_from_ms: Option<u64>,
}

impl Seen {
    /// Note the reports of roll-ups started together at `started_ms`. A gap any of them
    /// reported may hold records a concurrent one took as read (a gap is reported once), so
    /// only a step without gaps moves the last caught-up time.
    fn note(&mut self, started_ms: u64, reports: &[&RollupReport]) {
        let gaps: usize = reports.iter().map(|r| r.trimmed).sum();
        self.gaps += gaps;
        match gaps {
            0 if reports.iter().any(|r| r.caught_up) => {
                self.caught_up_ms = self.caught_up_ms.max(started_ms)
            }
            0 => {}
            _ => {
                self.repair_from_ms.get_or_insert(self.caught_up_ms);
            }
        }
    }
}

async fn schedule(seed: u64) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let shape = shape(&mut rng);
    let mut seen = Seen {
        shape: format!("{shape:?}"),
        ..Seen::default()
    };
    let h = Harness::new(shape).await;
    seen.caught_up_ms = h.now.load(Ordering::SeqCst);
    trace(&format!("schedule {seed}: {}", seen.shape));
    h.poison("i0", "bad").await;
    let warm = {
        let config = h.config().to_builder().cache_keys(100).build();
        Counter::new(h.c.clone(), config.map_err(|e| e.to_string())?).with_clock(h.clock.clone())
    };
    for _ in 0..rng.random_range(4..12) {
        match rng.random_range(0..10) {
            0..=4 => deliver(&h, &warm, &mut rng, &mut seen).await?,
            5..=7 => roll_up(&h, &mut rng, &mut seen).await,
            _ => {
                let hours = match rng.random_bool(0.15) {
                    true => rng.random_range(24..49),
                    false => rng.random_range(0..5),
                };
                h.advance(hours * HOUR + rng.random_range(0..HOUR));
                trace(&format!("clock +{hours} h"));
                h.sync().await;
            }
        }
    }
    let result = settle(&h, &mut seen).await;
    if result.is_ok() {
        h.drop_tables().await;
    }
    result
}

async fn deliver(
    h: &Harness,
    warm: &Counter,
    rng: &mut StdRng,
    seen: &mut Seen,
) -> Result<(), String> {
    let keys: Vec<usize> = (0..rng.random_range(1..12))
        .map(|_| rng.random_range(0..KEYS))
        .collect();
    let writer = match rng.random_range(0..3) {
        0 => warm.clone(),
        1 => h.counter(),
        _ => {
            let (plan, attempts) = faults(rng);
            Counter::new(client_with(Some(plan), attempts), h.config()).with_clock(h.clock.clone())
        }
    };
    let records: Vec<_> = keys.iter().map(|k| key_record(&writer, *k)).collect();
    let labels = apply(&writer, &records).await;
    trace(&format!("deliver {keys:?}: {labels:?}"));
    h.sync().await;
    seen.delivered.extend(keys);
    Ok(())
}

async fn roll_up(h: &Harness, rng: &mut StdRng, seen: &mut Seen) {
    h.double
        .set_throttle_percent(if rng.random_bool(0.3) { 30 } else { 0 });
    let runs = if rng.random_bool(0.3) { 2 } else { 1 };
    let mut rollups = Vec::new();
    for _ in 0..runs {
        let ddb = match rng.random_bool(0.5) {
            true => client_with(Some(FaultInjector::fail_from(rng.random_range(0..12))), 1),
            false => {
                let (plan, attempts) = faults(rng);
                client_with(Some(plan), attempts)
            }
        };
        rollups.push(h.rollup_with(ddb, h.double.client()));
    }
    let started_ms = h.now.load(Ordering::SeqCst);
    let reports =
        futures::future::join_all(rollups.iter().map(|r| r.run(Duration::from_secs(10)))).await;
    let reports: Vec<&RollupReport> = reports.iter().flatten().collect();
    seen.note(started_ms, &reports);
    h.double.set_throttle_percent(0);
}

/// Every key delivered once more, clean roll-ups until caught up, then the invariant.
async fn settle(h: &Harness, seen: &mut Seen) -> Result<(), String> {
    let clean = h.counter();
    let all: Vec<_> = seen
        .delivered
        .iter()
        .map(|k| key_record(&clean, *k))
        .collect();
    apply(&clean, &all).await;
    h.sync().await;
    h.double.set_empty_pages(0);
    let roll = h.rollup();
    let mut last = None;
    for _ in 0..5 {
        let report = roll
            .run(Duration::from_secs(30))
            .await
            .map_err(|e| e.to_string())?;
        seen.note(h.now.load(Ordering::SeqCst), &[&report]);
        trace(&format!("settling: {report:?}"));
        let done = report.caught_up;
        last = Some(report);
        if done {
            break;
        }
    }
    let exact = repair(h, seen).await?;
    let mut want: BTreeMap<usize, i64> = BTreeMap::new();
    for k in seen.delivered.iter().filter(|k| !poison(**k)) {
        *want.entry(k % ITEMS).or_default() += delta(*k);
    }
    for item in 0..ITEMS {
        let got = h.total(&format!("i{item}"), "n").await;
        let expected = want.get(&item).copied().unwrap_or(0);
        let wrong = match exact {
            true => got != expected,
            false => got > expected,
        };
        if wrong {
            return Err(format!(
                "item i{item}: {got}, expected {expected} ({} gaps reported; {}; last run {last:?})",
                seen.gaps, seen.shape
            ));
        }
    }
    trace(&format!(
        "want {want:?}; shards {:?}",
        h.double.listed_shards(&h.arn)
    ));
    let poisoned = seen.delivered.iter().filter(|k| poison(**k)).count();
    let letters = dead_letters(h).await?;
    if seen.gaps == 0 && letters != poisoned {
        return Err(format!(
            "{letters} dead letters for {poisoned} poison keys ({}; last run {last:?})",
            seen.shape
        ));
    }
    Ok(())
}

/// After a gap: the runbook's repair, once the day before has ended an hour ago; whether the
/// counters must now be exact (no gap, or a gap the repair could take).
async fn repair(h: &Harness, seen: &Seen) -> Result<bool, String> {
    let Some(from_ms) = seen.repair_from_ms else {
        return Ok(true);
    };
    let now = h.now.load(Ordering::SeqCst);
    let day = 24 * HOUR;
    h.advance((now / day + 1) * day + HOUR + HOUR / 2 - now);
    h.sync().await;
    h.run(&h.rollup()).await;
    let today = h.now.load(Ordering::SeqCst) / day;
    if from_ms / day + REPAIR_DAYS < today {
        trace("gap too old for the repair: checked for nothing counted twice only");
        return Ok(false);
    }
    let (from, to) = (from_ms / 1000, (today - 1) * day / 1000);
    let report = run_repair_days(h, from, to).await;
    trace(&format!("repair: {report:?}"));
    match report {
        RepairOutcome::Repaired(_) => Ok(true),
        other => Err(format!("repair: {other:?}")),
    }
}

/// Dead letters kept in the journal table, by the keys they name.
async fn dead_letters(h: &Harness) -> Result<usize, String> {
    let out =
        h.c.query()
            .table_name(&h.journal)
            .key_condition_expression("pk = :p")
            .expression_attribute_values(":p", AttributeValue::S("~dead".into()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?;
    let keys: BTreeSet<String> = out
        .items()
        .iter()
        .filter_map(|i| match i.get("journal_sk") {
            Some(AttributeValue::S(s)) => Some(s.clone()),
            _ => None,
        })
        .collect();
    Ok(keys.len())
}

#[tokio::test]
async fn seeded_schedules_count_every_key_exactly_once_at_every_stream_shape() {
    let seeds = Seeds::from_env("COUNTER_CHECK", 12);
    // Schedules wait on calls far more than they compute: several at once (each has its own
    // tables and double). COUNTER_CHECK_PARALLEL=1 runs them one by one.
    let parallel: u64 = std::env::var("COUNTER_CHECK_PARALLEL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
        .max(1);
    let all: Vec<u64> = seeds.iter().collect();
    for group in all.chunks(usize::try_from(parallel).unwrap_or(1)) {
        let results = futures::future::join_all(
            group
                .iter()
                .map(|seed| async move { (*seed, schedule(*seed).await) }),
        )
        .await;
        for (seed, result) in results {
            if let Err(failure) = result {
                panic!("schedule {seed}: {failure}\n{}", seeds.replay(seed));
            }
        }
    }
}
