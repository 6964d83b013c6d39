//! One run of the roll-up: list the shards, read every unfinished one in parallel up to the
//! run's start, apply each counter item's keys of every shard with one update, keep what
//! could not be counted as dead letters, save the checkpoints; again while a pass was cut
//! short by memory and time is left.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::checkpoint::{Checkpoint, Checkpoints};
use super::dead::RollupDeadLetter;
use super::event::{watermark_name, Event};
use super::hold::Pending;
use super::read::{End, Pass, ShardRead};
use super::rollup::{MAX_LISTED, MAX_RUN};
use super::stream::{Shard, Start};
use super::{Rollup, RollupReport};
use crate::ddb::{Cost, ItemKey, StoreError};

/// A done shard's checkpoint is deleted by the journal's TTL this long after it was done: its
/// shard leaves the listing once its last record is trimmed, within 24 hours of closing.
const DONE_CHECKPOINT_TTL_SECS: u64 = 26 * 3600;
/// A moving shard's checkpoint is saved when it is this old (always when the shard is done or
/// first seen), or once [`CHECKPOINT_EVERY_RECORDS`] were read since: between saves, the
/// process reads on from its own position, and a new process reads again at most this much
/// (the watermarks turn those keys away: one failed condition per item it touched, billed by
/// the item's size, however long the stretch). An hour keeps a checkpoint far from the
/// stream's 24-hour trim and costs one write per shard and hour.
pub(super) const CHECKPOINT_EVERY_SECS: u64 = 3600;
/// Records of a shard read by this process since its checkpoint was saved after which it is
/// saved whatever its age: a new process reads at most this many again (50 `GetRecords`).
pub(super) const CHECKPOINT_EVERY_RECORDS: usize = 50_000;

/// One item's update in a pass: its key, the keys that had been held, the shards it touched,
/// what applying did.
type Applied = (
    ItemKey,
    Vec<(Event, u64)>,
    BTreeSet<usize>,
    super::dead::Isolated,
);

/// What the passes of a run learned of each shard.
#[derive(Debug, Default)]
struct Progress {
    ends: HashMap<usize, End>,
    /// Shards that must not move on: a key of theirs failed, or their read did.
    blocked: HashSet<usize>,
    /// Creation time (epoch seconds) of the last record each shard was read to.
    reached: HashMap<usize, u64>,
}

impl Rollup {
    /// Read every shard from its checkpoint and apply what it holds, for at most `budget`
    /// (capped at 14 minutes; work in flight finishes). A failing item or shard never stops
    /// the others: its keys are read again next run. Only a failure to list the stream or
    /// read the checkpoints is an error.
    pub async fn run(&self, budget: Duration) -> Result<RollupReport, StoreError> {
        let stop_at = Instant::now() + budget.min(MAX_RUN);
        let started_ms = self.clock.now_ms();
        let (arn, stream_created_ms) = self.stream_arn().await?;
        let mut checkpoints = self.checkpoints().await?;
        let shards = self.shards_to_read(&arn, &checkpoints).await?;
        let mut report = RollupReport {
            shards_listed: shards.len(),
            ..RollupReport::default()
        };
        let cost = Cost::default();
        // Before the first complete pass, the stream's creation stands for the last one.
        let since_ms = checkpoints.complete_ms.or(stream_created_ms);
        let mut saves =
            self.find_gaps(&shards, &mut checkpoints, since_ms, started_ms, &mut report);
        self.note_states(&shards, &checkpoints);
        let prefix = &self.config.counter.attribute_prefix;
        let names: Vec<String> = shards
            .iter()
            .map(|s| watermark_name(prefix, &s.id))
            .collect();
        let mut todo: Vec<usize> = (0..shards.len())
            .filter(|i| {
                !checkpoints
                    .shards
                    .get(&shards[*i].id)
                    .is_some_and(|c| c.done)
            })
            .collect();
        report.shards = todo.len();
        let mut progress = Progress::default();
        loop {
            report.passes += 1;
            let left = stop_at.saturating_duration_since(Instant::now());
            let pass = Pass {
                snapshot_secs: i64::try_from(started_ms / 1000).unwrap_or(i64::MAX),
                stop_at: Instant::now() + left.mul_f64(0.6),
                room: AtomicUsize::new(self.config.max_events_per_pass.max(1)),
            };
            let reads = self.read_all(&shards, &todo, &checkpoints, &pass).await;
            let read_shards: Vec<usize> = reads.iter().map(|r| r.shard).collect();
            let moved = self
                .apply_pass(
                    reads,
                    &shards,
                    &names,
                    &checkpoints,
                    &mut progress,
                    &mut report,
                    &cost,
                )
                .await;
            for (at, checkpoint) in moved {
                checkpoints
                    .shards
                    .insert(shards[at].id.clone(), checkpoint.clone());
                saves.push((shards[at].id.clone(), checkpoint));
            }
            todo = read_shards
                .into_iter()
                .filter(|at| {
                    progress.ends.get(at) == Some(&End::Budget) && !progress.blocked.contains(at)
                })
                .collect();
            let complete = todo.is_empty() && self.complete(&shards, &checkpoints, &progress);
            let pass_ms = super::checkpoint::pass_record(complete, &mut checkpoints, started_ms);
            if let Err(e) = self
                .save_checkpoints(std::mem::take(&mut saves), pass_ms, &cost)
                .await
            {
                tracing::warn!(error = %e, "journal roll-up: checkpoints not saved (the next run reads again)");
            }
            if todo.is_empty() || Instant::now() >= stop_at {
                break;
            }
        }
        self.close_report(
            &shards,
            &checkpoints,
            &progress,
            started_ms,
            &mut report,
            &cost,
        );
        Ok(report)
    }

