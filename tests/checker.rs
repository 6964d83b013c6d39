//! What the randomized schedule checkers share (`*_check.rs`): their seeds, a client that
//! fails at random, and delivery as the source redelivers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use dev_testing::{client_with, Fault, FaultInjector};
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once::{Deadline, Protocol};
use dynamodb_exactly_once_lambda::source::{Batch, SourceKind, SourceRecord};
use dynamodb_exactly_once_lambda::Writer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The seeds of a randomized checker: `<PREFIX>_SEED` is the first (from the clock when
/// unset) and `<PREFIX>_SCHEDULES` how many (`default` when unset). They are printed, and a
/// failure names the line that replays its schedule.
#[derive(Debug, Clone, Copy)]
pub struct Seeds {
    prefix: &'static str,
    pub first: u64,
    pub count: u64,
}

impl Seeds {
    pub fn from_env(prefix: &'static str, default: u64) -> Seeds {
        let number = |suffix: &str| {
            std::env::var(format!("{prefix}_{suffix}"))
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
        };
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs() % 1_000_000 * 1_000);
        let seeds = Seeds {
            prefix,
            first: number("SEED").unwrap_or(clock),
            count: number("SCHEDULES").unwrap_or(default),
        };
        println!(
            "{prefix}: {} schedules from seed {} ({prefix}_SEED={} {prefix}_SCHEDULES={})",
            seeds.count, seeds.first, seeds.first, seeds.count
        );
        seeds
    }

    pub fn iter(&self) -> std::ops::Range<u64> {
        self.first..self.first + self.count
    }

    /// The environment that replays `seed`'s schedule alone.
    pub fn replay(&self, seed: u64) -> String {
        let prefix = self.prefix;
        format!("replay: {prefix}_SEED={seed} {prefix}_SCHEDULES=1")
    }
}

/// A client whose attempts are refused (not applied) or lose their response (applied) at
/// rates drawn from `rng` (up to 20 % and 25 %), with 1 to 3 SDK attempts per call.
pub fn faulty_client(rng: &mut StdRng) -> Client {
    let (refuse, lose) = (rng.random_range(0.0..0.2), rng.random_range(0.0..0.25));
    let faults = Mutex::new(StdRng::seed_from_u64(rng.random()));
    let injector = FaultInjector::new(move |_, _| {
        let Ok(mut rng) = faults.lock() else {
            return Fault::None;
        };
        match rng.random_range(0.0..1.0) {
            r if r < refuse => Fault::Refuse,
            r if r < refuse + lose => Fault::LoseResponse,
            _ => Fault::None,
        }
    });
    client_with(Some(injector), rng.random_range(1..=3))
}

/// SQS or Kinesis, at even odds.
pub fn random_source(rng: &mut StdRng) -> SourceKind {
    if rng.random_bool(0.5) {
        SourceKind::Sqs
    } else {
        SourceKind::Kinesis
    }
}

/// One time in four, how far ahead the invocation deadline of a first delivery is (0–20 ms):
/// records not started by then are deferred, and calls still in flight are cut off
/// (reported, though they may still land while the records are delivered again).
pub fn random_deadline(rng: &mut StdRng) -> Option<Duration> {
    rng.random_bool(0.25)
        .then(|| Duration::from_millis(rng.random_range(0..20)))
}

/// Records by outcome label over every delivery, and the deliveries (`deliveries`).
pub type Counts = BTreeMap<&'static str, usize>;

/// Deliveries of one batch before a schedule fails as stuck.
const DELIVERIES: usize = 40;

/// Deliver `batch` as its source would until no record fails (SQS: the reported messages
/// again; Kinesis: every record from the first reported one on); the first delivery's
/// invocation deadline is `deadline` from now when one is given (no margin: records stop
/// being started and calls in flight are cut off at once). A dead-lettered (`invalid`) record fails the
/// schedule: every record of a checker is valid.
pub async fn deliver<P: Protocol>(
    w: &Writer<P>,
    mut batch: Batch,
    deadline: Option<Duration>,
    counts: &mut Counts,
) -> Result<(), String> {
    for round in 0..DELIVERIES {
        let bound = match deadline {
            Some(after) if round == 0 => {
                let at = epoch_millis().saturating_add(after.as_millis().try_into().unwrap_or(0));
                Deadline::from_epoch_ms(at, Duration::ZERO)
            }
            _ => Deadline::none(),
        };
        let report = w.handle_batch(&batch, bound).await;
        *counts.entry("deliveries").or_default() += 1;
        for (label, n) in &report.summary.outcomes {
            *counts.entry(label).or_default() += n;
        }
        if report.summary.count("invalid") > 0 {
            return Err(format!("records dead-lettered: {:?}", report.summary));
        }
        if !redeliver(&mut batch, &report.response.failed_ids()) {
            return Ok(());
        }
    }
    Err(format!(
        "records still failing after {DELIVERIES} deliveries"
    ))
}

/// Turn `batch` into what its source delivers again after `failed` were reported (SQS: the
/// reported messages; Kinesis: every record from the first reported one on, a KPL
/// aggregate's earlier user records with it); `false` when nothing was reported.
pub fn redeliver(batch: &mut Batch, failed: &[String]) -> bool {
    if failed.is_empty() {
        return false;
    }
    let failed: BTreeSet<&str> = failed.iter().map(String::as_str).collect();
    let reported = |r: &SourceRecord| failed.contains(r.position.id.as_str());
    match batch.kind {
        SourceKind::Kinesis => {
            let first = batch.records.iter().position(reported).unwrap_or(0);
            batch.records.drain(..first);
        }
        _ => batch.records.retain(reported),
    }
    true
}

/// Add `more` into `counts`.
pub fn add_counts(counts: &mut Counts, more: Counts) {
    more.into_iter()
        .for_each(|(label, n)| *counts.entry(label).or_default() += n);
}
