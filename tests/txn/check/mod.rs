//! The randomized checker of the transaction protocol: seeded schedules of K coordinators
//! and the sweeper over a few accounts, with random transfers, creates and deletes, random
//! duplicate deliveries, pauses, delays, lost responses, transaction conflicts and crashes at
//! a random call, coordinators on the fast path and on the lock path side by side (each
//! running its messages one by one or as one batch, which group-commits them), and a
//! reader at `Committed` and `Locked` isolation, checked after every schedule against the
//! invariants. Transactions also check a third account (`ConditionCheck`, existing or
//! absent), and a schedule may run in any of the modes of [`plan::Modes`]: accounts of
//! 100–190 KB with deliveries cut short mid-lock-phase, a pool item keyed by a number spelled
//! several ways, a transaction over 10–12 large accounts (chunks cut by bytes), and the
//! previous release's lock format (attempts an "older coordinator" started and left locking
//! before the schedule's coordinators run). The invariants:
//!
//! * every generated transaction is valid, so no delivery may reject one (`Rejected`), and a
//!   rejected one must have applied nothing;
//! * the sum of the balances is conserved, and no balance is negative (also in every locked
//!   read taken during the schedule);
//! * each `txId` is applied at most once, and exactly once when any delivery reported it
//!   committed (every transaction also `ADD`s 1 to its own journal item);
//! * the raw table equals the committed view (read at `Isolation::Committed`) once every
//!   message is final;
//! * after a sweep, no lock, image or marker is left and every TX record is completed;
//! * the pool item (number-key mode) counts each applied transaction once.
//!
//! `TX_CHECK_SCHEDULES` (default 300) schedules, `TX_CHECK_PARALLEL` (default 8) at a time;
//! `TX_CHECK_SEED` sets the first seed (default: from the clock, printed). A failure names the
//! schedule's seed: `TX_CHECK_SEED=<seed> TX_CHECK_SCHEDULES=1` replays it (the schedule of
//! faults is the seed's; thread timing is not). `make tx-check` runs 10,000.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::txn::env::*;
use dev_testing::{client, At, Interleaving};
use dynamodb_exactly_once::batch::{Protocol, RecordResult};
use dynamodb_exactly_once::txn::read::Isolation;
use dynamodb_exactly_once::txn::TxState;
use dynamodb_exactly_once::txn::{Coordinator, TxError, TxMessage, TxOutcome};
use dynamodb_exactly_once::Deadline;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};

mod modes;
mod plan;

use plan::{Msg, Plan, INITIAL};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The tables of a run: the suite's, and the number-keyed table of the pool item.
struct Tables {
    env: Env,
    numeric: String,
}

impl Tables {
    /// The suite's settings, with the number-keyed table allowed.
    fn builder(&self) -> dynamodb_exactly_once::txn::TxConfigBuilder {
        self.env
            .builder()
            .allowed_tables([self.env.accounts(), self.numeric.as_str()])
    }
}

/// When a paused actor is released.
#[derive(Debug, Clone, Copy)]
enum Release {
    /// After a while.
    After(Duration),
    /// Once every actor not held this way has finished (a stalled duplicate that resumes
    /// after the others completed its transaction).
    AfterOthers,
}

/// Random faults for actor `name` (its calls counted from 0).
fn faults(rng: &mut StdRng, il: &Interleaving, name: &str) -> Option<Release> {
    if rng.random_bool(0.3) {
        il.crash_from(name, rng.random_range(2..30));
    }
    if rng.random_bool(0.4) {
        il.lose_response(name, At::call(rng.random_range(1..25)));
    }
    if rng.random_bool(0.2) {
        il.conflict(name, At::call(rng.random_range(1..25)));
    }
    if rng.random_bool(0.3) {
        let delay = Duration::from_millis(rng.random_range(1..80));
        il.delay_before(name, At::call(rng.random_range(1..25)), delay);
    }
    if rng.random_bool(0.4) {
        let at = rng.random_range(1..25);
        il.pause_before(name, At::call(at));
        if rng.random_bool(0.5) {
            return Some(Release::After(Duration::from_millis(
                rng.random_range(10..150),
            )));
        }
        if rng.random_bool(0.5) {
            // Resume, make a few calls, die.
            il.crash_from(name, at + rng.random_range(1..5));
        }
        return Some(Release::AfterOthers);
    }
    None
}

