//! The randomized checker of the timestamp ratchet: seeded schedules of waves of concurrent
//! invocations, each a random batch drawn from a pool of puts and deletes over a few keys (many
//! equal timestamps, equal and different contents, every record delivered any number of times),
//! from SQS or Kinesis, through processes that stay warm across waves (their version caches with
//! them) or start cold: each with a client that refuses attempts or loses their responses at a
//! random rate with 1–3 SDK attempts, a random concurrency, with or without its version cache, and
//! sometimes an invocation deadline 0–20 ms ahead for the first delivery (records not started are
//! deferred, calls in flight cut off and reported though they may still land). Each batch is
//! delivered again as its source would until nothing fails. After each schedule every key must hold
//! the newest of the records delivered for it (greatest timestamp; at equal timestamps a delete,
//! then the greater content hash): its item exactly, or a tombstone with its timestamp and token.
//!
//! `RATCHET_CHECK_SEED` sets the first seed (default: from the clock, printed),
//! `RATCHET_CHECK_SCHEDULES` how many (default 40); a failure prints the line that replays its
//! schedule (its faults are the seed's; thread timing is not).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dev_testing::client;
use dev_testing::events::batch;
use dynamodb_exactly_once::__private::item_to_json;
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig, RatchetOp, RatchetRecord};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::Writer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::checker::{
    add_counts, deliver, faulty_client, random_deadline, random_source, Counts, Seeds,
};
use crate::common::{delete, put, scan};

const KEYS: u64 = 4;
/// Records in a schedule's pool.
const RECORDS: usize = 24;
/// Processes, each running one invocation of every wave.
const PROCESSES: usize = 3;
/// Waves of invocations in a schedule, at most.
const MAX_WAVES: usize = 4;

/// The schedule's pool of records: keys, timestamps and contents drawn from small ranges so
/// that equal timestamps, identical records and deletes are frequent.
fn pool(seed: u64, rng: &mut StdRng) -> Vec<Value> {
    (0..RECORDS)
        .map(|_| {
            let (pk, sk) = (
                format!("s{seed}"),
                format!("k{}", rng.random_range(0..KEYS)),
            );
            let ts = rng.random_range(1..8);
            if rng.random_bool(0.25) {
                delete(&pk, &sk, ts)
            } else {
                put(&pk, &sk, ts, json!({ "v": rng.random_range(0..3) }))
            }
        })
        .collect()
}

/// A process's writer: a faulty client, a random concurrency, with or without its cache.
fn process(
    rng: &mut StdRng,
    tables: &BTreeMap<String, String>,
) -> Result<Arc<Writer<Ratchet>>, String> {
    let client = faulty_client(rng);
    let mut config =
        RatchetConfig::builder(&tables["RatchetTable"]).concurrency(rng.random_range(1..=8));
    if rng.random_bool(0.5) {
        config = config.cache_keys(0);
    }
    let config = config.build().map_err(|e| e.to_string())?;
    let protocol = Ratchet::new(client.clone(), config);
    let dead_letters = DeadLetters::new(client, &tables["DeadLetterTable"], "ratchet-writer");
    let writer = Writer::builder("ratchet-writer", protocol)
        .dead_letters(dead_letters)
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer");
    Ok(Arc::new(writer))
}

/// One invocation: records drawn from the pool (some twice), delivered until done; the
/// indices delivered.
async fn invocation(
    pool: Arc<Vec<Value>>,
    mut rng: StdRng,
    w: Arc<Writer<Ratchet>>,
    offset: usize,
) -> Result<(Vec<usize>, Counts), String> {
    let picked: Vec<usize> = (0..rng.random_range(1..=12))
        .map(|_| rng.random_range(0..pool.len()))
        .collect();
    let bodies: Vec<Value> = picked.iter().map(|i| pool[*i].clone()).collect();
    let (kind, deadline) = (random_source(&mut rng), random_deadline(&mut rng));
    let mut counts = Counts::new();
    deliver(&w, batch(kind, &bodies, offset), deadline, &mut counts).await?;
    Ok((picked, counts))
}

