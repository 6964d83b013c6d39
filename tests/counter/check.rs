//! The randomized checker of the inline counter (`CounterConfig::builder`): seeded schedules of waves
//! of concurrent invocations over a few counter items, each invocation a random batch of
//! idempotency keys (duplicates within and across batches, keys delivered again in later waves),
//! from SQS or Kinesis, through a writer of its own: a client that refuses attempts or loses their
//! responses at a random rate with 1–3 SDK attempts, a random concurrency, with or without its key
//! cache, 2 to 4 buckets, a clock of its own (skewed by up to 30 s, moved up to 600 s before each
//! wave: keys land in several buckets, all inside the window), and sometimes an invocation deadline
//! 0–20 ms ahead for the first delivery (records not started are deferred, calls in flight cut off
//! and reported though they may still land). Processes stay warm across waves (their key caches and
//! layout knowledge with them) or start cold. Each batch is delivered again as its source would
//! until nothing fails (SQS: the reported messages; Kinesis: every record from the first reported
//! one on). After each schedule every item must hold exactly the sum of the deltas of its distinct
//! keys (a key's delta depends on the key only, so every delivery of it is the same record), and no
//! record may have been dead-lettered.
//!
//! `COUNTER_INLINE_CHECK_SEED` sets the first seed (default: from the clock, printed),
//! `COUNTER_INLINE_CHECK_SCHEDULES` how many (default 40); a failure prints the line that replays
//! its schedule (its faults are the seed's; thread timing is not).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dev_testing::client;
use dev_testing::events::batch;
use dynamodb_exactly_once::counter::{Counter, CounterConfigBuilder};
use dynamodb_exactly_once_lambda::Writer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::checker::{
    add_counts, deliver, faulty_client, random_deadline, random_source, Counts, Seeds,
};
use crate::counter::{counters, writer_on, TABLES};

const ITEMS: u64 = 3;
const KEYS: u64 = 24;
/// Processes, each running one invocation of every wave.
const PROCESSES: usize = 3;
/// Waves of invocations in a schedule, at most.
const MAX_WAVES: usize = 5;
/// How far the clock moves before a wave, at most: the schedule spans at most 3,000 s, and
/// with the skews stays inside the default 1-hour window, so every repeated key is a
/// duplicate the counter must catch (bucket lengths of 1,200 to 3,600 s: 2 to 4 buckets).
const MAX_WAVE_SECONDS: u64 = 600;
/// How far a process's clock is off, at most.
const MAX_SKEW_SECONDS: i64 = 30;
/// The schedules' epoch: 2026-01-01 (a day is added per seed).
const START_SECONDS: u64 = 1_767_225_600;

/// Key `k`'s record: its item and deltas depend on `k` only.
fn key_record(seed: u64, k: u64) -> Value {
    json!({
        "key": {"PK": format!("s{seed}-i{}", k % ITEMS), "SK": "d"},
        "add": {"n": k * k + 1, "records": 1},
        "idempotencyKey": format!("s{seed}-k{k}"),
    })
}

/// A process (a warm Lambda container): its own client, whose faults and SDK attempts, and
/// its writer's concurrency, key cache and bucket count, are drawn from `rng`; its clock
/// (whole seconds) is the schedule's plus a skew of its own.
struct Process {
    writer: Arc<Writer<Counter>>,
    clock: Arc<AtomicU64>,
    skew: i64,
}

impl Process {
    fn new(rng: &mut StdRng, tables: &BTreeMap<String, String>) -> Process {
        let client = faulty_client(rng);
        let (concurrency, cache) = (rng.random_range(1..=4), rng.random_bool(0.5));
        let buckets = rng.random_range(2..=4);
        let clock = Arc::new(AtomicU64::new(0));
        let tweak = |c: CounterConfigBuilder| {
            let c = c.concurrency(concurrency).window_buckets(buckets);
            if cache {
                c
            } else {
                c.cache_keys(0)
            }
        };
        let writer = writer_on(client, tables, tweak, Some(clock.clone()));
        let skew = rng.random_range(-MAX_SKEW_SECONDS..=MAX_SKEW_SECONDS);
        Process {
            writer: Arc::new(writer),
            clock,
            skew,
        }
    }

    /// Set the process's clock from the schedule's.
    fn tick(&self, now: u64) {
        self.clock
            .store(now.saturating_add_signed(self.skew), Ordering::SeqCst);
    }
}

/// One invocation in process `w`: a random batch of keys (some repeated), delivered until
/// done.
async fn invocation(
    seed: u64,
    mut rng: StdRng,
    w: Arc<Writer<Counter>>,
    offset: usize,
) -> Result<(Vec<u64>, Counts), String> {
    let keys: Vec<u64> = (0..rng.random_range(1..=16))
        .map(|_| rng.random_range(0..KEYS))
        .collect();
    let bodies: Vec<Value> = keys.iter().map(|k| key_record(seed, *k)).collect();
    let (kind, deadline) = (random_source(&mut rng), random_deadline(&mut rng));
    let mut counts = Counts::new();
    deliver(&w, batch(kind, &bodies, offset), deadline, &mut counts).await?;
    Ok((keys, counts))
}

async fn schedule(
    seed: u64,
    tables: Arc<BTreeMap<String, String>>,
    counts: &mut Counts,
) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut delivered = BTreeSet::new();
    let mut processes: Vec<_> = (0..PROCESSES)
        .map(|_| Process::new(&mut rng, &tables))
        .collect();
    let mut now = START_SECONDS + rng.random_range(0..86_400);
    for wave in 0..rng.random_range(2..=MAX_WAVES) {
        now += rng.random_range(0..=MAX_WAVE_SECONDS);
        let mut invocations = Vec::new();
        for (i, warm) in processes.iter_mut().enumerate() {
            if rng.random_bool(0.2) {
                *warm = Process::new(&mut rng, &tables); // a cold start
            }
            warm.tick(now);
            let rng = StdRng::seed_from_u64(rng.random());
            let offset = (wave * 10 + i) * 100;
            let writer = warm.writer.clone();
            invocations.push(tokio::spawn(invocation(seed, rng, writer, offset)));
        }
        for task in invocations {
            let (keys, seen) = task.await.map_err(|e| e.to_string())??;
            delivered.extend(keys);
            add_counts(counts, seen);
        }
    }
    let mut want: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for k in &delivered {
        let item = want.entry(format!("s{seed}-i{}|d", k % ITEMS)).or_default();
        *item.entry("n".into()).or_default() += i64::try_from(k * k + 1).unwrap_or(0);
        *item.entry("records".into()).or_default() += 1;
    }
    let got: BTreeMap<String, BTreeMap<String, i64>> = counters(&client(), &tables["CounterTable"])
        .await
        .into_iter()
        .filter(|(id, _)| id.starts_with(&format!("s{seed}-")))
        .collect();
    if got == want {
        Ok(())
    } else {
        Err(format!("counters {got:?}, expected {want:?}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_schedules_of_concurrent_faulty_invocations_count_every_key_exactly_once() {
    let seeds = Seeds::from_env("COUNTER_INLINE_CHECK", 40);
    let tables = Arc::new(dev_testing::template_tables(&client(), &TABLES).await);
    let mut counts = Counts::new();
    for seed in seeds.iter() {
        if let Err(failure) = schedule(seed, tables.clone(), &mut counts).await {
            panic!("schedule {seed}: {failure}\n{}", seeds.replay(seed));
        }
    }
    println!("inline counter checker: records by outcome over every delivery {counts:?}");
}