/// Why a delivery did not end with an outcome.
#[derive(Debug)]
enum NotDone {
    /// Refused as never able to succeed: a generated transaction is valid, so a bug.
    Rejected(String),
    /// Failed, deferred or crashed: delivered again.
    Other,
}

type Reports = Vec<(String, Result<TxOutcome, NotDone>)>;

async fn deliver(
    c: Coordinator,
    messages: Vec<Msg>,
    as_batch: bool,
    cut_after: Option<Duration>,
    finished: Arc<AtomicUsize>,
) -> Reports {
    // A delivery cut short: its deadline comes mid-lock-phase, and the next one resumes.
    let deadline = || cut_after.map_or(Deadline::none(), Deadline::after);
    let mut out = Vec::new();
    if as_batch {
        // One batch through `apply`: a fast-path coordinator commits its members in groups.
        let parsed: Vec<(usize, TxMessage)> = messages
            .iter()
            .enumerate()
            .filter_map(|(i, m)| Some((i, c.parse_message(m.body.to_string().as_bytes()).ok()?)))
            .collect();
        let applied = c.apply(parsed, deadline()).await;
        for (i, result) in applied.results {
            let result = match result {
                RecordResult::Done(o) => Ok(o),
                RecordResult::Rejected(r) => Err(NotDone::Rejected(format!("{r:?}"))),
                _ => Err(NotDone::Other),
            };
            out.push((messages[i].tx_id.clone(), result));
        }
    } else {
        for m in messages {
            let Ok(parsed) = c.parse_message(m.body.to_string().as_bytes()) else {
                continue;
            };
            let result = c.run(&parsed, deadline()).await;
            out.push((
                m.tx_id,
                result.map(|r| r.outcome).map_err(|e| match e {
                    TxError::Rejected(r) => NotDone::Rejected(r.to_string()),
                    _ => NotDone::Other,
                }),
            ));
        }
    }
    finished.fetch_add(1, Ordering::SeqCst);
    out
}

