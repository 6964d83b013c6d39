//! The randomized checker of the idempotency layer: seeded schedules of actors (processes,
//! each with a client that refuses attempts or loses their responses at a random rate, 1–3
//! SDK attempts, with or without the in-memory cache) delivering the same two SQS messages
//! concurrently until each has a result, the way a source redelivers. Each delivery holds
//! its key until a deadline 400–900 ms ahead; the function takes 0–100 ms, fails one time
//! in six and panics one time in twelve (the key is released either way); one delivery in
//! ten is abandoned mid-way (a crash: its claim holds the key until the deadline). The
//! schedules that reach the layer's boundaries: one function in eight **outlives its
//! claim** (it runs past its deadline, so another run may take the key over: its own answer
//! must then be `NotStored`, never the stored value, also in a cached layer); one schedule
//! in three has **`expires_after` of 1 s under deadlines up to 2.4 s** (a claim must hold
//! however short the result's life); one execution in twenty returns a **result too large
//! for an item** (its duplicates are `ReplayedWithoutValue`). After each schedule, per
//! message:
//!
//! * no execution of the function started while another was in progress within its
//!   deadline;
//! * every delivery answered with the stored value (`Ran`, `Replayed`) got the result of
//!   one execution, and a second execution's value appears only once the first one's result
//!   expired (`expires_after` after it ended). A `NotStored` answer is excluded: it says its
//!   value is not the stored one.
//!
//! `IDEMPOTENCY_CHECK_SEED` sets the first seed (default: from the clock, printed),
//! `IDEMPOTENCY_CHECK_SCHEDULES` how many (default 15); a failure prints the line that
//! replays its schedule (its faults are the seed's; thread timing is not).

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dev_testing::client;
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once_lambda::idempotency::{
    DynamoDbPersistence, Idempotency, IdempotencyConfig, IdempotencyError, KeySource, Run,
};
use dynamodb_exactly_once_lambda::processor::Record;
use futures::FutureExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::checker::{faulty_client, Seeds};
use crate::idempotency::table;

const ACTORS: usize = 3;
const MESSAGES: usize = 2;
/// Deliveries of one message by one actor that found its key free (not in progress) before
/// the schedule fails as stuck.
const DELIVERIES: usize = 200;
/// The longest one actor delivers one message before the schedule fails as stuck, however
/// many deliveries found the key in progress: a claim holds at most to its deadline (2.4 s
/// ahead at most), but a crashed delivery's claim and a claim whose answer was lost hold to
/// theirs one after another, and on a loaded machine each in-progress answer takes longer.
const STUCK_AFTER: Duration = Duration::from_secs(60);
/// The size of a result too large for one item.
const LARGE: usize = 420_000;

/// One execution of the function: when it started and ended (epoch ms; no end: abandoned),
/// and the deadline its delivery held the key until.
#[derive(Debug, Clone)]
struct Execution {
    message: usize,
    started_ms: u64,
    ended_ms: Option<u64>,
    deadline_ms: u64,
}

#[derive(Debug, Default)]
struct Log {
    executions: Vec<Execution>,
    /// `(message, execution)` of every delivery answered with the stored value (`None`:
    /// completed without a value).
    values: Vec<(usize, Option<usize>)>,
}

type Shared = Arc<Mutex<Log>>;

fn log(shared: &Shared) -> Result<std::sync::MutexGuard<'_, Log>, String> {
    shared.lock().map_err(|e| e.to_string())
}

/// Message `m` of schedule `seed` (its SQS message id is its key).
fn message(seed: u64, m: usize, deadline_ms: u64) -> Record<Value> {
    let body = json!({ "orderId": format!("o-{m}"), "cents": 250 });
    let offset = usize::try_from(seed).unwrap_or(0) * 10 + m;
    let batch = dev_testing::events::sqs_batch(std::slice::from_ref(&body), offset);
    let position = batch.records[0].position.clone();
    Record::new(body.clone(), position, body.to_string().into_bytes())
        .with_deadline_ms(Some(deadline_ms))
}

/// What one execution does.
#[derive(Debug, Clone, Copy)]
struct Plan {
    message: usize,
    work: Duration,
    fails: bool,
    panics: bool,
    large: bool,
}