    /// Read the shards `todo` (indexes into `shards`) for `pass`, several at once.
    async fn read_all(
        &self,
        shards: &[Shard],
        todo: &[usize],
        checkpoints: &Checkpoints,
        pass: &Pass,
    ) -> Vec<ShardRead> {
        futures::stream::iter(todo.iter().copied())
            .map(|at| {
                let checkpoint = checkpoints
                    .shards
                    .get(&shards[at].id)
                    .cloned()
                    .unwrap_or_default();
                let shard = &shards[at];
                async move {
                    let arn = shard.stream.as_str();
                    self.read_shard(arn, at, shard, &checkpoint, pass).await
                }
            })
            .buffer_unordered(self.config.read_concurrency.max(1))
            .collect()
            .await
    }

    /// Apply one pass's reads; the checkpoints that may move.
    #[allow(clippy::too_many_arguments)]
    async fn apply_pass(
        &self,
        reads: Vec<ShardRead>,
        shards: &[Shard],
        names: &[String],
        checkpoints: &Checkpoints,
        progress: &mut Progress,
        report: &mut RollupReport,
        cost: &Cost,
    ) -> Vec<(usize, Checkpoint)> {
        let ids: Vec<String> = shards.iter().map(|s| s.id.clone()).collect();
        let now_ms = self.clock.now_ms();
        let saving = self.saving(&reads, shards, checkpoints);
        let mut by_item: BTreeMap<String, (ItemKey, Pending)> = self
            .take_held(&ids, checkpoints)
            .into_iter()
            .map(|(item, (key, held))| (item, (key, Pending { new: vec![], held })))
            .collect();
        let mut reads = reads;
        let dead = self.take_in(&mut reads, &ids, checkpoints, progress, report, &mut by_item);
        let (to_apply, held): (Vec<_>, Vec<_>) = by_item
            .into_values()
            .partition(|(_, pending)| !self.holds(pending, &saving, now_ms));
        let results: Vec<Applied> = futures::stream::iter(to_apply)
            .map(|(key, pending)| {
                let events = pending.all();
                let touched: BTreeSet<usize> = events.iter().map(|e| e.shard).collect();
                let ids = &ids;
                async move {
                    let item = self.apply_item(&key, events, ids, names, cost).await;
                    (key, pending.held, touched, item)
                }
            })
            .buffer_unordered(self.config.concurrency.max(1))
            .collect()
            .await;
        let kept = self.count_applied(results, &ids, progress, report, now_ms);
        self.settle_dead(dead, &ids, progress, report, cost).await;
        self.report_dead(kept, report);
        for (key, pending) in held {
            self.keep_held(key, pending, &ids, &progress.blocked, now_ms);
        }
        self.moved_checkpoints(&reads, shards, checkpoints, progress, &saving)
    }

