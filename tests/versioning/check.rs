//! The randomized checker of row versioning: seeded schedules of writers (one SDK client each)
//! changing a few items at once, each change chosen from the version the writer just read
//! (so some are stale: conflicts, changes of deleted items, restores of missing versions),
//! with every attempt refused or its response lost at a per-writer rate and 1–3 SDK attempts.
//! A change whose `apply` fails is delivered again, as a message is: the same write id and
//! content, a new time, up to 3 more times. After each schedule:
//!
//! * history holds exactly versions `1..=n` of each item, and the latest table agrees with
//!   row `n` (`versioning.rs`'s `assert_consistent`, here as a result);
//! * every write id is in history at most once (a change applied twice would be two rows);
//! * a change reported `Written { version: v }` is row `v`, with its own content (a restore:
//!   the content of the version it named; a delete: a tombstone);
//! * a change reported `Conflict`, `Deleted` or `NoSuchVersion` is in no row.
//!
//! `VERSIONING_CHECK_SEED` sets the first seed (default: from the clock, printed),
//! `VERSIONING_CHECK_SCHEDULES` how many (default 30); a failure prints the line that replays
//! its schedule (its faults are the seed's; thread timing is not).

use std::collections::BTreeMap;
use std::time::Duration;

use dev_testing::client;
use dynamodb_exactly_once::versioning::{
    HistoryEntry, HistoryOp, Latest, Revision, VersionOutcome, Versioning, VersioningConfig,
};
use dynamodb_exactly_once::ItemKey;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::checker::{faulty_client, Seeds};

const WRITERS: u64 = 3;
const ITEMS: usize = 2;
const CHANGES: usize = 6;
/// Deliveries of one change: the first and up to 3 more after a failed `apply`.
const DELIVERIES: usize = 4;

/// A change as its message describes it: rebuilt the same on every delivery.
#[derive(Debug, Clone, Copy)]
enum Plan {
    Create,
    Recreate { deleted_at: u64 },
    Update { expected: u64 },
    Delete { expected: u64 },
    Restore { expected: u64, from: u64 },
}

impl Plan {
    /// The next change of a writer that read `latest` (one in four or so is stale).
    fn choose(rng: &mut StdRng, latest: &Latest) -> Plan {
        let roll = rng.random_range(0..100);
        match *latest {
            Latest::Absent if roll < 85 => Plan::Create,
            Latest::Absent => Plan::Update { expected: 1 },
            Latest::Live(ref item) => {
                let v = item.version;
                match roll {
                    0..45 => Plan::Update { expected: v },
                    45..60 => Plan::Update {
                        expected: v.saturating_sub(1).max(1) + u64::from(v == 1),
                    },
                    60..75 => Plan::Delete { expected: v },
                    75..90 => Plan::Restore {
                        expected: v,
                        from: rng.random_range(1..=v + 1),
                    },
                    _ => Plan::Create,
                }
            }
            Latest::Deleted { version } => match roll {
                0..50 => Plan::Recreate {
                    deleted_at: version,
                },
                50..80 => Plan::Restore {
                    expected: version,
                    from: rng.random_range(1..=version),
                },
                _ => Plan::Update { expected: version },
            },
            _ => Plan::Create,
        }
    }

    /// The change, built as a delivery of the message builds it (a new time).
    fn revision(&self, key: &ItemKey, write_id: &str) -> Result<Revision, String> {
        let content = || json!({ "tag": write_id });
        let change = match *self {
            Plan::Create => Revision::create(key, content()),
            Plan::Recreate { deleted_at } => Revision::recreate(key, deleted_at, content()),
            Plan::Update { expected } => Revision::update(key, expected, content()),
            Plan::Delete { expected } => Ok(Revision::delete(key, expected)),
            Plan::Restore { expected, from } => Ok(Revision::restore(key, expected, from)),
        };
        change
            .and_then(|c| c.with_write_id(write_id))
            .map_err(|e| e.to_string())
    }
}

/// What the writer was told about one change, after its last delivery.
#[derive(Debug, Clone)]
struct Reported {
    item: usize,
    plan: Plan,
    /// `None`: every delivery failed.
    outcome: Option<VersionOutcome>,
}

fn item_key(seed: u64, item: usize) -> Result<ItemKey, String> {
    ItemKey::from_json(&json!({ "PK": format!("s{seed}-i{item}") })).map_err(|e| e.to_string())
}

/// A store whose client refuses attempts or loses their responses at a random rate.
fn faulty(config: &VersioningConfig, rng: &mut StdRng) -> Versioning {
    Versioning::new(faulty_client(rng), config.clone())
}

/// One writer's changes; what it was told of each, by write id.
async fn writer(
    healthy: Versioning,
    seed: u64,
    w: u64,
) -> Result<BTreeMap<String, Reported>, String> {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(31).wrapping_add(w));
    let store = faulty(healthy.config(), &mut rng);
    let mut reported = BTreeMap::new();
    for j in 0..CHANGES {
        let item = rng.random_range(0..ITEMS);
        let key = item_key(seed, item)?;
        let latest = healthy.get(&key).await.map_err(|e| e.to_string())?;
        let plan = Plan::choose(&mut rng, &latest);
        let write_id = format!("w{w}-{j}");
        let mut outcome = None;
        for _ in 0..DELIVERIES {
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..4))).await;
            match store.apply(&plan.revision(&key, &write_id)?).await {
                Ok(o) => {
                    outcome = Some(o);
                    break;
                }
                Err(e) if e.is_retryable() => {}
                Err(e) => return Err(format!("{write_id} {plan:?}: not retryable: {e}")),
            }
        }
        let report = Reported {
            item,
            plan,
            outcome,
        };
        reported.insert(write_id, report);
    }
    Ok(reported)
}

