//! The roll-up: reads the journal's stream shard by shard (parents first) from each shard's
//! checkpoint, and applies each page's journaled keys per counter item.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use futures::StreamExt;

use super::apply::{ItemApplied, Source};
use super::entry::Event;
use super::stream::{Checkpoint, Shard};
use crate::config::ConfigError;
use crate::counter::CounterConfig;
use crate::ddb::{Clock, Cost, ItemKey, StoreError};

/// Records asked for per `GetRecords` call (DynamoDB Streams' limit: 1,000).
const RECORDS_PER_CALL: i32 = 1000;
/// Pages of one shard read before their keys are applied (up to 10,000 records).
const PAGES_PER_APPLY: usize = 10;
/// Empty pages in a row taken as an open shard's current end (DynamoDB Streams may answer an
/// empty page from a part of a shard with no records before later records).
const EMPTY_PAGES_AT_END: usize = 3;
/// Counter items updated at once.
const DEFAULT_ROLLUP_CONCURRENCY: usize = 16;
/// The longest budget of one run (a Lambda invocation lasts at most 15 minutes).
pub(super) const MAX_RUN: Duration = Duration::from_secs(14 * 60);

/// Settings of a [`Rollup`].
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct RollupConfig {
    /// The journal table (with its stream).
    pub journal_table: String,
    /// The counter settings whose items are written (table, attribute prefix, and the inline
    /// layout's settings to read items that still hold key buckets).
    pub counter: CounterConfig,
    /// Records per `GetRecords` call (1 to 1,000).
    pub records_per_call: i32,
    /// Counter items updated at once.
    pub concurrency: usize,
}

impl RollupConfig {
    /// The roll-up of `counter`, which must be in journal mode.
    pub fn of(counter: CounterConfig) -> Result<Self, ConfigError> {
        counter.validate()?;
        let journal_table = counter.journal_table().map(str::to_string).ok_or_else(|| {
            ConfigError::new("mode", "the roll-up needs a counter in journal mode")
        })?;
        Ok(RollupConfig {
            journal_table,
            counter,
            records_per_call: RECORDS_PER_CALL,
            concurrency: DEFAULT_ROLLUP_CONCURRENCY,
        })
    }
}

/// `shards` ordered so that a parent comes before its children (DynamoDB lists them so in
/// practice; this does not rely on it).
pub(super) fn parents_first(shards: &[Shard]) -> Vec<&Shard> {
    let by_id: BTreeMap<&str, &Shard> = shards.iter().map(|s| (s.id.as_str(), s)).collect();
    let mut placed: HashSet<&str> = HashSet::new();
    let mut order = Vec::with_capacity(shards.len());
    for shard in shards {
        // The chain of unplaced ancestors, oldest first.
        let mut chain = vec![shard];
        let mut at = shard;
        while let Some(parent) = at.parent.as_deref().and_then(|p| by_id.get(p)) {
            if placed.contains(parent.id.as_str()) || chain.len() > shards.len() {
                break;
            }
            chain.push(parent);
            at = parent;
        }
        for s in chain.into_iter().rev() {
            if placed.insert(s.id.as_str()) {
                order.push(s);
            }
        }
    }
    order
}

/// What one [`Rollup::run`] did.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RollupReport {
    /// Shards read.
    pub shards: usize,
    /// Stream records read (any kind).
    pub records: usize,
    /// Journaled keys found (`INSERT`s).
    pub keys: usize,
    /// Keys added to their counters by this run.
    pub applied: usize,
    /// Keys an earlier run (or a concurrent one) had applied already.
    pub duplicates: usize,
    /// Counter item updates made.
    pub item_updates: usize,
    /// DynamoDB write requests (updates, checkpoints; failed conditions included).
    pub write_calls: u64,
    /// Write units as AWS bills them.
    pub write_units: f64,
    /// Shards whose checkpoint had left the stream (records lost to the roll-up).
    pub trimmed: usize,
    /// Counter items not updated because of an error (their keys are read again next run).
    pub failed_items: usize,
    /// Every shard was read to its current end.
    pub caught_up: bool,
    /// How far behind the roll-up's reading is, like Lambda's `IteratorAge`: at the end of
    /// the run, the greatest age (milliseconds, this process's clock against DynamoDB's
    /// approximate creation time) of the last record read from a shard; 0 when nothing was
    /// read.
    pub iterator_age_ms: u64,
}

