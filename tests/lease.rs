//! The fenced lease lock against DynamoDB Local: exclusion under a randomized schedule of
//! contenders with pauses (seeds printed), takeover after the holder stops heart-beating,
//! fencing a paused stale holder through the ratchet, strictly increasing tokens, lost
//! responses.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use common::*;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::lease::{
    AcquireOutcome, HeartbeatOutcome, Holding, Lease, LeaseConfig, ReleaseOutcome,
};
use dynamodb_exactly_once::ratchet::RatchetOutcome;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::time::Instant;

async fn lock_table(client: &Client) -> String {
    dev_testing::template_tables(client, &["LockTable"]).await["LockTable"].clone()
}

fn lease_on(client: Client, table: &str, lease_ms: u64) -> Lease {
    Lease::new(
        client,
        LeaseConfig::builder(table)
            .lease(Duration::from_millis(lease_ms))
            .poll_interval(Duration::from_millis(lease_ms / 8))
            .build()
            .expect("valid configuration"),
    )
}

/// The holding of an acquisition that must succeed.
fn acquired(outcome: AcquireOutcome) -> (u64, Holding) {
    match outcome {
        AcquireOutcome::Acquired { token, holding, .. } => (token, holding),
        other => panic!("expected an acquisition, got {other:?}"),
    }
}

#[tokio::test]
async fn tokens_strictly_increase_with_every_acquisition() {
    let client = client();
    let table = lock_table(&client).await;
    let lease = lease_on(client, &table, 300);
    let mut tokens = Vec::new();

    // Acquire and release, by the same and by other owners
    for owner in ["a", "a", "b", "c"] {
        let (token, holding) = acquired(lease.try_acquire("job", owner).await.expect("acquire"));
        tokens.push(token);
        assert_eq!(
            lease.release(holding).await.expect("release"),
            ReleaseOutcome::Released
        );
    }
    // A takeover from a holder that went away
    let (token, _abandoned) = acquired(lease.try_acquire("job", "d").await.expect("acquire"));
    tokens.push(token);
    let (token, _) = acquired(
        lease
            .acquire("job", "e", Duration::from_secs(5))
            .await
            .expect("takeover"),
    );
    tokens.push(token);

    assert_eq!(tokens, [1, 2, 3, 4, 5, 6]);
    // Another lock has its own counter.
    let (other, _) = acquired(lease.try_acquire("other", "a").await.expect("acquire"));
    assert_eq!(other, 1);
}

#[tokio::test]
async fn a_released_lock_is_acquired_at_once_and_a_held_one_is_not() {
    let client = client();
    let table = lock_table(&client).await;
    let lease = lease_on(client, &table, 5_000);
    let (_, holding) = acquired(lease.try_acquire("job", "a").await.expect("acquire"));

    match lease.try_acquire("job", "b").await.expect("try") {
        AcquireOutcome::Held { by, version } => {
            assert_eq!(by, "a");
            assert_eq!(version, holding.version());
        }
        other => panic!("{other:?}"),
    }

    assert_eq!(
        lease.release(holding).await.expect("release"),
        ReleaseOutcome::Released
    );
    let started = Instant::now();
    let (token, _) = acquired(
        lease
            .acquire("job", "b", Duration::from_secs(10))
            .await
            .expect("acquire"),
    );
    assert_eq!(token, 2);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "no lease to wait for"
    );
}

#[tokio::test]
async fn a_holder_that_keeps_heart_beating_is_never_taken_over() {
    let client = client();
    let table = lock_table(&client).await;
    let holder = lease_on(client.clone(), &table, 1_000);
    let contender = lease_on(client, &table, 1_000);
    let (_, mut holding) = acquired(holder.try_acquire("job", "a").await.expect("acquire"));

    let beats = tokio::spawn(async move {
        for _ in 0..12 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(
                holder.heartbeat(&mut holding).await.expect("heartbeat"),
                HeartbeatOutcome::Extended
            );
        }
        holding
    });
    let outcome = contender
        .acquire("job", "b", Duration::from_millis(2_000))
        .await
        .expect("acquire");

    assert!(
        matches!(outcome, AcquireOutcome::Held { ref by, .. } if by == "a"),
        "{outcome:?}"
    );
    beats.await.expect("heartbeats");
}

