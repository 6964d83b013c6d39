//! The hold as the mapping's tumbling window: a window's journal keys travel in the state
//! Lambda keeps with the shard's checkpoint, and are applied at the window's final invoke
//! (`isFinalInvokeForWindow`, also when the window ended early), so that an item's keys of a
//! whole window cost one update. No key waits in a process's memory.
//!
//! Each key is kept whole (its sequence number, journal key, counter item, deltas, first put
//! and arrival times: 25 to 37 bytes in the state's format 2, module `window_state`), so that
//! applying the state is exactly applying a batch of those records: the same watermarks,
//! inline buckets, migration guard, repaired days and dead letters. Exactly once, under the
//! mapping's rules:
//!
//! * a non-final invocation answers the state with the batch's keys added; the mapping keeps it
//!   with the checkpoint past the batch, or, if the answer is lost or the invocation fails,
//!   delivers the batch again with the state it had given (the keys are added once);
//! * a failure while keys are kept (a dead letter not kept) answers the
//!   state as given and the batch's first record as failed: the batch comes again whole;
//! * the final invoke applies the state's keys and its own; a failure there is a function
//!   error, and the mapping invokes it again with the same state: the watermarks turn away
//!   what was applied (each key is compared with its own lane's watermark, so a state that
//!   overlaps what another delivery applied is exact too);
//! * a state past [`APPLY_AT_BYTES`] (not at the window's end) is applied in part at once:
//!   the counter items with the most keys, half the keys or more, each as a final invoke
//!   would; the window goes on with the other items' keys (those whose later keys are the
//!   likeliest to share their update), so the state never nears Lambda's 1 MB. A lost answer
//!   or a failure brings the batch again with the state as given: the watermarks turn away
//!   what was applied.
//!
//! The hold is opt-in (`RollupConfigBuilder::hold_in_window`); without it every invocation
//! applies its keys as a final invoke does, and the state stays empty.
//!
//! Failure modes: a final invoke the mapping gives up on (`MaximumRetryAttempts`) loses the
//! window's keys held before it; its on-failure message (when it had records) names the
//! window's shard and times, and a final invoke without records leaves none: the exactness
//! audit finds those keys (the runbook). A state this version cannot read (formats 1 and 2
//! are read; a later version's format is not) is a function error until a version that reads
//! it runs.

use super::shard_batch::{add_event, sort_events, ByItem, Lanes, RollupBatchReport};
use super::window_state::{decode, encode};
use super::Rollup;
use crate::change::ItemChange;
use crate::ddb::Cost;

/// The entry of the window's state (`HashMap<String, String>`) that holds the keys.
pub const WINDOW_STATE_ENTRY: &str = "journal";
/// A state this large (bytes) is applied at once rather than kept (Lambda ends a window whose
/// state is over 1 MB): a quarter under Lambda's limit, and at the shapes (a shard's
/// 30,000 keys a 15-minute window, 0.95–1.2 MB of state) two parts a window.
pub const APPLY_AT_BYTES: usize = 768 * 1024;

/// What one invocation of a tumbling window did.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum WindowOutcome {
    /// The batch's keys are kept in the state to answer (`None`: an empty state); the report
    /// says what was kept (`held`) and applied.
    Answer {
        /// What the invocation did.
        report: RollupBatchReport,
        /// The state's [`WINDOW_STATE_ENTRY`] to answer (`None`: none).
        state: Option<String>,
    },
    /// Applying the state failed for a transient reason (or the state cannot be read): answer
    /// a function error, so that the mapping invokes again with the same state (the watermarks
    /// turn away what was applied).
    Retry {
        /// What the invocation did.
        report: RollupBatchReport,
    },
}