/// The roll-up of one journal (see the [module documentation](super)). Run it on a schedule,
/// one run at a time (the function `counter-rollup` has a reserved concurrency of 1). Two runs
/// at once stay exact (the watermarks) and only repeat each other's reads, provided neither
/// stalls for more than 20 minutes in the middle of a run (a parent shard's watermark is
/// removed 20 minutes after it last moved).
#[derive(Clone)]
pub struct Rollup {
    pub(super) ddb: Client,
    pub(super) streams: aws_sdk_dynamodbstreams::Client,
    pub(super) config: RollupConfig,
    pub(super) clock: Clock,
}

impl std::fmt::Debug for Rollup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rollup")
            .field("config", &self.config)
            .finish()
    }
}

impl Rollup {
    /// The roll-up of `config` with DynamoDB's and DynamoDB Streams' clients.
    pub fn new(
        ddb: Client,
        streams: aws_sdk_dynamodbstreams::Client,
        config: RollupConfig,
    ) -> Self {
        Rollup {
            ddb: crate::ddb::conflict::retrying_conflicts(ddb),
            streams,
            config,
            clock: Clock::system(),
        }
    }

    /// The same roll-up with another clock (watermark times; tests move time with it).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Read every shard from its checkpoint and apply what it holds, for at most `budget`
    /// (capped at 14 minutes; work in flight finishes). An error stops the run; what it applied stays applied, and
    /// the next run starts from the last checkpoint saved.
    pub async fn run(&self, budget: Duration) -> Result<RollupReport, StoreError> {
        let stop_at = Instant::now() + budget.min(MAX_RUN);
        let arn = self.stream_arn().await?;
        let shards = self.shards(&arn).await?;
        let listed: HashSet<&str> = shards.iter().map(|s| s.id.as_str()).collect();
        let mut done: HashSet<String> = HashSet::new();
        let mut report = RollupReport::default();
        let cost = Cost::default();
        let mut caught_up = true;
        for shard in parents_first(&shards) {
            // A child waits until its parent (if still listed) is read to its end.
            let parent_open = shard
                .parent
                .as_deref()
                .is_some_and(|p| listed.contains(p) && !done.contains(p));
            if parent_open {
                caught_up = false;
                continue;
            }
            let checkpoint = self.checkpoint(&shard.id).await?;
            if checkpoint.done {
                done.insert(shard.id.clone());
                continue;
            }
            if Instant::now() >= stop_at {
                caught_up = false;
                continue;
            }
            report.shards += 1;
            let finished = self
                .read_shard(&arn, shard, checkpoint, stop_at, &mut report, &cost)
                .await?;
            if finished {
                done.insert(shard.id.clone());
            }
        }
        report.caught_up = caught_up && report.failed_items == 0;
        report.write_calls = cost.write_calls();
        report.write_units = cost.billed_write_units();
        Ok(report)
    }

