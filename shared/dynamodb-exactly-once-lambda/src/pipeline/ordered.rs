//! The ordered route: the records of one ordering key applied one after the other, in batch
//! order, and none of them after one that is reported for redelivery.
//!
//! Which batches: an **SQS FIFO** batch (its queue ARN ends in `.fifo`), ordered by message
//! group, whatever the protocol; a **Kinesis** batch of a protocol that asks for it
//! ([`Protocol::ordered_by_key`], e.g. the transaction coordinator), ordered by partition key
//! (a KPL user record's own key); any other batch of a protocol that is not idempotent under
//! redelivery ([`Protocol::redelivery`], the document writer), ordered by shard: the whole
//! batch is one sequence. The parent module chooses ([`key_of`](super::key_of)). Other
//! batches go through the protocol's `apply` whole (`unordered`). The batch
//! [`processor`](crate::processor) uses this route for SQS FIFO batches and for stream
//! batches under its [`StreamOrder`](crate::processor::StreamOrder) (by shard by default).
//!
//! Invariant: within a key, record `n + 1` is started only after record `n` finished, and
//! only if `n` ended applied, decided (stale, duplicate, rolled back, …) or kept as a dead
//! letter. Once a record of a key is reported for redelivery (failed, deferred at the
//! deadline, or rejected but its dead letter could not be written), the key's later records
//! of the batch are not attempted: they are reported too (`held_back`, or `deferred` behind a
//! deferred one). A rejected record counts as handled (it has no effect on the table), and
//! its dead letter is written before the key goes on.
//!
//! With SQS FIFO this is exactly what keeps a group in order: SQS does not deliver a group's
//! later messages while earlier ones are in flight, and the reported messages come back in
//! order. With Kinesis, Lambda restarts the shard from the *lowest* reported sequence number:
//! every record after it is delivered again, also those of other keys that were applied. With
//! per-key order (an idempotent protocol) they apply again as duplicates, and the held-back
//! records of the failed key come back after the one they waited for. With the shard as the
//! key (a protocol that is not idempotent) nothing after the first reported record was
//! applied, so nothing is applied twice.
//!
//! Each record is bounded by the deadline on its own: at a cut-off only the record in flight
//! is lost (deferred; its write may still land), the ones before it keep their results.
//! Exception: the user records of one KPL aggregate share its sequence number, so a user
//! record reported brings back the aggregate's earlier user records too.
//!
//! [`Protocol::ordered_by_key`]: dynamodb_exactly_once::Protocol::ordered_by_key
//! [`Protocol::redelivery`]: dynamodb_exactly_once::Protocol::redelivery
//! [`Protocol::concurrency`]: dynamodb_exactly_once::Protocol::concurrency
//!
//! Cost: keys run concurrently (up to [`Protocol::concurrency`]); each record is one `apply`
//! of one record, except consecutive records of a key that write one item of a protocol that
//! allows it ([`Protocol::coalesce_key`]: the ratchet without history, the counter): those go
//! in one `apply`, one write for the run (a FIFO group of one customer's events is one write
//! per batch, not one per message). A record after a reported one in such a run is reported
//! too (held back), even though it may have been applied: its redelivery is a duplicate.
//!
//! [`Protocol::coalesce_key`]: dynamodb_exactly_once::Protocol::coalesce_key

use dynamodb_exactly_once::batch::RecordFailure;
use dynamodb_exactly_once::RecordResult;
use futures::StreamExt;
use std::collections::HashMap;

use super::{OrderKey, Parsed, Run, Slots, Work};
use crate::source::Batch;

/// One record of a key: rejected at parse time, or parsed and waiting to be applied.
enum Step<R, O> {
    Decided(RecordResult<O>),
    Apply(R),
}

/// One key's records, in batch order.
type Steps<R, O> = Vec<(usize, Step<R, O>)>;

/// One key's results (by batch index) and the write calls it made.
type KeyResults<O> = (Vec<(usize, RecordResult<O>)>, usize);

/// Why a key stopped: what its later records are reported as.
enum Stop {
    /// Deferred at the deadline: the later ones are deferred too.
    Deferred,
    /// Failed: the later ones are held back behind this record id.
    After(String),
}