#[tokio::test]
async fn takeover_after_the_holder_stops_heart_beating() {
    // Given a holder with a 500 ms lease that stops heart-beating
    let client = client();
    let table = lock_table(&client).await;
    let lease = lease_on(client, &table, 500);
    let (first, mut stale) = acquired(lease.try_acquire("job", "a").await.expect("acquire"));

    // When a contender waits for it
    let started = Instant::now();
    let outcome = lease
        .acquire("job", "b", Duration::from_secs(5))
        .await
        .expect("acquire");

    // Then it takes over after a full lease of the same record version, with a greater token
    let AcquireOutcome::Acquired {
        token,
        took_over_from,
        ..
    } = outcome
    else {
        panic!("expected a takeover, got {outcome:?}");
    };
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(took_over_from.as_deref(), Some("a"));
    assert!(token > first);
    // And the old holder learns it lost the lock
    assert_eq!(
        lease.heartbeat(&mut stale).await.expect("heartbeat"),
        HeartbeatOutcome::Lost {
            by: Some("b".into())
        }
    );
    assert_eq!(stale.remaining(), Duration::ZERO);
    assert_eq!(
        lease.release(stale).await.expect("release"),
        ReleaseOutcome::Lost {
            by: Some("b".into())
        }
    );
}

/// Given holder A writing through the ratchet with its token as `ts`, when A pauses past its
/// lease, B takes over and writes with its token, then A's late write is rejected (`stale`).
#[tokio::test]
async fn a_paused_stale_holders_fenced_write_is_rejected_after_a_takeover() {
    let client = client();
    let table = lock_table(&client).await;
    let lease = lease_on(client.clone(), &table, 400);
    let (ratchet, tables) = ratchet_writer(client.clone()).await;
    let fenced_put = |token: u64, by: &str| json!({"op":"put","key":{"PK":"report","SK":"latest"},"ts":token,"item":{"by":by}});

    let (token_a, holding_a) = acquired(lease.try_acquire("report", "a").await.expect("acquire"));
    assert_eq!(
        write_one(&ratchet, fenced_put(token_a, "a")).await,
        RatchetOutcome::Applied
    );

    // A pauses (no heartbeat) for longer than its lease; B takes over and writes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (token_b, _holding_b) = acquired(
        lease
            .acquire("report", "b", Duration::from_secs(5))
            .await
            .expect("takeover"),
    );
    assert!(token_b > token_a);
    assert_eq!(
        write_one(&ratchet, fenced_put(token_b, "b")).await,
        RatchetOutcome::Applied
    );

    // A wakes up still believing it holds the lock: its write is refused by the resource.
    assert_eq!(
        write_one(&ratchet, json!({"op":"put","key":{"PK":"report","SK":"latest"},"ts":token_a,"item":{"by":"a","late":true}})).await,
        RatchetOutcome::Stale
    );
    let items = scan(&client, &tables["RatchetTable"]).await;
    assert_eq!(items["report|latest"]["by"], json!("b"));
    assert_eq!(items["report|latest"]["Timestamp"], json!(token_b));
    drop(holding_a);
}

#[tokio::test]
async fn a_lost_response_on_acquire_is_recognised_as_acquired() {
    let setup = client();
    let table = lock_table(&setup).await;
    let faults = FaultInjector::new(|i, op| {
        // Call 0 is the read; call 1, the acquiring write, is applied and its response lost.
        if i == 1 && op == "UpdateItem" {
            Fault::LoseResponse
        } else {
            Fault::None
        }
    });
    let faulty = lease_on(client_with(Some(faults.clone()), 2), &table, 5_000);

    // The first UpdateItem is applied and its response lost; the SDK's retry fails its
    // condition and finds its own record version in ALL_OLD.
    let outcome = faulty.try_acquire("job", "a").await;
    let (token, holding) = acquired(outcome.expect("acquire"));
    assert_eq!(faults.injected(), 1);
    assert_eq!(token, 1, "one acquisition, one token");
    let state = lease_on(setup, &table, 5_000)
        .get("job")
        .await
        .expect("get")
        .expect("item");
    assert_eq!(state.owner, "a");
    assert_eq!(state.version, holding.version());
    assert_eq!(state.token, 1);
}

// ------------------------------------------------------------------- randomized schedule

/// An interval during which a contender believed it held the lock (its own `remaining()`).
#[derive(Debug, Clone)]
struct Belief {
    owner: String,
    token: u64,
    from: Instant,
    until: Instant,
}

type Log = Arc<Mutex<Vec<Belief>>>;

/// Takeovers seen by the randomized schedule (printed).
static TAKEOVERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn believe(log: &Log, holding: &Holding, from: Instant, until: Instant) {
    if until > from {
        let belief = Belief {
            owner: holding.owner().to_string(),
            token: holding.token(),
            from,
            until,
        };
        log.lock().expect("log").push(belief);
    }
}