impl Rollup {
    /// One invocation of the journal's stream mapping with a tumbling window: `changes` of
    /// `shard`, the state's keys `held` (the [`WINDOW_STATE_ENTRY`] of the state given), and
    /// whether this is the window's final invoke. Keys are kept in the state until the final
    /// invoke or until the state reaches [`APPLY_AT_BYTES`]; then they are applied as one
    /// batch. See the module documentation of `window`.
    pub async fn apply_window(
        &self,
        shard: &str,
        changes: &[ItemChange],
        held: Option<&str>,
        final_invoke: bool,
    ) -> WindowOutcome {
        // Without the hold, every invocation applies what it has, as a final invoke does.
        let final_invoke = final_invoke || !self.config.hold_in_window;
        let cost = Cost::default();
        let mut report = RollupBatchReport {
            shard: shard.to_string(),
            records: changes.len(),
            ..RollupBatchReport::default()
        };
        let given = held.filter(|s| !s.is_empty()).map(str::to_string);
        let again = |mut report: RollupBatchReport| {
            report.retry_from = changes.first().map(|c| c.sequence_number.clone());
            report.held = given.as_deref().map_or(0, count_keys);
            report.state_bytes = given.as_deref().map_or(0, str::len);
            WindowOutcome::Answer {
                report,
                state: given.clone(),
            }
        };
        let prefix = self.config.counter.attribute_prefix.clone();
        let mut lanes: Lanes = (Vec::new(), Vec::new());
        let mut by_item = ByItem::new();
        if let Some(state) = &given {
            match decode(state) {
                Ok(events) => {
                    for event in events {
                        add_event(&mut by_item, &mut lanes, &prefix, shard, event);
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "journal roll-up: the window's state cannot be read (delivered again)");
                    return WindowOutcome::Retry { report };
                }
            }
        }
        let (batch, _, failed) = self.prepare(shard, changes, &mut report, &cost).await;
        if !failed.is_empty() {
            return again(report);
        }
        for (_, (_, events)) in batch {
            for event in events {
                add_event(&mut by_item, &mut lanes, &prefix, shard, event);
            }
        }
        sort_events(&mut by_item);
        let state = encode(&by_item);
        if !final_invoke && state.len() < APPLY_AT_BYTES {
            report.held = count(&by_item);
            report.state_bytes = state.len();
            let state = (!by_item.is_empty()).then_some(state);
            return WindowOutcome::Answer { report, state };
        }
        // At the window's end everything; past the threshold the items with the most keys
        // (half the keys), the others kept: their next keys may still share their update.
        let (apply, mut keep) = match final_invoke {
            true => (by_item, ByItem::new()),
            false => largest_half(by_item),
        };
        let mut failed = self.apply_items(apply, &lanes, &mut report, &cost).await;
        let mut state = encode(&keep);
        if failed.is_empty() && state.len() >= APPLY_AT_BYTES {
            // A batch so large that half the keys are still too many: apply them all.
            failed = self.apply_items(keep, &lanes, &mut report, &cost).await;
            keep = ByItem::new();
            state = encode(&keep);
        }
        report.write_calls = cost.write_calls();
        report.write_units = cost.billed_write_units();
        if !failed.is_empty() {
            return WindowOutcome::Retry { report };
        }
        report.held = count(&keep);
        let state = (!keep.is_empty()).then_some(state);
        report.state_bytes = state.as_ref().map_or(0, String::len);
        WindowOutcome::Answer { report, state }
    }
}

/// The keys `by_item` holds.
fn count(by_item: &ByItem) -> usize {
    by_item.values().map(|(_, events)| events.len()).sum()
}

/// The items of `by_item` with the most keys, together half its keys or more (to apply), and
/// the others (to keep).
fn largest_half(by_item: ByItem) -> (ByItem, ByItem) {
    let total = count(&by_item);
    let mut sizes: Vec<(usize, &String)> = by_item
        .iter()
        .map(|(item, (_, events))| (events.len(), item))
        .collect();
    sizes.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let mut taken = 0;
    let mut chosen = std::collections::BTreeSet::new();
    for (n, item) in sizes {
        if 2 * taken >= total {
            break;
        }
        taken += n;
        chosen.insert(item.clone());
    }
    by_item
        .into_iter()
        .partition(|(item, _)| chosen.contains(item))
}

/// How many keys a state's text holds (0 when it cannot be read).
fn count_keys(text: &str) -> usize {
    decode(text).map_or(0, |events| events.len())
}