/// Apply an ordered batch; the results in batch order and the write calls made. Rejected
/// records are kept as dead letters here, each before its key goes on.
pub(super) async fn apply<W: Work>(
    run: &Run<'_>,
    work: &W,
    key: OrderKey,
    mut slots: Slots<W::Outcome>,
    valid: Parsed<W::Record>,
) -> (Vec<RecordResult<W::Outcome>>, usize) {
    // The parse-time rejections first: each is kept before its key reaches it.
    run.keep_rejected(&mut slots).await;
    let groups = group(run.batch, key, slots, valid);
    let done: Vec<KeyResults<W::Outcome>> = futures::stream::iter(groups)
        .map(|steps| run_key(run, work, steps))
        .buffer_unordered(work.concurrency().max(1))
        .collect()
        .await;
    let mut results: Slots<W::Outcome> = (0..run.batch.records.len()).map(|_| None).collect();
    let mut write_calls = 0;
    for (key_results, calls) in done {
        write_calls += calls;
        for (i, result) in key_results {
            results[i] = Some(result);
        }
    }
    let results = results
        .into_iter()
        .map(|r| r.unwrap_or(RecordResult::Deferred))
        .collect();
    (results, write_calls)
}

/// The batch's records by key, keys in order of first appearance, records in batch order.
fn group<R, O>(
    batch: &Batch,
    key: OrderKey,
    slots: Slots<O>,
    valid: Parsed<R>,
) -> Vec<Steps<R, O>> {
    let mut parsed: HashMap<usize, R> = valid.into_iter().collect();
    let mut groups: Vec<Steps<R, O>> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, (slot, record)) in slots.into_iter().zip(&batch.records).enumerate() {
        let step = match (slot, parsed.remove(&i)) {
            (Some(result), _) => Step::Decided(result),
            (None, Some(parsed)) => Step::Apply(parsed),
            (None, None) => Step::Decided(RecordResult::Deferred),
        };
        let at = match key.of(&record.position) {
            Some(k) => *index.entry(k).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            }),
            None => {
                groups.push(Vec::new());
                groups.len() - 1
            }
        };
        groups[at].push((i, step));
    }
    groups
}

/// One key's records in order; the results and the write calls made. Consecutive records
/// with one run key ([`Work::run_key`]) go to the work in one `apply`.
async fn run_key<W: Work>(
    run: &Run<'_>,
    work: &W,
    steps: Steps<W::Record, W::Outcome>,
) -> KeyResults<W::Outcome> {
    let mut out = Vec::with_capacity(steps.len());
    let mut write_calls = 0;
    let mut stop: Option<Stop> = None;
    let mut steps = steps.into_iter().peekable();
    while let Some((i, step)) = steps.next() {
        if let Some(stop) = &stop {
            out.push((i, held_back(stop)));
            continue;
        }
        let results = match step {
            // Decided at parse time; a rejected one is already kept (or failed to be).
            Step::Decided(result) => vec![(i, result)],
            Step::Apply(_) if run.deadline.expired() => vec![(i, RecordResult::Deferred)],
            Step::Apply(record) => {
                let mut records = vec![(i, record)];
                if let Some(key) = work.run_key(&records[0].1) {
                    while let Some((_, Step::Apply(next))) = steps.peek() {
                        if work.run_key(next).as_deref() != Some(key.as_str()) {
                            break;
                        }
                        if let Some((j, Step::Apply(next))) = steps.next() {
                            records.push((j, next));
                        }
                    }
                }
                let (results, calls) = apply_run(run, work, records).await;
                write_calls += calls;
                results
            }
        };
        for (i, result) in results {
            match &stop {
                // Behind a reported record of its own run: applied or not, it comes again
                // (a duplicate then), so that nothing is acknowledged after a reported one.
                Some(stop) => out.push((i, held_back(stop))),
                None => {
                    stop = stop_at(run, i, &result);
                    out.push((i, result));
                }
            }
        }
    }
    (out, write_calls)
}