/// The newest delivered record of each key (`PK|SK`).
fn model(
    w: &Writer<Ratchet>,
    records: &[&Value],
) -> Result<BTreeMap<String, RatchetRecord>, String> {
    let mut newest: BTreeMap<String, RatchetRecord> = BTreeMap::new();
    for body in records {
        let parsed = w
            .protocol()
            .parse_record(body.to_string().as_bytes())
            .map_err(|e| e.to_string())?;
        let id = format!(
            "{}|{}",
            body["key"]["PK"].as_str().unwrap_or_default(),
            body["key"]["SK"].as_str().unwrap_or_default()
        );
        if newest
            .get(&id)
            .is_none_or(|n| parsed.version() > n.version())
        {
            newest.insert(id, parsed);
        }
    }
    Ok(newest)
}

/// The stored item is `winner`'s put, or its tombstone.
fn holds(stored: &serde_json::Map<String, Value>, winner: &RatchetRecord) -> Result<bool, String> {
    let version = stored.get("Timestamp") == Some(&winner.ts().to_json())
        && stored.get("TieBreak") == Some(&json!(winner.token()));
    Ok(version
        && match winner.op() {
            RatchetOp::Delete => stored.get("Deleted") == Some(&json!(true)),
            RatchetOp::Put(item) => {
                *stored == item_to_json(item.clone()).map_err(|e| e.to_string())?
            }
            other => return Err(format!("an op the checker does not know: {other:?}")),
        })
}

async fn schedule(
    seed: u64,
    tables: &BTreeMap<String, String>,
    counts: &mut Counts,
) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let pool = Arc::new(pool(seed, &mut rng));
    let mut processes = (0..PROCESSES)
        .map(|_| process(&mut rng, tables))
        .collect::<Result<Vec<_>, _>>()?;
    let mut delivered = vec![false; pool.len()];
    for wave in 0..rng.random_range(1..=MAX_WAVES) {
        let mut invocations = Vec::new();
        for (i, warm) in processes.iter_mut().enumerate() {
            if rng.random_bool(0.2) {
                *warm = process(&mut rng, tables)?; // a cold start
            }
            let rng = StdRng::seed_from_u64(rng.random());
            let offset = (wave * 10 + i) * 100;
            invocations.push(tokio::spawn(invocation(
                pool.clone(),
                rng,
                warm.clone(),
                offset,
            )));
        }
        for task in invocations {
            let (picked, seen) = task.await.map_err(|e| e.to_string())??;
            picked.into_iter().for_each(|i| delivered[i] = true);
            add_counts(counts, seen);
        }
    }
    let records: Vec<&Value> = pool
        .iter()
        .zip(&delivered)
        .filter_map(|(r, d)| d.then_some(r))
        .collect();
    let want = model(&processes[0], &records)?;
    let table: BTreeMap<String, serde_json::Map<String, Value>> =
        scan(&client(), &tables["RatchetTable"])
            .await
            .into_iter()
            .filter(|(id, _)| id.starts_with(&format!("s{seed}|")))
            .collect();
    if table.keys().ne(want.keys()) {
        return Err(format!(
            "keys {:?}, expected {:?}",
            table.keys(),
            want.keys()
        ));
    }
    for (id, winner) in &want {
        if !holds(&table[id], winner)? {
            return Err(format!("{id}: {:?}, expected {winner:?}", table[id]));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_schedules_of_concurrent_faulty_invocations_leave_every_key_at_its_newest_record() {
    let seeds = Seeds::from_env("RATCHET_CHECK", 40);
    let tables =
        dev_testing::template_tables(&client(), &["RatchetTable", "DeadLetterTable"]).await;
    let mut counts = Counts::new();
    for seed in seeds.iter() {
        if let Err(failure) = schedule(seed, &tables, &mut counts).await {
            panic!("schedule {seed}: {failure}\n{}", seeds.replay(seed));
        }
    }
    println!("ratchet checker: records by outcome over every delivery {counts:?}");
}
