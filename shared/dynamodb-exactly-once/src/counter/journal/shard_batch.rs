//! The roll-up as the handler of the journal's DynamoDB Streams event source mapping: one
//! shard's batch of stream records, as Lambda delivers it, summed per counter item and applied
//! with one update per item.
//!
//! The mapping owns everything about the stream's position: it reads each shard in lineage
//! order, one batch at a time per shard (or per partition key with `ParallelizationFactor`),
//! checkpoints after each successful batch and delivers the batch again from the lowest
//! sequence number the handler reports as failed. The handler keeps nothing between batches:
//! what makes a batch delivered again (a lost response, a killed or timed-out invocation, a
//! retry after a partial failure) count once is each counter item's **watermark** for the
//! batch's lane (its shard, and the journal key's sub-partition with `journal_spread`):
//! the update is conditioned on it being below the first sequence number applied, and
//! `ALL_OLD` shows which records it had applied already.
//!
//! A record that can never count (an image the journal's writer did not write, a key or delta
//! the counter table refuses, a sum past 38 digits) is a dead letter and the rest of the batch
//! counts. A transient failure (throttling, a dead letter that could not be kept) is reported
//! from the lowest sequence number it concerns: the mapping delivers the batch again from
//! there and the watermarks turn away what was applied.

use std::collections::BTreeMap;

use futures::StreamExt;

use super::dead::RollupDeadLetter;
use super::event::{decode_item, watermark_name, Decoded, Event, Seq};
use super::rollup::MAX_LISTED;
use super::Rollup;
use crate::change::{ChangeKind, ItemChange};
use crate::ddb::{Cost, ItemKey, StoreError};

/// What applying one shard's batch did.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RollupBatchReport {
    /// The shard the batch came from.
    pub shard: String,
    /// Stream records in the batch (any kind).
    pub records: usize,
    /// Journaled keys found (`INSERT`s of journal items).
    pub keys: usize,
    /// Keys added to their counters by this batch.
    pub applied: usize,
    /// Keys an earlier delivery of the same records had applied already.
    pub duplicates: usize,
    /// Counter item updates made.
    pub item_updates: usize,
    /// DynamoDB write requests (updates, dead letters; failed conditions included).
    pub write_calls: u64,
    /// Write units as AWS bills them.
    pub write_units: f64,
    /// Records not counted and kept as dead letters.
    pub dead_letters: usize,
    /// The first dead letters of the batch (at most 20).
    pub letters: Vec<RollupDeadLetter>,
    /// Counter items not updated because of a transient failure.
    pub failed_items: usize,
    /// The lowest sequence number to deliver again (the partial batch response's only
    /// failure); `None`: the whole batch is done.
    pub retry_from: Option<String>,
    /// With a tumbling window ([`Rollup::apply_window`]): keys held in the window's state
    /// after this invocation (read, not yet in the counters).
    pub held: usize,
    /// With a tumbling window: the size of the state answered (bytes; Lambda keeps up to 1 MB
    /// per shard).
    pub state_bytes: usize,
}

/// A batch's journal keys by counter item (canonical key).
pub(super) type ByItem = BTreeMap<String, (ItemKey, Vec<Event>)>;

/// A batch's lanes: the shard id of each (dead letters name it) and its watermark name.
pub(super) type Lanes = (Vec<String>, Vec<String>);

/// Add `event` of `shard` to `by_item`, its lane (`event.shard`) found or added in `lanes`.
pub(super) fn add_event(
    by_item: &mut ByItem,
    lanes: &mut Lanes,
    prefix: &str,
    shard: &str,
    mut event: Event,
) {
    let name = watermark_name(prefix, &lane_of(shard, &event.pk));
    event.shard = match lanes.1.iter().position(|n| *n == name) {
        Some(at) => at,
        None => {
            lanes.0.push(shard.to_string());
            lanes.1.push(name);
            lanes.1.len() - 1
        }
    };
    by_item
        .entry(event.item.canonical().to_string())
        .or_insert_with(|| (event.item.clone(), Vec::new()))
        .1
        .push(event);
}

/// Each item's events in lane, then sequence order (and once each).
pub(super) fn sort_events(by_item: &mut ByItem) {
    for (_, events) in by_item.values_mut() {
        events.sort_by_key(|e| (e.shard, e.seq));
        events.dedup_by_key(|e| (e.shard, e.seq));
    }
}

impl Rollup {
    /// Check that the journal table has the journal's key schema (`pk` and `sk`, both S;
    /// described once per process): the roll-up keeps its dead letters there. Call it before
    /// the first batch; another layout is an error naming what the journal needs.
    pub async fn check_journal(&self) -> Result<(), StoreError> {
        super::write::check_layout(&self.ddb, &self.config.journal_table).await
    }

    /// Apply one shard's batch of journal stream records (`changes`, in the stream's order, as
    /// the event source mapping delivers them). Never an error: what failed is reported in
    /// [`RollupBatchReport::retry_from`].
    pub async fn apply_batch(&self, shard: &str, changes: &[ItemChange]) -> RollupBatchReport {
        let cost = Cost::default();
        let mut report = RollupBatchReport {
            shard: shard.to_string(),
            records: changes.len(),
            ..RollupBatchReport::default()
        };
        let (by_item, lanes, mut failed) = self.prepare(shard, changes, &mut report, &cost).await;
        failed.extend(self.apply_items(by_item, &lanes, &mut report, &cost).await);
        report.retry_from = failed.into_iter().min().map(|seq| {
            changes
                .iter()
                .map(|c| c.sequence_number.as_str())
                .find(|s| Seq::parse(s) == Some(seq))
                .map_or_else(|| format!("{seq:?}"), str::to_string)
        });
        report.write_calls = cost.write_calls();
        report.write_units = cost.billed_write_units();
        report
    }