/// Why the key stops at record `i` with `result`, if it does.
fn stop_at<O>(run: &Run<'_>, i: usize, result: &RecordResult<O>) -> Option<Stop> {
    match result {
        RecordResult::Deferred => Some(Stop::Deferred),
        RecordResult::Failed(_) => {
            let id = run.batch.records[i].position.id.as_str();
            tracing::debug!(function = run.function, record_id = %id,
                "record not applied; the later records of its ordering key are held back");
            Some(Stop::After(id.to_string()))
        }
        _ => None,
    }
}

/// What a record behind a stopped key is reported as.
fn held_back<O>(stop: &Stop) -> RecordResult<O> {
    match stop {
        Stop::Deferred => RecordResult::Deferred,
        Stop::After(id) => RecordResult::Failed(RecordFailure::HeldBack { after: id.clone() }),
    }
}

/// A run of records (one, or consecutive ones of one run key) through the work, bounded by
/// the deadline (cut off: deferred); rejected ones kept in order (a failed keep: failed).
async fn apply_run<W: Work>(
    run: &Run<'_>,
    work: &W,
    records: Vec<(usize, W::Record)>,
) -> (Vec<(usize, RecordResult<W::Outcome>)>, usize) {
    let indices: Vec<usize> = records.iter().map(|(i, _)| *i).collect();
    // Boxed: a protocol's apply future inlined into the invocation's overflows the compiler's
    // layout depth limit (the counter's, with its key-schema check).
    let applied = run
        .deadline
        .bound(Box::pin(work.apply(records, run.deadline)))
        .await;
    let (mut results, calls) = match applied {
        Some(applied) => (applied.results, applied.write_calls),
        None => (Vec::new(), 0),
    };
    let mut out = Vec::with_capacity(indices.len());
    for i in indices {
        let result = results
            .iter()
            .position(|(j, _)| *j == i)
            .map_or(RecordResult::Deferred, |at| results.swap_remove(at).1);
        let result = match result {
            RecordResult::Rejected(reason) => match run.keep(i, &reason).await {
                Ok(()) => RecordResult::Rejected(reason),
                Err(err) => RecordResult::Failed(err),
            },
            other => other,
        };
        out.push((i, result));
    }
    (out, calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::is_fifo;
    use crate::source::{SourceKind, SourcePosition, SourceRecord};
    use dynamodb_exactly_once::{Rejection, RejectionCode};

    fn fifo(groups: &[Option<&str>]) -> Batch {
        let records = groups
            .iter()
            .enumerate()
            .map(|(i, g)| SourceRecord {
                position: SourcePosition {
                    kind: SourceKind::Sqs,
                    source_arn: Some("arn:aws:sqs:us-east-1:1:q.fifo".into()),
                    id: format!("m{i}"),
                    shard_id: None,
                    partition_key: None,
                    message_group_id: g.map(str::to_string),
                    sqs_sequence_number: None,
                    sub_record: None,
                    event_id: None,
                    arrived_at_ms: None,
                    kafka: None,
                },
                body: Vec::new(),
            })
            .collect();
        Batch {
            kind: SourceKind::Sqs,
            records,
        }
    }

    #[test]
    fn records_are_grouped_by_key_in_batch_order() {
        let batch = fifo(&[Some("a"), Some("b"), Some("a"), None, Some("b"), None]);
        assert!(is_fifo(&batch));
        let rejected = Rejection::new(RejectionCode::BadJson, "x");
        let mut slots: Slots<()> = (0..6).map(|_| None).collect();
        slots[2] = Some(RecordResult::Rejected(rejected));
        let valid: Vec<(usize, usize)> = [0, 1, 3, 4, 5].map(|i| (i, i)).to_vec();

        let groups = group(&batch, OrderKey::MessageGroup, slots, valid);

        let shape: Vec<Vec<(usize, bool)>> = groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|(i, s)| (*i, matches!(s, Step::Apply(_))))
                    .collect()
            })
            .collect();
        // a: 0, 2 (rejected at parse, kept in its place); b: 1, 4; each keyless record alone.
        assert_eq!(
            shape,
            [
                vec![(0, true), (2, false)],
                vec![(1, true), (4, true)],
                vec![(3, true)],
                vec![(5, true)],
            ]
        );
    }
}