/// One delivery: the function logs its execution, sleeps, then fails, panics or answers
/// `receipt-<m>-<execution>` (padded to [`LARGE`] bytes when `large`).
async fn delivery(
    layer: &Idempotency<DynamoDbPersistence>,
    record: &Record<Value>,
    plan: Plan,
    shared: &Shared,
) -> Result<Run<String>, IdempotencyError<String>> {
    let deadline_ms = record.deadline_ms().unwrap_or(u64::MAX);
    layer
        .run_record("charge", &KeySource::Id, record, || async move {
            let started_ms = epoch_millis();
            let index = {
                let mut log = log(shared)?;
                log.executions.push(Execution {
                    message: plan.message,
                    started_ms,
                    ended_ms: None,
                    deadline_ms,
                });
                log.executions.len() - 1
            };
            tokio::time::sleep(plan.work).await;
            log(shared)?.executions[index].ended_ms = Some(epoch_millis());
            if plan.panics {
                panic!("the function panicked (planned)");
            }
            if plan.fails {
                return Err("the function failed".to_string());
            }
            let mut value = format!("receipt-{}-{index}-", plan.message);
            if plan.large {
                value.push_str(&"x".repeat(LARGE));
            }
            Ok(value)
        })
        .await
}

/// The execution a stored value names.
fn execution_of(value: &str) -> Option<usize> {
    value.split('-').nth(2)?.parse().ok()
}

/// The schedule's settings, the same for every actor.
#[derive(Debug, Clone, Copy)]
struct Setting {
    expires_after: Duration,
    deadlines_ms: (u64, u64),
}

/// One actor: its own process and client; delivers each message until it has a value.
async fn actor(
    seed: u64,
    mut rng: StdRng,
    table: String,
    setting: Setting,
    shared: Shared,
) -> Result<(), String> {
    let cache = if rng.random_bool(0.5) { 0 } else { 16 };
    let config = IdempotencyConfig::builder("payments")
        .cache_keys(cache)
        .expires_after(setting.expires_after)
        .build()
        .map_err(|e| e.to_string())?;
    let layer = Idempotency::new(
        DynamoDbPersistence::new(faulty_client(&mut rng), &table),
        config,
    );
    let mut order: Vec<usize> = (0..MESSAGES).collect();
    if rng.random_bool(0.5) {
        order.reverse();
    }
    for m in order {
        deliver_until_answered(seed, m, &mut rng, &layer, setting, &shared).await?;
    }
    Ok(())
}

async fn deliver_until_answered(
    seed: u64,
    m: usize,
    rng: &mut StdRng,
    layer: &Idempotency<DynamoDbPersistence>,
    setting: Setting,
    shared: &Shared,
) -> Result<(), String> {
    let started = std::time::Instant::now();
    let mut tally = Tally::default();
    while tally.free < DELIVERIES && started.elapsed() < STUCK_AFTER {
        tally.free += 1;
        let (low, high) = setting.deadlines_ms;
        let ahead = rng.random_range(low..high);
        let record = message(seed, m, epoch_millis() + ahead);
        let outlives = rng.random_bool(1.0 / 8.0);
        let work = if outlives {
            ahead + rng.random_range(50..200)
        } else {
            rng.random_range(0..100)
        };
        let plan = Plan {
            message: m,
            work: Duration::from_millis(work),
            fails: rng.random_bool(1.0 / 6.0),
            panics: rng.random_bool(1.0 / 12.0),
            large: rng.random_bool(1.0 / 20.0),
        };
        let run = AssertUnwindSafe(delivery(layer, &record, plan, shared)).catch_unwind();
        let outcome = if rng.random_bool(0.1) {
            let crash = Duration::from_millis(rng.random_range(0..60));
            match tokio::time::timeout(crash, run).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    tally.abandoned += 1;
                    continue; // abandoned: its claim holds the key to the deadline
                }
            }
        } else {
            run.await
        };
        let Ok(outcome) = outcome else {
            tally.panicked += 1;
            continue; // the function panicked: the key was released, deliver again
        };
        let stored = match outcome {
            Ok(Run::Ran(v)) | Ok(Run::Replayed(v)) => Some(execution_of(&v)),
            Ok(Run::ReplayedWithoutValue(_)) => Some(None),
            Ok(_) => None, // NotStored: not the stored value, by its own word
            Err(IdempotencyError::InProgress { .. }) => {
                // Not counted against DELIVERIES: another delivery holds the key.
                tally.free -= 1;
                tally.in_progress += 1;
                tokio::time::sleep(Duration::from_millis(rng.random_range(20..60))).await;
                continue;
            }
            Err(e) if e.is_retryable() != Some(false) => {
                tally.retryable += 1;
                continue;
            }
            Err(e) => return Err(format!("message {m}: {e}")),
        };
        if let Some(execution) = stored {
            log(shared)?.values.push((m, execution));
        }
        return Ok(());
    }
    Err(format!(
        "message {m}: no value after {:.1} s: {tally:?}",
        started.elapsed().as_secs_f64()
    ))
}

