//! An unordered batch: the whole batch in one `apply` of the protocol (which orders and
//! coalesces what it needs), while the records rejected at parse time are kept as dead
//! letters; then the dead letters of the records the protocol rejected.
//!
//! The parse-time dead letters run beside the apply, not after it, so that they get the whole
//! time budget: a malformed record is kept however long the writes take (on Kinesis, one left
//! unkept at the cut-off would pin the shard's checkpoint on every try).

use dynamodb_exactly_once::{Applied, RecordResult};

use super::{Parsed, Run, Slots, Work};

/// The whole batch in one `apply` (the protocol orders what it needs), beside the parse-time
/// dead letters; then the dead letters of what the protocol rejected.
pub(super) async fn apply<W: Work>(
    run: &Run<'_>,
    work: &W,
    mut slots: Slots<W::Outcome>,
    valid: Parsed<W::Record>,
) -> (Vec<RecordResult<W::Outcome>>, usize) {
    let applying = run
        .deadline
        .bound(Box::pin(work.apply(valid, run.deadline)));
    let (applied, ()) = futures::join!(applying, run.keep_rejected(&mut slots));
    let applied = applied.unwrap_or_else(|| {
        tracing::warn!(function = run.function, "cut off at the invocation deadline; the unfinished records are reported for redelivery");
        Applied::new(Vec::new(), 0)
    });
    let mut from_apply: Slots<W::Outcome> = slots.iter().map(|_| None).collect();
    for (i, result) in applied.results {
        if let Some(slot) = from_apply.get_mut(i) {
            *slot = Some(result);
        }
    }
    run.keep_rejected(&mut from_apply).await;
    // A record is decided at parse time or by the protocol; one the protocol did not answer
    // for was not attempted.
    let results = slots
        .into_iter()
        .zip(from_apply)
        .map(|(parsed, applied)| parsed.or(applied).unwrap_or(RecordResult::Deferred))
        .collect();
    (results, applied.write_calls)
}
