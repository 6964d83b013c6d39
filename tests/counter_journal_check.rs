//! The randomized checker of the counter's journal mode: seeded schedules of deliveries
//! (warm, cold, with lost responses, refused calls, duplicates within and across batches) and
//! roll-ups (dying at a random call, losing responses, two at once), then every key delivered
//! once more and one clean roll-up: each item must hold exactly the sum of its distinct keys.
//!
//! `COUNTER_CHECK_SEED` sets the first seed (default: from the clock, printed);
//! `COUNTER_CHECK_SCHEDULES` how many (default 12). A failure names its seed:
//! `COUNTER_CHECK_SEED=<seed> COUNTER_CHECK_SCHEDULES=1` replays its faults.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dynamo_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::counter::{Counter, CounterConfig, CounterRecord};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::checker::Seeds;
use crate::counter_journal::{apply, record, rollup, tables, total};

const ITEMS: usize = 3;
const KEYS: usize = 16;

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

fn key_record(counter: &Counter, k: usize) -> CounterRecord {
    // A key's item and delta depend on the key only: a redelivery is the same record.
    let delta = i64::try_from(k * k + 1).unwrap_or(1);
    record(
        counter,
        &format!("i{}", k % ITEMS),
        delta,
        &format!("key{k}"),
    )
}

async fn schedule(seed: u64) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let c = client();
    let (counters, journal) = tables(&c).await;
    let config = |cache: bool| {
        let mut config = CounterConfig::journal(&counters, &journal);
        config.cache_keys = if cache { 100 } else { 0 };
        config
    };
    let warm = Counter::try_new(c.clone(), config(true)).map_err(|e| e.to_string())?;
    let mut delivered = [false; KEYS];
    for _ in 0..rng.random_range(4..10) {
        if rng.random_bool(0.6) {
            let keys: Vec<usize> = (0..rng.random_range(1..12))
                .map(|_| rng.random_range(0..KEYS))
                .collect();
            let writer = match rng.random_range(0..3) {
                0 => warm.clone(),
                1 => Counter::try_new(c.clone(), config(false)).map_err(|e| e.to_string())?,
                _ => {
                    let (plan, attempts) = faults(&mut rng);
                    Counter::try_new(client_with(Some(plan), attempts), config(false))
                        .map_err(|e| e.to_string())?
                }
            };
            let records: Vec<_> = keys.iter().map(|k| key_record(&writer, *k)).collect();
            apply(&writer, &records).await;
            keys.iter().for_each(|k| delivered[*k] = true);
        } else {
            let runs = if rng.random_bool(0.3) { 2 } else { 1 };
            let mut rollups = Vec::new();
            for _ in 0..runs {
                let (plan, attempts) = faults(&mut rng);
                rollups.push(rollup(
                    client_with(Some(plan), attempts),
                    &counters,
                    &journal,
                ));
            }
            let _ =
                futures::future::join_all(rollups.iter().map(|r| r.run(Duration::from_secs(10))))
                    .await;
        }
    }
    // Every key delivered once more, cleanly, and one clean roll-up.
    let clean = Counter::try_new(c.clone(), config(false)).map_err(|e| e.to_string())?;
    let all: Vec<_> = (0..KEYS)
        .filter(|k| delivered[*k])
        .map(|k| key_record(&clean, k))
        .collect();
    apply(&clean, &all).await;
    let report = rollup(c.clone(), &counters, &journal)
        .run(Duration::from_secs(30))
        .await
        .map_err(|e| e.to_string())?;
    let mut want: BTreeMap<usize, i64> = BTreeMap::new();
    for k in (0..KEYS).filter(|k| delivered[*k]) {
        *want.entry(k % ITEMS).or_default() += i64::try_from(k * k + 1).unwrap_or(1);
    }
    for item in 0..ITEMS {
        let got = total(&clean, &format!("i{item}")).await;
        let expected = want.get(&item).copied().unwrap_or(0);
        if got != expected {
            return Err(format!(
                "item i{item}: {got}, expected {expected} (last run {report:?})"
            ));
        }
    }
    Ok(())
}

#[tokio::test]
async fn seeded_schedules_count_every_key_exactly_once() {
    let seeds = Seeds::from_env("COUNTER_CHECK", 12);
    for seed in seeds.iter() {
        if let Err(failure) = schedule(seed).await {
            panic!("schedule {seed}: {failure}\n{}", seeds.replay(seed));
        }
    }
}