/// What one actor's deliveries of one message met, for the stuck message.
#[derive(Debug, Default)]
struct Tally {
    /// Deliveries that found the key free (the rest of these counts included).
    free: usize,
    in_progress: usize,
    abandoned: usize,
    panicked: usize,
    retryable: usize,
}

/// The invariants, per message.
fn check(log: &Log, expires_after_ms: u64) -> Result<(), String> {
    for m in 0..MESSAGES {
        let mut runs: Vec<&Execution> = log.executions.iter().filter(|e| e.message == m).collect();
        runs.sort_by_key(|e| e.started_ms);
        for (i, earlier) in runs.iter().enumerate() {
            let held_until = earlier
                .ended_ms
                .unwrap_or(earlier.deadline_ms)
                .min(earlier.deadline_ms);
            if let Some(later) = runs[i + 1..].iter().find(|l| l.started_ms < held_until) {
                return Err(format!("message {m}: {later:?} started during {earlier:?}"));
            }
        }
        let mut values: Vec<usize> = log
            .values
            .iter()
            .filter(|(n, _)| *n == m)
            .filter_map(|(_, e)| *e)
            .collect();
        values.sort_unstable();
        values.dedup();
        // Two stored values: the later execution started only once the earlier one's result
        // had expired (`expires_after` after it ended, to the second).
        for pair in values.windows(2) {
            let (first, second) = (&log.executions[pair[0]], &log.executions[pair[1]]);
            let ended = first.ended_ms.unwrap_or(first.deadline_ms);
            if second.started_ms + 1000 < ended + expires_after_ms {
                return Err(format!(
                    "message {m}: two stored values, {first:?} and {second:?}, within expires_after"
                ));
            }
        }
    }
    Ok(())
}

async fn schedule(seed: u64, table: &str) -> Result<usize, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let shared = Shared::default();
    let setting = if rng.random_bool(1.0 / 3.0) {
        Setting {
            expires_after: Duration::from_secs(1),
            deadlines_ms: (400, 2400),
        }
    } else {
        Setting {
            expires_after: Duration::from_secs(3600),
            deadlines_ms: (400, 900),
        }
    };
    let actors: Vec<_> = (0..ACTORS)
        .map(|_| {
            let rng = StdRng::seed_from_u64(rng.random());
            tokio::spawn(actor(seed, rng, table.to_string(), setting, shared.clone()))
        })
        .collect();
    for a in actors {
        a.await.map_err(|e| e.to_string())??;
    }
    let log = log(&shared)?;
    check(&log, setting.expires_after.as_millis() as u64)?;
    Ok(log.executions.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_schedules_run_each_message_once_at_a_time_and_store_one_result() {
    // The planned panics are caught by the checker: keep their messages out of the output.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.to_string().contains("(planned)") {
            default_hook(info);
        }
    }));
    let seeds = Seeds::from_env("IDEMPOTENCY_CHECK", 15);
    let table = table(&client()).await;
    let mut executions = 0;
    for seed in seeds.iter() {
        match schedule(seed, &table).await {
            Ok(n) => executions += n,
            Err(failure) => panic!("schedule {seed}: {failure}\n{}", seeds.replay(seed)),
        }
    }
    println!(
        "idempotency checker: {executions} executions for {} deliveries' messages",
        seeds.count * (ACTORS * MESSAGES) as u64
    );
}