/// One contender: acquire with random patience, then heartbeat, pause (miss heartbeats for up
/// to twice the lease) or release at random, until `stop`.
async fn contender(lease: Lease, lock: String, owner: String, seed: u64, stop: Instant, log: Log) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let lease_ms = u64::try_from(lease.config().lease().as_millis()).unwrap_or(400);
    while Instant::now() < stop {
        let patience = Duration::from_millis(rng.random_range(0..lease_ms * 2));
        let outcome = lease
            .acquire(&lock, &owner, patience)
            .await
            .expect("acquire");
        let AcquireOutcome::Acquired {
            mut holding,
            took_over_from,
            ..
        } = outcome
        else {
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..50))).await;
            continue;
        };
        if took_over_from.is_some() {
            TAKEOVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let mut from = Instant::now();
        let mut until = from + holding.remaining();
        for _ in 0..rng.random_range(1..6) {
            let pause = match rng.random_range(0..4) {
                0 => Duration::from_millis(rng.random_range(lease_ms / 2..lease_ms * 2)),
                _ => Duration::from_millis(lease_ms / 4),
            };
            tokio::time::sleep(pause).await;
            match lease.heartbeat(&mut holding).await.expect("heartbeat") {
                HeartbeatOutcome::Extended => {
                    let now = Instant::now();
                    if now > until {
                        // The lease ran out while paused: a new belief starts now.
                        believe(&log, &holding, from, until);
                        from = now;
                    }
                    until = now + holding.remaining();
                }
                HeartbeatOutcome::Lost { .. } => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        if rng.random_bool(0.7) {
            until = until.min(Instant::now());
            let _ = lease.release(holding.clone()).await.expect("release");
        }
        believe(&log, &holding, from, until);
    }
}

/// The seeds to run: `LEASE_SEEDS=1,2,3` to reproduce, otherwise three fresh ones.
fn seeds() -> Vec<u64> {
    match std::env::var("LEASE_SEEDS") {
        Ok(list) => list
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect(),
        Err(_) => (0..3).map(|_| rand::random::<u32>().into()).collect(),
    }
}

/// Given 3 contenders with random patience, heartbeats, pauses past the lease and releases,
/// then no two acquisitions' belief intervals overlap (on the one monotonic clock of this
/// process), and tokens grow with the start of each holding.
#[tokio::test]
async fn contenders_never_both_hold_the_lease_under_a_randomized_schedule() {
    let client = client();
    let table = lock_table(&client).await;
    for seed in seeds() {
        println!("lease schedule seed {seed} (reproduce with LEASE_SEEDS={seed})");
        let lock_client = client.clone();
        let log: Log = Arc::default();
        let stop = Instant::now() + Duration::from_millis(3_000);
        let tasks: Vec<_> = (0..3u64)
            .map(|c| {
                let lease = lease_on(lock_client.clone(), &table, 300);
                let (lock, owner) = (format!("lock-{seed}"), format!("c{c}"));
                let rng_seed = seed.wrapping_mul(31).wrapping_add(c);
                tokio::spawn(contender(
                    lease,
                    lock,
                    owner,
                    rng_seed,
                    stop,
                    Arc::clone(&log),
                ))
            })
            .collect();
        for task in tasks {
            task.await.expect("contender");
        }
        check_exclusion(seed, &log.lock().expect("log"));
    }
}

fn check_exclusion(seed: u64, beliefs: &[Belief]) {
    let mut by_token: BTreeMap<u64, Vec<&Belief>> = BTreeMap::new();
    for b in beliefs {
        by_token.entry(b.token).or_default().push(b);
    }
    assert!(
        by_token.len() >= 2,
        "seed {seed}: too few acquisitions to test anything: {beliefs:?}"
    );
    for a in beliefs {
        for b in beliefs {
            if a.token != b.token {
                assert!(
                    a.until <= b.from || b.until <= a.from,
                    "seed {seed}: {a:?} and {b:?} held the lease at the same time"
                );
            }
        }
    }
    // Tokens grow with the time each holding started; one token, one owner.
    let starts: Vec<(u64, Instant, &str)> = by_token
        .iter()
        .map(|(t, bs)| {
            (
                *t,
                bs.iter().map(|b| b.from).min().unwrap_or_else(Instant::now),
                bs[0].owner.as_str(),
            )
        })
        .collect();
    for pair in starts.windows(2) {
        assert!(
            pair[0].1 < pair[1].1,
            "seed {seed}: token {} started after token {}",
            pair[0].0,
            pair[1].0
        );
    }
    for bs in by_token.values() {
        assert!(
            bs.iter().all(|b| b.owner == bs[0].owner),
            "seed {seed}: one token, two owners"
        );
    }
    println!(
        "seed {seed}: {} acquisitions ({} takeovers so far), {} belief intervals, none overlapping",
        by_token.len(),
        TAKEOVERS.load(std::sync::atomic::Ordering::Relaxed),
        beliefs.len()
    );
}