/// Run one schedule and check it; `Err` names what broke.
async fn schedule(tables: Arc<Tables>, seed: u64) -> Result<(), String> {
    let base = client();
    let env = &tables.env;
    let table = env.accounts().to_string();
    let plan = plan::plan(seed, &table, &tables.numeric);
    plan::seed_plan(&base, &table, &plan).await;
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut downgraded = 0;
    if plan.modes.previous_format {
        // A rolling deploy: older coordinators started some messages and died; this
        // release's coordinators deliver them again.
        downgraded =
            modes::leave_attempts_of_the_previous_release(&tables, &base, &plan, &mut rng).await?;
    }
    let il = Interleaving::new();
    let mut tasks = Vec::new();
    let mut pauses = Vec::new();
    let finished = Arc::new(AtomicUsize::new(0));
    for (k, messages) in plan.deliveries.iter().enumerate() {
        let name = format!("c{k}");
        if let Some(release_after) = faults(&mut rng, &il, &name) {
            pauses.push((name.clone(), release_after));
        }
        let config = tables
            .builder()
            // Fast-path and lock-path coordinators side by side (one `txId` may take both).
            .fast_path(rng.random_bool(0.5))
            // The lock path item by item or in chunks of 2 or 3 (a schedule's transactions
            // lock up to 5 items), or (wide mode) in chunks cut by bytes alone.
            .lock_chunk(if plan.modes.wide && rng.random_bool(0.7) {
                64
            } else {
                rng.random_range(1..=3)
            })
            // Items read one by one, or batched while the record is created (and a commit
            // finalized without reads).
            .read_ahead(rng.random_bool(0.5))
            .lock_patience(Duration::from_millis(40))
            .heartbeat_every(Duration::from_millis(20))
            .concurrency(rng.random_range(1..=3))
            .build()
            .expect("valid configuration");
        let attempts = rng.random_range(1..=2);
        let c = Coordinator::new(il.client(&name, attempts), config);
        let as_batch = rng.random_bool(0.5);
        let cut_after = (plan.modes.large && rng.random_bool(0.5))
            .then(|| Duration::from_millis(rng.random_range(5..120)));
        tasks.push(tokio::spawn(deliver(
            c,
            messages.clone(),
            as_batch,
            cut_after,
            finished.clone(),
        )));
    }
    let reader = tokio::spawn(read_during(
        tables.clone(),
        plan.accounts.clone(),
        plan.existing.len(),
        Duration::from_millis(rng.random_range(0..100)),
    ));
    let sweeper_at = Duration::from_millis(rng.random_range(0..100));
    let sweeper_env = env.clone();
    let sweeper_il = il.clone();
    let sweeper_faulty = rng.random_bool(0.3).then(|| rng.random_range(1..20));
    let sweeps = rng.random_bool(0.6);
    let sweeper = tokio::spawn(async move {
        if !sweeps {
            return;
        }
        tokio::time::sleep(sweeper_at).await;
        if let Some(k) = sweeper_faulty {
            sweeper_il.crash_from("sweeper", k);
        }
        let s = sweeper_env.sweeper(sweeper_il.client("sweeper", 1), 0, 3600);
        let _ = s.sweep(Deadline::none()).await;
    });
    let held = pauses
        .iter()
        .filter(|(_, r)| matches!(r, Release::AfterOthers))
        .count();
    let actors = tasks.len();
    for (name, release) in pauses {
        let (il, finished) = (il.clone(), finished.clone());
        tokio::spawn(async move {
            match release {
                Release::After(after) => tokio::time::sleep(after).await,
                Release::AfterOthers => {
                    let started = Instant::now();
                    while finished.load(Ordering::SeqCst) + held < actors
                        && started.elapsed() < Duration::from_secs(5)
                    {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
            il.release_all(&name);
        });
    }
    let t0 = Instant::now();
    let mut reports: Reports = Vec::new();
    for t in tasks {
        reports.extend(t.await.map_err(|e| format!("coordinator task: {e}"))?);
    }
    sweeper.await.map_err(|e| format!("sweeper task: {e}"))?;
    reader.await.map_err(|e| format!("reader task: {e}"))??;

    let t1 = Instant::now();
    // Redelivery: every message until it is final (as SQS would), by a healthy coordinator.
    let healthy = Coordinator::new(
        client(),
        tables.builder().build().map_err(|e| e.to_string())?,
    );
    for m in &plan.messages {
        let parsed = healthy
            .parse_message(m.body.to_string().as_bytes())
            .map_err(|e| e.to_string())?;
        let mut tries = 0;
        loop {
            tries += 1;
            match healthy.run(&parsed, Deadline::none()).await {
                Ok(r) => {
                    reports.push((m.tx_id.clone(), Ok(r.outcome)));
                    break;
                }
                Err(TxError::Rejected(r)) => {
                    let why = NotDone::Rejected(r.to_string());
                    reports.push((m.tx_id.clone(), Err(why)));
                    break;
                }
                Err(e) if tries < 20 => {
                    let _ = e;
                }
                Err(e) => return Err(format!("{}: never final: {e}", m.tx_id)),
            }
        }
    }
    let t2 = Instant::now();
    check_committed_view(&healthy, &base, &table, &plan).await?;
    sweep_all(env, client()).await;
    let result = check_final(&base, &tables, &plan, &reports).await;
    if std::env::var("TX_CHECK_VERBOSE").is_ok() {
        eprintln!(
            "seed {seed} {:?} ({downgraded} locks downgraded): run {:?}, redeliver {:?}, check {:?}",
            plan.modes,
            t1 - t0,
            t2 - t1,
            t2.elapsed()
        );
    }
    result
}

/// Readers during the schedule: every account at `Committed` (never negative), then all of
/// them at `Locked`, a snapshot: when it succeeds, the balances add up to the money there is.
async fn read_during(
    tables: Arc<Tables>,
    accounts: Vec<String>,
    existing: usize,
    after: Duration,
) -> Result<(), String> {
    tokio::time::sleep(after).await;
    let config = tables.builder().build().map_err(|e| e.to_string())?;
    let c = Coordinator::new(client(), config);
    let table = tables.env.accounts().to_string();
    let keys: Vec<(String, Map<String, Value>)> = accounts
        .iter()
        .map(|pk| {
            (
                table.clone(),
                json!({"PK":pk}).as_object().cloned().unwrap_or_default(),
            )
        })
        .collect();
    let amount = |v: &Option<Map<String, Value>>| {
        v.as_ref()
            .and_then(|i| i.get("balance"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    for (_, key) in &keys {
        if let Ok(v) = c.read(&table, key, Isolation::Committed).await {
            if amount(&v) < 0 {
                return Err(format!("committed read of {key:?}: {v:?}"));
            }
        }
    }
    let total = INITIAL * i64::try_from(existing).unwrap_or(0);
    match c.read_locked(&keys).await {
        Ok(values) if values.iter().map(amount).sum::<i64>() != total => {
            Err(format!("locked read {values:?} does not add up to {total}"))
        }
        _ => Ok(()),
    }
}

/// The schedule's items (accounts and journals) by `PK`: one consistent `BatchGetItem` (the
/// table holds every schedule's items: no scan).
async fn schedule_items(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    plan: &Plan,
) -> Result<BTreeMap<String, Map<String, Value>>, String> {
    use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
    let journals = (0..plan.messages.len()).map(|t| format!("{}-j{t}", plan.prefix));
    let keys: Vec<_> = plan
        .accounts
        .iter()
        .cloned()
        .chain(journals)
        .map(|pk| std::collections::HashMap::from([("PK".to_string(), AttributeValue::S(pk))]))
        .collect();
    let request = KeysAndAttributes::builder()
        .set_keys(Some(keys))
        .consistent_read(true)
        .build()
        .map_err(|e| e.to_string())?;
    let out = client
        .batch_get_item()
        .request_items(table, request)
        .send()
        .await
        .map_err(|e| format!("BatchGetItem: {e}"))?;
    if out.unprocessed_keys().is_some_and(|u| !u.is_empty()) {
        return Err("BatchGetItem left keys unprocessed".into());
    }
    let mut items = BTreeMap::new();
    for item in out
        .responses()
        .and_then(|r| r.get(table))
        .cloned()
        .unwrap_or_default()
    {
        let json =
            dynamodb_exactly_once::__private::item_to_json(item).map_err(|e| e.to_string())?;
        let pk = json
            .get("PK")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        items.insert(pk, json);
    }
    Ok(items)
}

/// Every message final: each key's raw item (without protocol attributes) is its committed
/// value.
async fn check_committed_view(
    c: &Coordinator,
    base: &aws_sdk_dynamodb::Client,
    table: &str,
    plan: &Plan,
) -> Result<(), String> {
    let raw = schedule_items(base, table, plan).await?;
    for pk in plan.accounts.iter() {
        let key = json!({"PK":pk}).as_object().cloned().unwrap_or_default();
        let committed = c
            .read(table, &key, Isolation::Committed)
            .await
            .map_err(|e| e.to_string())?;
        let stored = raw.get(pk).map(|item| {
            let mut item = item.clone();
            for a in dynamodb_exactly_once::txn::ITEM_PROTOCOL_ATTRIBUTES {
                item.remove(a);
            }
            item
        });
        if committed != stored {
            return Err(format!("{pk}: raw {stored:?} but committed {committed:?}"));
        }
    }
    Ok(())
}

async fn check_final(
    base: &aws_sdk_dynamodb::Client,
    tables: &Tables,
    plan: &Plan,
    reports: &Reports,
) -> Result<(), String> {
    let env = &tables.env;
    let now = schedule_items(base, env.accounts(), plan).await?;
    let mut sum = 0;
    for a in &plan.accounts {
        if let Some(item) = now.get(a) {
            let b = item
                .get("balance")
                .and_then(Value::as_i64)
                .ok_or(format!("{a}: {item:?}"))?;
            if b < 0 {
                return Err(format!("{a} is negative: {b}"));
            }
            sum += b;
        }
    }
    let expected = INITIAL * plan.existing.len() as i64;
    if sum != expected {
        return Err(format!("sum {sum} != {expected}: {now:?}"));
    }
    for (pk, item) in &now {
        for name in ["_txLock", "_txImage", "_txDelete", "_txTransient"] {
            if item.contains_key(name) {
                return Err(format!("{pk} still has {name} after a sweep: {item:?}"));
            }
        }
    }
    let mut applied_count = 0;
    for (t, m) in plan.messages.iter().enumerate() {
        let applied = now
            .get(&format!("{}-j{t}", plan.prefix))
            .and_then(|i| i.get("applied"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let committed = reports
            .iter()
            .any(|(id, r)| *id == m.tx_id && r.as_ref().is_ok_and(TxOutcome::is_committed));
        let rolled_back = reports.iter().any(|(id, r)| {
            *id == m.tx_id
                && matches!(
                    r,
                    Ok(TxOutcome::RolledBack { .. } | TxOutcome::AlreadyRolledBack { .. })
                )
        });
        let rejected = reports.iter().find_map(|(id, r)| match r {
            Err(NotDone::Rejected(why)) if *id == m.tx_id => Some(why),
            _ => None,
        });
        if applied > 1
            || (committed && applied != 1)
            || ((rolled_back || rejected.is_some()) && applied != 0)
        {
            return Err(format!(
                "{}: applied {applied} times (committed reported: {committed}, rolled back \
                 reported: {rolled_back}, rejected: {rejected:?})",
                m.tx_id
            ));
        }
        if let Some(why) = rejected {
            return Err(format!(
                "{}: a valid transaction was rejected ({:?}): {why}",
                m.tx_id, plan.modes
            ));
        }
        applied_count += usize::try_from(applied).unwrap_or(0);
    }
    modes::check_pool(base, &tables.numeric, plan, applied_count).await?;
    let tx = env.sweeper(base.clone(), 0, 3600);
    for m in &plan.messages {
        let header = tx.status(&m.tx_id).await.map_err(|e| e.to_string())?;
        if let Some(h) = header.filter(|h| h.state != TxState::Completed) {
            return Err(format!("TX record not completed after a sweep: {h:?}"));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_schedules_keep_every_invariant() {
    let schedules = env_number("TX_CHECK_SCHEDULES", 300);
    let parallel = env_number("TX_CHECK_PARALLEL", 8).max(1);
    let first = env_number(
        "TX_CHECK_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() % 1_000_000 * 100_000)
            .unwrap_or(0),
    );
    eprintln!("tx-check: {schedules} schedules from seed {first} ({parallel} at a time)");
    let env = Env::new(&client()).await;
    let numeric = crate::common::numeric_key_table(&client(), "CheckPool", "id").await;
    let tables = Arc::new(Tables { env, numeric });
    let started = Instant::now();
    let runs = (0..schedules).map(|i| {
        let (tables, seed) = (tables.clone(), first + i);
        async move {
            let run = tokio::spawn(schedule(tables, seed)).await;
            (
                seed,
                run.map_err(|e| format!("panicked: {e}")).and_then(|r| r),
            )
        }
    });
    let results: Vec<(u64, Result<(), String>)> = futures::stream::iter(runs)
        .buffer_unordered(usize::try_from(parallel).unwrap_or(1))
        .collect()
        .await;
    let mut failures = Vec::new();
    for (seed, result) in results {
        if let Err(why) = result {
            eprintln!("tx-check FAILED seed {seed}: {why}");
            failures.push((seed, why));
        }
    }
    eprintln!(
        "tx-check: {schedules} schedules in {:?}, {} failed",
        started.elapsed(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "replay with TX_CHECK_SEED=<seed> TX_CHECK_SCHEDULES=1: {failures:?}"
    );
}
