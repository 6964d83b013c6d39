//! An unordered batch: the whole batch in one `apply` of the protocol (which orders and
//! coalesces what it needs), then the dead letters of the rejected records, several at once.

use dynamodb_exactly_once::batch::RecordFailure;
use dynamodb_exactly_once::{Applied, Protocol, RecordResult, Rejection};
use futures::StreamExt;

use super::{Parsed, Run, Slots};

/// How many dead-letter writes run at once.
const DEAD_LETTER_CONCURRENCY: usize = 8;

/// The whole batch in one `apply` (the protocol orders what it needs), then the dead letters.
pub(super) async fn apply<P: Protocol>(
    run: &Run<'_>,
    protocol: &P,
    mut slots: Slots<P::Outcome>,
    valid: Parsed<P::Record>,
) -> (Vec<RecordResult<P::Outcome>>, usize) {
    let applied = run
        .deadline
        .bound(protocol.apply(valid, run.deadline))
        .await
        .unwrap_or_else(|| {
            tracing::warn!(function = run.function, "cut off at the invocation deadline; the unfinished records are reported for redelivery");
            Applied {
                results: Vec::new(),
                write_calls: 0,
            }
        });
    for (i, result) in applied.results {
        if let Some(slot) = slots.get_mut(i) {
            *slot = Some(result);
        }
    }
    // A record the protocol did not answer for was not attempted.
    let mut results: Vec<RecordResult<P::Outcome>> = slots
        .into_iter()
        .map(|r| r.unwrap_or(RecordResult::Deferred))
        .collect();
    keep_rejected(run, &mut results).await;
    (results, applied.write_calls)
}

/// Keep every rejected record before it is acknowledged; one that cannot be kept fails.
async fn keep_rejected<O>(run: &Run<'_>, results: &mut [RecordResult<O>]) {
    let rejected: Vec<(usize, Rejection)> = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            RecordResult::Rejected(reason) => Some((i, reason.clone())),
            _ => None,
        })
        .collect();
    let kept: Vec<(usize, Result<(), RecordFailure>)> = futures::stream::iter(rejected)
        .map(|(i, reason)| async move { (i, run.keep(i, &reason).await) })
        .buffer_unordered(DEAD_LETTER_CONCURRENCY)
        .collect()
        .await;
    for (i, outcome) in kept {
        if let Err(err) = outcome {
            results[i] = RecordResult::Failed(err);
        }
    }
}
