//! The batch pipeline shared by every writer function: decode → parse → apply → keep what is
//! malformed → answer with a partial batch response, returning a [`BatchReport`] whose summary
//! the caller logs and emits as metrics.
//!
//! Each record ends in exactly one `RecordResult`:
//!
//! | result | reported to Lambda | where it goes |
//! |---|---|---|
//! | `Done(outcome)` (applied, stale, duplicate, superseded, …) | success | the table |
//! | `Rejected(reason)` | success, once kept | the dead-letter table |
//! | `Failed(error)` (transient or configuration) | `batchItemFailures` | retried by Lambda |
//! | `Deferred` (deadline close) | `batchItemFailures` | retried by Lambda |
//!
//! A rejected record whose dead letter cannot be written is turned into `Failed`: nothing is
//! acknowledged before it is either applied or kept.

use dynamo_protocols::{Applied, Deadline, Outcome, Protocol, RecordResult, Rejection, StoreError};
use futures::StreamExt;

use crate::dead_letter::DeadLetters;
use crate::source::{Batch, BatchResponse};
use crate::summary::BatchSummary;

/// How many dead-letter writes run at once.
const DEAD_LETTER_CONCURRENCY: usize = 8;

/// The result of one batch.
#[derive(Debug)]
pub struct BatchReport<O> {
    /// What to answer Lambda.
    pub response: BatchResponse,
    /// Counts.
    pub summary: BatchSummary,
    /// Per-record results in batch order.
    pub results: Vec<RecordResult<O>>,
}

/// Run one batch through a protocol.
pub async fn process_batch<P: Protocol>(
    function: &str,
    batch: &Batch,
    protocol: &P,
    dead_letters: &DeadLetters,
    deadline: Deadline,
) -> BatchReport<P::Outcome> {
    let (mut results, valid) = parse_all(batch, protocol);
    let applied = deadline
        .bound(protocol.apply(valid, deadline))
        .await
        .unwrap_or_else(|| {
            tracing::warn!(function, "cut off at the invocation deadline; the unfinished records are reported for redelivery");
            Applied {
                results: Vec::new(),
                write_calls: 0,
            }
        });
    for (i, result) in applied.results {
        if let Some(slot) = results.get_mut(i) {
            *slot = Some(result);
        }
    }
    // A record the protocol did not answer for was not attempted.
    let mut results: Vec<RecordResult<P::Outcome>> = results
        .into_iter()
        .map(|r| r.unwrap_or(RecordResult::Deferred))
        .collect();
    keep_rejected(function, batch, dead_letters, deadline, &mut results).await;
    let (response, summary) = answer(function, batch, &results, applied.write_calls);
    BatchReport {
        response,
        summary,
        results,
    }
}

/// Parsed records to apply, and a result slot per record (filled for rejected ones).
#[allow(clippy::type_complexity)]
fn parse_all<P: Protocol>(
    batch: &Batch,
    protocol: &P,
) -> (
    Vec<Option<RecordResult<P::Outcome>>>,
    Vec<(usize, P::Record)>,
) {
    let mut results = Vec::with_capacity(batch.records.len());
    let mut valid = Vec::new();
    for (i, record) in batch.records.iter().enumerate() {
        match protocol.parse(&record.body) {
            Ok(parsed) => {
                valid.push((i, parsed));
                results.push(None);
            }
            Err(reason) => results.push(Some(RecordResult::Rejected(reason))),
        }
    }
    (results, valid)
}

/// Keep every rejected record before it is acknowledged; one that cannot be kept fails.
async fn keep_rejected<O>(
    function: &str,
    batch: &Batch,
    dead_letters: &DeadLetters,
    deadline: Deadline,
    results: &mut [RecordResult<O>],
) {
    let rejected: Vec<(usize, Rejection)> = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            RecordResult::Rejected(reason) => Some((i, reason.clone())),
            _ => None,
        })
        .collect();
    let kept: Vec<(usize, Result<(), StoreError>)> = futures::stream::iter(rejected)
        .map(|(i, reason)| async move {
            let record = &batch.records[i];
            tracing::warn!(
                function,
                record_id = %record.position.id,
                source_arn = record.position.source_arn.as_deref().unwrap_or(""),
                shard_id = record.position.shard_id.as_deref().unwrap_or(""),
                reason_code = reason.code.as_str(),
                reason = %reason.message,
                dead_letter_table = dead_letters.table(),
                "record rejected; keeping it as a dead letter"
            );
            let kept = deadline.bound(dead_letters.keep(record, &reason)).await;
            (
                i,
                kept.unwrap_or(Err(StoreError::CutOff("dead letter PutItem"))),
            )
        })
        .buffer_unordered(DEAD_LETTER_CONCURRENCY)
        .collect()
        .await;
    for (i, outcome) in kept {
        if let Err(err) = outcome {
            tracing::error!(function, record_id = %batch.records[i].position.id, error = %err,
                "dead letter could not be written; the record will be delivered again");
            results[i] = RecordResult::Failed(err);
        }
    }
}

/// The partial batch response and the summary counts.
fn answer<O: Outcome>(
    function: &str,
    batch: &Batch,
    results: &[RecordResult<O>],
    write_calls: usize,
) -> (BatchResponse, BatchSummary) {
    let mut summary = BatchSummary {
        records: batch.records.len(),
        write_calls,
        ..BatchSummary::default()
    };
    let mut failed_ids = Vec::new();
    for (record, result) in batch.records.iter().zip(results) {
        *summary.outcomes.entry(result.label()).or_default() += 1;
        match result {
            RecordResult::Failed(err) => {
                tracing::warn!(function, record_id = %record.position.id, error = %err,
                    retryable = err.is_retryable(), "record failed; reporting it for retry");
                failed_ids.push(record.position.id.clone());
            }
            RecordResult::Deferred => failed_ids.push(record.position.id.clone()),
            _ => {}
        }
    }
    summary.reported_failures = failed_ids.len();
    (BatchResponse::new(batch.kind, failed_ids), summary)
}