/// Every version of `key`, oldest first (the whole history, page by page).
async fn history(store: &Versioning, key: &ItemKey) -> Result<Vec<HistoryEntry>, String> {
    let (mut out, mut before) = (Vec::new(), None);
    loop {
        let page = store
            .history(key, 5, before)
            .await
            .map_err(|e| e.to_string())?;
        out.extend(page.entries);
        before = page.next;
        if before.is_none() {
            out.reverse();
            return Ok(out);
        }
    }
}

/// History is `1..=n` and the latest table agrees with row `n`.
fn consistent(latest: &Latest, rows: &[HistoryEntry]) -> Result<(), String> {
    let versions: Vec<u64> = rows.iter().map(|e| e.version).collect();
    let n = rows.len() as u64;
    if versions != (1..=n).collect::<Vec<_>>() {
        return Err(format!("history versions {versions:?}"));
    }
    let agrees = match (latest, rows.last()) {
        (Latest::Absent, None) => true,
        (Latest::Live(item), Some(top)) => {
            item.version == n
                && Some(&item.item) == top.item.as_ref()
                && item.write_id == top.write_id
        }
        (Latest::Deleted { version }, Some(top)) => *version == n && top.op == HistoryOp::Delete,
        _ => false,
    };
    if agrees {
        Ok(())
    } else {
        Err(format!(
            "latest {latest:?} disagrees with history {:?}",
            rows.last()
        ))
    }
}

/// Row `row` is what change `plan` writes (`rows`: the item's whole history).
fn written_as_planned(plan: &Plan, row: &HistoryEntry, rows: &[HistoryEntry]) -> bool {
    let tag = row.item.as_ref().and_then(|i| i.get("tag"));
    match *plan {
        Plan::Delete { .. } => row.op == HistoryOp::Delete && row.item.is_none(),
        Plan::Restore { from, .. } => {
            let source = usize::try_from(from - 1).ok().and_then(|i| rows.get(i));
            row.restored_from == Some(from) && source.is_some_and(|s| s.item == row.item)
        }
        _ => tag.and_then(|t| t.as_str()) == Some(row.write_id.as_str()),
    }
}

/// The label a report is counted under.
fn label(outcome: Option<VersionOutcome>) -> &'static str {
    match outcome {
        Some(VersionOutcome::Written { .. }) => "written",
        Some(VersionOutcome::Conflict { .. }) => "conflict",
        Some(VersionOutcome::Deleted { .. }) => "deleted",
        Some(VersionOutcome::NoSuchVersion { .. }) => "no_such_version",
        Some(_) => "other",
        None => "every_delivery_failed",
    }
}

/// Run one schedule and check it; the number of changes by outcome.
async fn schedule(
    healthy: &Versioning,
    seed: u64,
) -> Result<BTreeMap<&'static str, usize>, String> {
    let writers = (0..WRITERS).map(|w| tokio::spawn(writer(healthy.clone(), seed, w)));
    let mut reported = BTreeMap::new();
    for task in writers {
        reported.extend(task.await.map_err(|e| e.to_string())??);
    }
    let mut rows_of: BTreeMap<String, (usize, HistoryEntry)> = BTreeMap::new();
    for item in 0..ITEMS {
        let key = item_key(seed, item)?;
        let rows = history(healthy, &key).await?;
        let latest = healthy.get(&key).await.map_err(|e| e.to_string())?;
        consistent(&latest, &rows).map_err(|e| format!("item {item}: {e}"))?;
        for row in &rows {
            let Some(change) = reported.get(&row.write_id) else {
                return Err(format!("item {item}: row {} of no change", row.version));
            };
            if change.item != item || !written_as_planned(&change.plan, row, &rows) {
                return Err(format!("item {item}: row {row:?} is not {change:?}"));
            }
            if let Some((_, first)) = rows_of.insert(row.write_id.clone(), (item, row.clone())) {
                return Err(format!(
                    "{} applied twice: {first:?}, {row:?}",
                    row.write_id
                ));
            }
        }
    }
    for (write_id, change) in &reported {
        let row = rows_of.get(write_id).map(|(_, r)| r.version);
        match (change.outcome, row) {
            (Some(VersionOutcome::Written { version }), Some(v)) if v == version => {}
            (None, _) => {}
            (Some(VersionOutcome::Written { .. }), _) | (Some(_), Some(_)) => {
                return Err(format!(
                    "{write_id}: reported {change:?}, history row {row:?}"
                ));
            }
            (Some(_), None) => {}
        }
    }
    let mut counts = BTreeMap::new();
    for change in reported.values() {
        *counts.entry(label(change.outcome)).or_default() += 1;
    }
    Ok(counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_schedules_keep_latest_and_history_in_agreement_and_apply_each_change_once() {
    let seeds = Seeds::from_env("VERSIONING_CHECK", 30);
    let setup = client();
    let tables =
        dev_testing::template_tables(&setup, &["VersionedTable", "VersionedHistoryTable"]).await;
    let config =
        VersioningConfig::builder(&tables["VersionedTable"], &tables["VersionedHistoryTable"])
            .build()
            .expect("valid configuration");
    let healthy = Versioning::new(setup, config);
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    for seed in seeds.iter() {
        match schedule(&healthy, seed).await {
            Ok(counts) => counts
                .into_iter()
                .for_each(|(label, n)| *outcomes.entry(label).or_default() += n),
            Err(failure) => panic!("schedule {seed}: {failure}\n{}", seeds.replay(seed)),
        }
    }
    println!("versioning checker: changes by outcome {outcomes:?}");
}
