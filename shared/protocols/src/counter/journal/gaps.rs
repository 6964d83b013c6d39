//! What a run can tell before it reads anything: records the stream lost (gaps, reported
//! once each with their bounds), and each shard's state for the watermark pruning.

use std::collections::HashSet;

use super::checkpoint::{Checkpoint, Checkpoints};
use super::prune::{states, ShardState};
use super::rollup::{RollupGap, MAX_LISTED};
use super::stream::Shard;
use super::{Rollup, RollupReport};

/// The stream keeps records this long (DynamoDB Streams: 24 hours).
pub(super) const RETENTION_SECS: u64 = 24 * 3600;
/// A stream without a complete pass for longer than this may have lost records unread.
const PASS_ALARM_SECS: u64 = RETENTION_SECS - 3600;

impl Rollup {
    /// Gaps the listing and the checkpoints show before anything is read; the checkpoints to
    /// mark lost (reported once).
    pub(super) fn find_gaps(
        &self,
        shards: &[Shard],
        checkpoints: &mut Checkpoints,
        since_ms: Option<u64>,
        started_ms: u64,
        report: &mut RollupReport,
    ) -> Vec<(String, Checkpoint)> {
        let listed: HashSet<&str> = shards.iter().map(|s| s.id.as_str()).collect();
        let mut lost = Vec::new();
        // Every record created before the last complete pass began was read: an idle shard's
        // last record read can be days older than the gap.
        let floor = since_ms.map(|ms| ms / 1000);
        for (id, c) in checkpoints.shards.iter_mut() {
            if !c.done && !c.lost && !listed.contains(id.as_str()) {
                self.gap(
                    report,
                    Some(id),
                    c.created_secs.max(floor),
                    None,
                    "the shard left the stream before it was read to its end",
                );
                c.lost = true;
                lost.push((id.clone(), c.clone()));
            }
        }
        let Some(since) = since_ms else {
            return lost;
        };
        // A parent the roll-up never saw: it left the stream before any run listed it.
        let old_enough = started_ms.saturating_sub(since) / 1000 > PASS_ALARM_SECS;
        for shard in shards {
            let Some(parent) = shard.parent.as_deref() else {
                continue;
            };
            let unknown = !listed.contains(parent) && !checkpoints.shards.contains_key(parent);
            let first_seen = !checkpoints.shards.contains_key(&shard.id);
            if unknown && first_seen && (checkpoints.complete_ms.is_some() || old_enough) {
                let from = Some(since / 1000);
                self.gap(
                    report,
                    Some(parent),
                    from,
                    None,
                    "a parent shard left the stream unread",
                );
            }
        }
        if old_enough {
            let to = (started_ms / 1000).saturating_sub(RETENTION_SECS);
            let reason = "no complete pass for longer than the stream keeps records";
            self.gap(report, None, Some(since / 1000), Some(to), reason);
        }
        lost
    }

    pub(super) fn gap(
        &self,
        report: &mut RollupReport,
        shard: Option<&str>,
        from: Option<u64>,
        to: Option<u64>,
        reason: &str,
    ) {
        tracing::error!(shard = ?shard, from_secs = ?from, to_secs = ?to, reason,
            "journal roll-up: records left the stream unread; keys journaled then are not counted (see the runbook's repair)");
        report.trimmed += 1;
        if report.gaps.len() < MAX_LISTED {
            report.gaps.push(RollupGap {
                shard: shard.map(str::to_string),
                from_secs: from,
                to_secs: to,
                reason: reason.to_string(),
            });
        }
    }

    /// What the watermark pruning needs to know of every shard.
    pub(super) fn note_states(&self, shards: &[Shard], checkpoints: &Checkpoints) {
        let listed: HashSet<&str> = shards.iter().map(|s| s.id.as_str()).collect();
        let mut known: Vec<(&str, ShardState)> = Vec::new();
        for (id, c) in &checkpoints.shards {
            let state = match (c.done, listed.contains(id.as_str())) {
                (true, _) => ShardState::Done(c.saved_secs),
                (false, true) => ShardState::Active,
                (false, false) => ShardState::Lost,
            };
            known.push((id, state));
        }
        for s in shards
            .iter()
            .filter(|s| !checkpoints.shards.contains_key(&s.id))
        {
            known.push((&s.id, ShardState::Active));
        }
        let view = states(&self.config.counter.attribute_prefix, known);
        *self.states.lock().unwrap_or_else(|p| p.into_inner()) = view;
    }
}
