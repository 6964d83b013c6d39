//! Reading one shard for one pass of a run: from its checkpoint (or the iterator this
//! process kept) up to the run's snapshot (a record created after the run started), the
//! shard's end (closed), its current tip (open; empty pages), the pass's time or its memory
//! bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::checkpoint::Checkpoint;
use super::event::{Decoded, Event};
use super::stream::{Shard, Start};
use super::Rollup;
use crate::ddb::StoreError;

/// Empty pages in a row after which an open shard is taken to be at its tip for this run
/// (AWS: "it might take multiple calls to get to a portion of the shard that contains stream
/// records"; the iterator reached is kept for the next run, so progress through empty
/// portions is never lost while the process lives).
pub(super) const EMPTY_PAGES_AT_TIP: usize = 5;
/// The same from an iterator this process kept at the shard's tip in its last run (it is past
/// the empty portions it followed then).
const EMPTY_PAGES_AT_KEPT_TIP: usize = 2;
/// `LimitExceededException`s of one shard's reads waited out before the shard stops for the
/// pass (after the SDK's own retries).
const THROTTLE_RETRIES: usize = 5;
/// A kept iterator is used for at most this long (DynamoDB Streams' expire after 15 minutes).
const KEPT_ITERATOR_LIFE: Duration = Duration::from_secs(10 * 60);

/// Why a shard's read ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// Closed and read to its end.
    Finished,
    /// A record created after the run started: everything before it is read.
    Snapshot,
    /// Open, and empty pages: read to its current end.
    Tip,
    /// The pass's time or memory ran out first.
    Budget,
    /// A call failed (after retries).
    Failed,
}

impl End {
    /// Read as far as this run needs.
    pub(super) fn caught_up(self) -> bool {
        matches!(self, End::Finished | End::Snapshot | End::Tip)
    }
}

/// What a pass read of one shard.
#[derive(Debug)]
pub(super) struct ShardRead {
    pub(super) shard: usize,
    pub(super) events: Vec<Event>,
    /// Records the journal's writer did not write: sequence number and reason.
    pub(super) invalid: Vec<(String, String)>,
    pub(super) records: usize,
    /// Records of the journal's keys (any kind), not of the roll-up's own items.
    pub(super) journal_records: usize,
    pub(super) last_seq: Option<String>,
    pub(super) last_created: Option<u64>,
    pub(super) first_created: Option<u64>,
    pub(super) start: Start,
    pub(super) end: End,
    pub(super) error: Option<StoreError>,
}

/// The bounds of one pass, shared by its readers.
#[derive(Debug)]
pub(super) struct Pass {
    /// Records created after this (epoch seconds) belong to the next run.
    pub(super) snapshot_secs: i64,
    pub(super) stop_at: Instant,
    /// Events the pass may still hold in memory.
    pub(super) room: AtomicUsize,
}

impl Pass {
    fn over(&self) -> bool {
        Instant::now() >= self.stop_at || self.room.load(Ordering::Relaxed) == 0
    }
}

/// Iterators this process reached at open shards' tips, by shard: (the position they follow,
/// the iterator, when it was obtained).
pub(super) type KeptIterators = Mutex<HashMap<String, (Option<String>, String, Instant)>>;