    /// Read one shard to its current end (or `stop_at`), applying every few pages and saving
    /// the checkpoint after each application that left no item failed. `true`: the shard is
    /// closed and read to its end.
    async fn read_shard(
        &self,
        arn: &str,
        shard: &Shard,
        mut checkpoint: Checkpoint,
        stop_at: Instant,
        report: &mut RollupReport,
        cost: &Cost,
    ) -> Result<bool, StoreError> {
        let (mut iterator, trimmed) = self.iterator(arn, &shard.id, &checkpoint).await?;
        if trimmed {
            report.trimmed += 1;
            tracing::error!(
                shard = %shard.id,
                "journal roll-up: the records after the checkpoint have left the stream; \
                 keys journaled then were not counted (their journal items are still in the table)"
            );
        }
        let source = Source::new(
            &self.config.counter.attribute_prefix,
            &shard.id,
            shard.parent.as_deref(),
        );
        let mut shard_age_ms = 0;
        let outcome = loop {
            let mut events = Vec::new();
            let mut last = None;
            let mut pages = 0;
            let mut records = 0;
            let mut journal_records = 0;
            let mut empty = 0;
            while let Some(at) = iterator.take() {
                let page = self.page(at).await?;
                pages += 1;
                empty = if page.records == 0 { empty + 1 } else { 0 };
                records += page.records;
                journal_records += page.journal_records;
                events.extend(page.events);
                last = page.last_seq.or(last);
                if let Some(created) = page.last_created_secs {
                    // The shard's last record read so far: its age is where the shard stands.
                    let created_ms = u64::try_from(created).unwrap_or(0).saturating_mul(1000);
                    shard_age_ms = self.clock.now_ms().saturating_sub(created_ms);
                }
                iterator = page.next;
                if empty == EMPTY_PAGES_AT_END
                    || pages == PAGES_PER_APPLY
                    || Instant::now() >= stop_at
                {
                    break;
                }
            }
            report.records += records;
            report.keys += events.len();
            let failed = self.apply_events(events, &source, report, cost).await;
            if failed > 0 {
                report.failed_items += failed;
                break Ok(false); // read again from the last checkpoint next run
            }
            let closed = iterator.is_none();
            if last.is_some() || closed {
                checkpoint.seq = last.or(checkpoint.seq);
                checkpoint.done = closed;
                if journal_records > 0 || closed {
                    self.save_checkpoint(&shard.id, &checkpoint, cost).await?;
                }
            }
            if closed {
                break Ok(true);
            }
            let at_end = empty == EMPTY_PAGES_AT_END;
            if at_end || journal_records == 0 || Instant::now() >= stop_at {
                break Ok(false);
            }
        };
        report.iterator_age_ms = report.iterator_age_ms.max(shard_age_ms);
        outcome
    }

    /// Apply `events` per counter item; the number of items that failed.
    async fn apply_events(
        &self,
        events: Vec<Event>,
        source: &Source,
        report: &mut RollupReport,
        cost: &Cost,
    ) -> usize {
        let mut by_item: BTreeMap<String, (ItemKey, Vec<Event>)> = BTreeMap::new();
        for event in events {
            by_item
                .entry(event.item.canonical().to_string())
                .or_insert_with(|| (event.item.clone(), Vec::new()))
                .1
                .push(event);
        }
        let results: Vec<Result<ItemApplied, StoreError>> = futures::stream::iter(
            by_item.into_values(),
        )
        .map(|(key, events)| async move { self.apply_item(&key, events, source, cost).await })
        .buffer_unordered(self.config.concurrency.max(1))
        .collect()
        .await;
        let mut failed = 0;
        for result in results {
            match result {
                Ok(applied) => {
                    report.applied += applied.applied;
                    report.duplicates += applied.duplicates;
                    report.item_updates += usize::from(applied.applied > 0);
                }
                Err(err) => {
                    tracing::warn!(error = %err, "journal roll-up: a counter item was not updated");
                    failed += 1;
                }
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, parent: Option<&str>) -> Shard {
        Shard {
            id: id.into(),
            parent: parent.map(str::to_string),
        }
    }

    #[test]
    fn parents_come_before_their_children_whatever_the_listing_order() {
        let shards = [
            shard("c1", Some("b")),
            shard("c2", Some("b")),
            shard("b", Some("a")),
            shard("x", Some("gone")),
            shard("a", None),
        ];
        let order: Vec<&str> = parents_first(&shards)
            .iter()
            .map(|s| s.id.as_str())
            .collect();
        assert_eq!(order, ["a", "b", "c1", "c2", "x"]);
        let at = |id: &str| order.iter().position(|s| *s == id);
        for s in &shards {
            if let Some(parent) = s.parent.as_deref().and_then(&at) {
                assert!(parent < at(&s.id).unwrap_or(0), "{order:?}");
            }
        }
    }
}