    /// Take in one pass's reads: count them, note each shard's end and failure, report the
    /// records the stream lost, and group the events by item into `by_item`; the records the
    /// journal's writer did not write, as dead letters.
    fn take_in(
        &self,
        reads: &mut [ShardRead],
        ids: &[String],
        checkpoints: &Checkpoints,
        progress: &mut Progress,
        report: &mut RollupReport,
        by_item: &mut BTreeMap<String, (ItemKey, Pending)>,
    ) -> Vec<RollupDeadLetter> {
        let mut dead: Vec<RollupDeadLetter> = Vec::new();
        for read in reads {
            report.records += read.records;
            report.keys += read.events.len();
            progress.ends.insert(read.shard, read.end);
            if let Some(created) = read.last_created {
                progress.reached.insert(read.shard, created);
            }
            if let Some(e) = read.error.take() {
                tracing::warn!(shard = %ids[read.shard], error = %e, "journal roll-up: a shard's read failed");
                progress.blocked.insert(read.shard);
                report.failed_shards += 1;
            }
            if read.start == Start::Trimmed {
                let from = checkpoints
                    .shards
                    .get(&ids[read.shard])
                    .and_then(|c| c.created_secs);
                self.gap(
                    report,
                    Some(&ids[read.shard]),
                    from,
                    read.first_created,
                    "the records after the checkpoint had left the stream",
                );
            }
            for (seq, reason) in read.invalid.drain(..) {
                dead.push(RollupDeadLetter::of_record(
                    &ids[read.shard],
                    &seq,
                    &format!("not a journal record: {reason}"),
                ));
            }
            for event in read.events.drain(..) {
                by_item
                    .entry(event.item.canonical().to_string())
                    .or_insert_with(|| (event.item.clone(), Pending::default()))
                    .1
                    .new
                    .push(event);
            }
        }
        dead
    }

    /// Count what the pass's item updates did; an item whose update failed blocks its shards
    /// and keeps its held keys. The events its isolation refused, as dead letters.
    fn count_applied(
        &self,
        results: Vec<Applied>,
        ids: &[String],
        progress: &mut Progress,
        report: &mut RollupReport,
        now_ms: u64,
    ) -> Vec<RollupDeadLetter> {
        // Refused events were kept as dead letters by their item's isolation.
        let mut kept = Vec::new();
        for (key, was_held, touched, item) in results {
            report.applied += item.applied.applied;
            report.duplicates += item.applied.duplicates;
            report.item_updates += item.applied.updates;
            kept.extend(item.dead);
            if let Some(e) = item.failed {
                tracing::warn!(error = %e, "journal roll-up: a counter item was not updated");
                report.failed_items += 1;
                progress.blocked.extend(touched);
                let pending = Pending {
                    new: vec![],
                    held: was_held,
                };
                self.keep_held(key, pending, ids, &progress.blocked, now_ms);
            }
        }
        kept
    }

    /// Keep the pass's records the journal's writer did not write as dead letters; a shard whose
    /// letters could not be kept does not move.
    async fn settle_dead(
        &self,
        dead: Vec<RollupDeadLetter>,
        ids: &[String],
        progress: &mut Progress,
        report: &mut RollupReport,
        cost: &Cost,
    ) {
        if dead.is_empty() {
            return;
        }
        match self.keep_dead_letters(&dead, cost).await {
            Ok(()) => self.report_dead(dead, report),
            Err(e) => {
                tracing::warn!(error = %e, "journal roll-up: dead letters not kept (read again next run)");
                for letter in &dead {
                    if let Some(at) = ids.iter().position(|id| *id == letter.shard) {
                        progress.blocked.insert(at);
                    }
                }
            }
        }
    }

    /// Log and count dead letters kept.
    fn report_dead(&self, dead: Vec<RollupDeadLetter>, report: &mut RollupReport) {
        for letter in &dead {
            tracing::error!(shard = %letter.shard, seq = %letter.seq, item = ?letter.item, reason = %letter.reason,
                "journal roll-up: a journal record was not counted (kept as a dead letter)");
        }
        report.dead_letters += dead.len();
        let room = MAX_LISTED.saturating_sub(report.letters.len());
        report.letters.extend(dead.into_iter().take(room));
    }