    /// The batch's keys by item and its lanes, with its foreign records kept as dead letters
    /// (the sequence numbers of those not kept).
    pub(super) async fn prepare(
        &self,
        shard: &str,
        changes: &[ItemChange],
        report: &mut RollupBatchReport,
        cost: &Cost,
    ) -> (ByItem, Lanes, Vec<Seq>) {
        let (by_item, lanes, invalid) = self.group(shard, changes, report);
        let mut failed: Vec<Seq> = Vec::new();
        if !invalid.is_empty() {
            match self.keep_dead_letters(&invalid, cost).await {
                Ok(()) => self.count_letters(invalid, report),
                Err(e) => {
                    tracing::warn!(error = %e, "journal roll-up: dead letters not kept (delivered again)");
                    failed.extend(invalid.iter().filter_map(|l| Seq::parse(&l.seq)));
                }
            }
        }
        (by_item, lanes, failed)
    }

    /// Apply each item's keys with one update (`concurrency` at once); the first sequence
    /// number of each item that failed.
    pub(super) async fn apply_items(
        &self,
        by_item: ByItem,
        lanes: &Lanes,
        report: &mut RollupBatchReport,
        cost: &Cost,
    ) -> Vec<Seq> {
        let (ids, names) = lanes;
        let results: Vec<_> = futures::stream::iter(by_item.into_values())
            .map(|(key, events)| async move {
                let first = events.iter().map(|e| e.seq).min();
                (first, self.apply_item(&key, events, ids, names, cost).await)
            })
            .buffer_unordered(self.config.concurrency.max(1))
            .collect()
            .await;
        let mut failed = Vec::new();
        for (first, out) in results {
            report.applied += out.applied.applied;
            report.duplicates += out.applied.duplicates;
            report.item_updates += out.applied.updates;
            self.count_letters(out.dead, report);
            if let Some(e) = out.failed {
                tracing::warn!(error = %e, "journal roll-up: a counter item was not updated (delivered again)");
                report.failed_items += 1;
                failed.extend(first);
            }
        }
        failed
    }

    /// The batch's journal keys by counter item (each item's sorted by lane, then sequence
    /// number), its lanes (shard ids for dead letters, watermark names), and the records the
    /// journal's writer did not write as dead letters.
    fn group(
        &self,
        shard: &str,
        changes: &[ItemChange],
        report: &mut RollupBatchReport,
    ) -> (ByItem, Lanes, Vec<RollupDeadLetter>) {
        let prefix = &self.config.counter.attribute_prefix;
        let mut lanes: Lanes = (Vec::new(), Vec::new());
        let mut by_item = ByItem::new();
        let mut invalid = Vec::new();
        for change in changes {
            let insert = change.kind == ChangeKind::Insert;
            let seq = change.sequence_number.as_str();
            let decoded = decode_item(
                0,
                seq,
                insert,
                Some(&change.keys),
                change.new_image.as_ref(),
            );
            match decoded {
                Decoded::Event(event) => {
                    report.keys += 1;
                    add_event(&mut by_item, &mut lanes, prefix, shard, *event);
                }
                Decoded::Invalid(reason) => invalid.push(RollupDeadLetter::of_record(
                    shard,
                    seq,
                    &format!("not a journal record: {reason}"),
                )),
                Decoded::Skip | Decoded::Own => {}
            }
        }
        sort_events(&mut by_item);
        (by_item, lanes, invalid)
    }

    /// Log and count dead letters kept.
    fn count_letters(&self, dead: Vec<RollupDeadLetter>, report: &mut RollupBatchReport) {
        for letter in &dead {
            tracing::error!(shard = %letter.shard, seq = %letter.seq, item = ?letter.item, reason = %letter.reason,
                "journal roll-up: a journal record was not counted (kept as a dead letter)");
        }
        report.dead_letters += dead.len();
        let room = MAX_LISTED.saturating_sub(report.letters.len());
        report.letters.extend(dead.into_iter().take(room));
    }
}

/// The lane of a journal key read from `shard`: the shard, and with `journal_spread` the key's
/// sub-partition (`#n` of its partition key). One lane's records of one counter item reach the
/// handler in order, one batch at a time, even with a `ParallelizationFactor` above 1 (Lambda
/// keeps the order per partition key); two sub-partitions of one item in one shard may be in
/// two batches at once, so each has its own watermark.
fn lane_of(shard: &str, journal_pk: &str) -> String {
    match journal_pk.rsplit_once('#') {
        Some((_, sub)) => format!("{shard}#{sub}"),
        None => shard.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lane_is_the_shard_and_the_sub_partition() {
        assert_eq!(lane_of("shardId-1", "AbC"), "shardId-1");
        assert_eq!(lane_of("shardId-1", "AbC#3"), "shardId-1#3");
    }
}
