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
//! * a state past [`APPLY_AT_BYTES`] is applied at once (as a final invoke would), and the
//!   window goes on with an empty state: the state never nears Lambda's 1 MB.
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
            report.held = by_item.values().map(|(_, e)| e.len()).sum();
            report.state_bytes = state.len();
            let state = (!by_item.is_empty()).then_some(state);
            return WindowOutcome::Answer { report, state };
        }
        let failed = self.apply_items(by_item, &lanes, &mut report, &cost).await;
        report.write_calls = cost.write_calls();
        report.write_units = cost.billed_write_units();
        match failed.is_empty() {
            true => WindowOutcome::Answer {
                report,
                state: None,
            },
            false => WindowOutcome::Retry { report },
        }
    }
}

/// How many keys a state's text holds (0 when it cannot be read).
fn count_keys(text: &str) -> usize {
    decode(text).map_or(0, |events| events.len())
}