    /// The checkpoints of the shards read that may move (none held back): those of `saving`
    /// (see [`Self::saving`]) not blocked.
    fn moved_checkpoints(
        &self,
        reads: &[ShardRead],
        shards: &[Shard],
        checkpoints: &Checkpoints,
        progress: &Progress,
        saving: &HashSet<usize>,
    ) -> Vec<(usize, Checkpoint)> {
        let now = self.clock.now_secs();
        let mut moved = Vec::new();
        for read in reads {
            if progress.blocked.contains(&read.shard) {
                continue;
            }
            let shard = &shards[read.shard];
            let old = checkpoints
                .shards
                .get(&shard.id)
                .cloned()
                .unwrap_or_default();
            let done = read.end == End::Finished;
            if let Some(seq) = &read.last_seq {
                self.note_position(&shard.id, seq);
            }
            self.unsaved_records(&shard.id, read.records);
            // Decided before the pass's updates (its held keys were applied for it): a save
            // that fell due since waits for the next pass.
            if !saving.contains(&read.shard) {
                continue; // this process reads on from its position
            }
            self.unsaved_records(&shard.id, usize::MAX);
            moved.push((
                read.shard,
                Checkpoint {
                    seq: read.last_seq.clone().or(old.seq),
                    done,
                    created_secs: read.last_created.or(old.created_secs),
                    saved_secs: now,
                    lost: false,
                    ttl_secs: done.then_some(now + DONE_CHECKPOINT_TTL_SECS),
                    stream: Some(shard.stream.clone()),
                },
            ));
        }
        moved
    }

    /// The shards read whose checkpoints are saved after this pass unless blocked: held keys of
    /// theirs are applied in it.
    fn saving(
        &self,
        reads: &[ShardRead],
        shards: &[Shard],
        checkpoints: &Checkpoints,
    ) -> HashSet<usize> {
        let now = self.clock.now_secs();
        let mut saving = HashSet::new();
        for read in reads {
            let id = &shards[read.shard].id;
            let old = checkpoints.shards.get(id).cloned().unwrap_or_default();
            let unsaved = self.unsaved_records(id, 0).saturating_add(read.records);
            if save_due(read, &old, now, unsaved) {
                saving.insert(read.shard);
            }
        }
        saving
    }

    /// Every listed shard done or read as far as the run's start in this run.
    fn complete(&self, shards: &[Shard], checkpoints: &Checkpoints, progress: &Progress) -> bool {
        shards.iter().enumerate().all(|(at, s)| {
            let done = checkpoints.shards.get(&s.id).is_some_and(|c| c.done);
            done || (progress.ends.get(&at).is_some_and(|e| e.caught_up())
                && !progress.blocked.contains(&at))
        })
    }

    fn close_report(
        &self,
        shards: &[Shard],
        checkpoints: &Checkpoints,
        progress: &Progress,
        started_ms: u64,
        report: &mut RollupReport,
        cost: &Cost,
    ) {
        report.caught_up = self.complete(shards, checkpoints, progress)
            && report.failed_items == 0
            && report.failed_shards == 0;
        let now_ms = self.clock.now_ms().max(started_ms);
        for (at, shard) in shards.iter().enumerate() {
            if checkpoints.shards.get(&shard.id).is_some_and(|c| c.done) {
                continue;
            }
            let behind = progress.blocked.contains(&at)
                || !progress.ends.get(&at).is_some_and(|e| e.caught_up());
            if !behind {
                continue;
            }
            let reached = progress.reached.get(&at).copied().or_else(|| {
                checkpoints
                    .shards
                    .get(&shard.id)
                    .and_then(|c| c.created_secs)
            });
            if let Some(secs) = reached {
                report.iterator_age_ms = report
                    .iterator_age_ms
                    .max(now_ms.saturating_sub(secs.saturating_mul(1000)));
            }
        }
        (report.held, report.held_age_ms) = self.held_now(now_ms);
        report.write_calls = cost.write_calls();
        report.write_units = cost.billed_write_units();
    }
}

impl Rollup {
    /// Add `read` to the records of `shard` read since its checkpoint was saved (`usize::MAX`:
    /// it is being saved: start again from 0); the count before a reset.
    fn unsaved_records(&self, shard: &str, read: usize) -> usize {
        let mut unsaved = self.unsaved.lock().unwrap_or_else(|p| p.into_inner());
        let count = unsaved.entry(shard.to_string()).or_insert(0);
        if read == usize::MAX {
            return std::mem::take(count);
        }
        *count = count.saturating_add(read);
        *count
    }
}

/// Whether the checkpoint of `read`'s shard (saved as `old`) is saved after it: the shard is
/// done or first seen, or it moved and the checkpoint is an hour or `unsaved` records old.
fn save_due(read: &ShardRead, old: &Checkpoint, now: u64, unsaved: usize) -> bool {
    let done = read.end == End::Finished;
    let first_seen = old.saved_secs == 0;
    let due = read.journal_records > 0
        && (old.saved_secs + CHECKPOINT_EVERY_SECS <= now || unsaved >= CHECKPOINT_EVERY_RECORDS);
    done || first_seen || due
}