impl Rollup {
    /// Read `shard` (index `at`) from `checkpoint` for `pass`.
    pub(super) async fn read_shard(
        &self,
        arn: &str,
        at: usize,
        shard: &Shard,
        checkpoint: &Checkpoint,
        pass: &Pass,
    ) -> ShardRead {
        let mut read = ShardRead {
            shard: at,
            events: Vec::new(),
            invalid: Vec::new(),
            records: 0,
            journal_records: 0,
            last_seq: None,
            last_created: None,
            first_created: None,
            start: Start::AfterCheckpoint,
            end: End::Budget,
            error: None,
        };
        let start = self.start_position(&shard.id, checkpoint);
        let kept = self.kept_iterator(&shard.id, start.as_deref());
        let at_tip = match kept {
            Some(_) => EMPTY_PAGES_AT_KEPT_TIP,
            None => EMPTY_PAGES_AT_TIP,
        };
        let mut iterator = match kept {
            Some(kept) => Some(kept),
            None => match self.iterator(arn, &shard.id, start.as_deref()).await {
                Ok((iterator, how)) => {
                    read.start = how;
                    iterator
                }
                Err(e) => return read.failed(e),
            },
        };
        let (mut empties, mut throttles, mut renewed) = (0, 0, false);
        loop {
            let Some(position) = iterator.take() else {
                read.end = End::Finished;
                break;
            };
            if pass.over() {
                break;
            }
            let page = match self.page(at, position.clone()).await {
                Ok(page) => page,
                Err(None) if !renewed => {
                    // Expired: again after the last record read (or the checkpoint).
                    renewed = true;
                    let after = read.last_seq.clone().or_else(|| start.clone());
                    match self.iterator(arn, &shard.id, after.as_deref()).await {
                        Ok((next, _)) => iterator = next,
                        Err(e) => return read.failed(e),
                    }
                    continue;
                }
                Err(None) => {
                    return read.failed(StoreError::Inconsistent(format!(
                        "shard {}: iterators keep expiring",
                        shard.id
                    )))
                }
                Err(Some(e)) if throttled(&e) && throttles < THROTTLE_RETRIES => {
                    throttles += 1;
                    tokio::time::sleep(Duration::from_millis(25 << throttles)).await;
                    iterator = Some(position);
                    continue;
                }
                Err(Some(e)) => return read.failed(e),
            };
            let empty = page.records.is_empty();
            if read.take(page.records, pass) {
                read.end = End::Snapshot;
                break;
            }
            iterator = page.next;
            empties = if empty { empties + 1 } else { 0 };
            if empty && iterator.is_some() && !shard.closed && empties >= at_tip {
                read.end = End::Tip;
                self.keep_iterator(
                    &shard.id,
                    read.last_seq.clone().or_else(|| start.clone()),
                    iterator.take(),
                );
                break;
            }
        }
        read
    }

    /// Where to read `shard` from: this process's position when it is past the checkpoint
    /// (checkpoints are saved at most every [`super::pass::CHECKPOINT_EVERY_SECS`]), else the
    /// checkpoint.
    fn start_position(&self, shard: &str, checkpoint: &Checkpoint) -> Option<String> {
        let positions = self.positions.lock().unwrap_or_else(|p| p.into_inner());
        let ours = positions.get(shard).cloned();
        let order = |s: &Option<String>| s.as_deref().and_then(super::event::Seq::parse);
        match (order(&ours), order(&checkpoint.seq)) {
            (Some(a), Some(b)) if a > b => ours,
            (Some(_), None) => ours,
            _ => checkpoint.seq.clone(),
        }
    }

    /// Remember that `shard` was read and applied up to `seq` (the next run of this process
    /// starts there).
    pub(super) fn note_position(&self, shard: &str, seq: &str) {
        let mut positions = self.positions.lock().unwrap_or_else(|p| p.into_inner());
        positions.insert(shard.to_string(), seq.to_string());
    }

    fn kept_iterator(&self, shard: &str, after: Option<&str>) -> Option<String> {
        let mut kept = self.iterators.lock().unwrap_or_else(|p| p.into_inner());
        let (seq, iterator, at) = kept.remove(shard)?;
        (seq.as_deref() == after && at.elapsed() < KEPT_ITERATOR_LIFE).then_some(iterator)
    }

    fn keep_iterator(&self, shard: &str, after: Option<String>, iterator: Option<String>) {
        let Some(iterator) = iterator else { return };
        let mut kept = self.iterators.lock().unwrap_or_else(|p| p.into_inner());
        kept.insert(shard.to_string(), (after, iterator, Instant::now()));
    }
}

impl ShardRead {
    fn failed(mut self, error: StoreError) -> ShardRead {
        self.end = End::Failed;
        self.error = Some(error);
        self
    }

    /// Take a page's records up to the snapshot; `true` when a record past it was met.
    fn take(&mut self, records: Vec<(String, Option<i64>, Decoded)>, pass: &Pass) -> bool {
        for (seq, created, decoded) in records {
            if created.is_some_and(|c| c > pass.snapshot_secs) {
                return true;
            }
            let created = created.and_then(|c| u64::try_from(c).ok());
            self.records += 1;
            self.journal_records += usize::from(decoded != Decoded::Own);
            self.last_seq = Some(seq.clone());
            self.last_created = created.or(self.last_created);
            if self.first_created.is_none() {
                self.first_created = created;
            }
            match decoded {
                Decoded::Event(event) => {
                    self.events.push(*event);
                    let _ = pass
                        .room
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                            Some(n.saturating_sub(1))
                        });
                }
                Decoded::Invalid(reason) => self.invalid.push((seq, reason)),
                Decoded::Skip | Decoded::Own => {}
            }
        }
        false
    }
}

/// A throttle the SDK's retries did not outlast.
fn throttled(e: &StoreError) -> bool {
    matches!(e, StoreError::Sdk { code, .. } if code.contains("LimitExceeded") || code.contains("Throttl"))
}
