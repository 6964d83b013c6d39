//! The randomized checker of the idempotency layer: seeded schedules of actors (processes,
//! each with a client that refuses attempts or loses their responses at a random rate, 1–3
//! SDK attempts, with or without the in-memory cache) delivering the same two SQS messages
//! concurrently until each has a result, the way a source redelivers. Each delivery holds
//! its key until a deadline 400–900 ms ahead; the function takes 0–100 ms and fails one time
//! in six (the key is released); one delivery in ten is abandoned mid-way (a crash: its claim
//! holds the key until the deadline). After each schedule, per message:
//!
//! * no execution of the function started while another was in progress within its
//!   deadline;
//! * every delivery that got a value got the same one: the result of one execution, stored
//!   once. (The layer gives this up only when a completion fails 9 times in a row within
//!   the claim, which these fault rates make about one in a million.)
//!
//! `IDEMPOTENCY_CHECK_SEED` sets the first seed (default: from the clock, printed),
//! `IDEMPOTENCY_CHECK_SCHEDULES` how many (default 15); a failure prints the line that
//! replays its schedule (its faults are the seed's; thread timing is not).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynamo_testing::client;
use dynamodb_exactly_once::ddb::clock::epoch_millis;
use dynamodb_exactly_once_lambda::idempotency::{
    DynamoDbPersistence, Idempotency, IdempotencyConfig, IdempotencyError, KeySource, Run,
};
use dynamodb_exactly_once_lambda::processor::Record;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::checker::{faulty_client, Seeds};
use crate::idempotency::table;

const ACTORS: usize = 3;
const MESSAGES: usize = 2;
/// Deliveries of one message by one actor before the schedule fails as stuck.
const DELIVERIES: usize = 200;

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
    /// `(message, value)` of every delivery that got one.
    values: Vec<(usize, String)>,
}

type Shared = Arc<Mutex<Log>>;

fn log(shared: &Shared) -> Result<std::sync::MutexGuard<'_, Log>, String> {
    shared.lock().map_err(|e| e.to_string())
}

/// Message `m` of schedule `seed` (its SQS message id is its key).
fn message(seed: u64, m: usize, deadline_ms: u64) -> Record<Value> {
    let body = json!({ "orderId": format!("o-{m}"), "cents": 250 });
    let offset = usize::try_from(seed).unwrap_or(0) * 10 + m;
    let batch = dynamo_testing::events::sqs_batch(std::slice::from_ref(&body), offset);
    let position = batch.records[0].position.clone();
    Record::new(body.clone(), position, body.to_string().into_bytes())
        .with_deadline_ms(Some(deadline_ms))
}

/// One delivery: the function logs its execution, sleeps `work`, fails when `fails`.
async fn delivery(
    layer: &Idempotency<DynamoDbPersistence>,
    record: &Record<Value>,
    (m, work, fails): (usize, Duration, bool),
    shared: &Shared,
) -> Result<Run<String>, IdempotencyError<String>> {
    let deadline_ms = record.deadline_ms().unwrap_or(u64::MAX);
    layer
        .run_record("charge", &KeySource::Id, record, || async move {
            let started_ms = epoch_millis();
            let index = {
                let mut log = log(shared)?;
                log.executions.push(Execution {
                    message: m,
                    started_ms,
                    ended_ms: None,
                    deadline_ms,
                });
                log.executions.len() - 1
            };
            tokio::time::sleep(work).await;
            log(shared)?.executions[index].ended_ms = Some(epoch_millis());
            if fails {
                Err("the function failed".to_string())
            } else {
                Ok(format!("receipt-{m}-{index}"))
            }
        })
        .await
}

/// One actor: its own process and client; delivers each message until it has a value.
async fn actor(seed: u64, mut rng: StdRng, table: String, shared: Shared) -> Result<(), String> {
    let cache = if rng.random_bool(0.5) { 0 } else { 16 };
    let config = IdempotencyConfig::builder("payments")
        .cache_keys(cache)
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
        let mut got = None;
        for _ in 0..DELIVERIES {
            let record = message(seed, m, epoch_millis() + rng.random_range(400..900));
            let plan = (
                m,
                Duration::from_millis(rng.random_range(0..100)),
                rng.random_bool(1.0 / 6.0),
            );
            let run = delivery(&layer, &record, plan, &shared);
            let outcome = if rng.random_bool(0.1) {
                let crash = Duration::from_millis(rng.random_range(0..60));
                match tokio::time::timeout(crash, run).await {
                    Ok(outcome) => outcome,
                    Err(_) => continue, // abandoned: its claim holds the key to the deadline
                }
            } else {
                run.await
            };
            match outcome {
                Ok(run) => {
                    got = run.value();
                    break;
                }
                Err(IdempotencyError::InProgress { .. }) => {
                    tokio::time::sleep(Duration::from_millis(rng.random_range(20..60))).await;
                }
                Err(e) if e.is_retryable() != Some(false) => {}
                Err(e) => return Err(format!("message {m}: {e}")),
            }
        }
        let value = got.ok_or(format!(
            "message {m}: no value after {DELIVERIES} deliveries"
        ))?;
        log(&shared)?.values.push((m, value));
    }
    Ok(())
}

/// The invariants, per message.
fn check(log: &Log) -> Result<(), String> {
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
        let values: std::collections::BTreeSet<&String> = log
            .values
            .iter()
            .filter(|(n, _)| *n == m)
            .map(|(_, v)| v)
            .collect();
        if values.len() != 1 {
            return Err(format!(
                "message {m}: values {values:?}, executions {runs:?}"
            ));
        }
    }
    Ok(())
}

async fn schedule(seed: u64, table: &str) -> Result<usize, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let shared = Shared::default();
    let actors: Vec<_> = (0..ACTORS)
        .map(|_| {
            let rng = StdRng::seed_from_u64(rng.random());
            tokio::spawn(actor(seed, rng, table.to_string(), shared.clone()))
        })
        .collect();
    for a in actors {
        a.await.map_err(|e| e.to_string())??;
    }
    let log = log(&shared)?;
    check(&log)?;
    Ok(log.executions.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_schedules_run_each_message_once_at_a_time_and_store_one_result() {
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
