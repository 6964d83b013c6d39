//! The batch pipeline shared by every writer function: decode → parse → apply → keep what is
//! malformed → answer with a partial batch response and one summary log line.
//!
//! Each record ends in exactly one [`RecordResult`]:
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

use std::collections::BTreeMap;
use std::future::Future;

use futures::StreamExt;
use serde::Serialize;

use crate::dead_letter::{DeadLetters, Rejection};
use crate::error::StoreError;
use crate::source::{Batch, BatchResponse, Deadline, SourceKind};

/// How many dead-letter writes run at once.
const DEAD_LETTER_CONCURRENCY: usize = 8;

/// A protocol outcome that the summary can count.
pub trait Outcome: std::fmt::Debug + Send {
    /// A stable snake_case label, e.g. `applied`.
    fn label(&self) -> &'static str;
}

/// What happened to one record.
#[derive(Debug)]
pub enum RecordResult<O> {
    /// The protocol decided the record (an expected outcome, not an error).
    Done(O),
    /// The record can never succeed; it is dead-lettered.
    Rejected(Rejection),
    /// A DynamoDB call failed; Lambda should deliver the record again.
    Failed(StoreError),
    /// Not attempted because the invocation deadline is close; delivered again.
    Deferred,
}

impl<O: Outcome> RecordResult<O> {
    /// A label for logs and summaries.
    pub fn label(&self) -> &'static str {
        match self {
            RecordResult::Done(o) => o.label(),
            RecordResult::Rejected(_) => "invalid",
            RecordResult::Failed(_) => "failed",
            RecordResult::Deferred => "deferred",
        }
    }
}

/// What a protocol's batch application returns.
#[derive(Debug)]
pub struct Applied<O> {
    /// One result per input record, by the index it was given.
    pub results: Vec<(usize, RecordResult<O>)>,
    /// DynamoDB write calls made.
    pub write_calls: usize,
}

/// A write protocol driven by the pipeline.
pub trait Protocol: Sync {
    /// A parsed, validated record.
    type Record: Send;
    /// The protocol's outcome type.
    type Outcome: Outcome;

    /// Parse and validate one record body.
    fn parse(&self, body: &[u8]) -> Result<Self::Record, Rejection>;

    /// Apply the valid records of a batch (indices refer to the batch).
    fn apply(
        &self,
        records: Vec<(usize, Self::Record)>,
        deadline: Deadline,
    ) -> impl Future<Output = Applied<Self::Outcome>> + Send;
}

/// Counts for the batch summary line.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct BatchSummary {
    /// Records in the batch.
    pub records: usize,
    /// Records per result label (`applied`, `stale`, `invalid`, `failed`, …).
    pub outcomes: BTreeMap<&'static str, usize>,
    /// DynamoDB write calls made by the protocol (dead letters not included).
    pub write_calls: usize,
    /// Records reported in `batchItemFailures`.
    pub reported_failures: usize,
}

impl BatchSummary {
    /// How many records ended with `label`.
    pub fn count(&self, label: &str) -> usize {
        self.outcomes.get(label).copied().unwrap_or(0)
    }
}

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
    let mut results: Vec<Option<RecordResult<P::Outcome>>> =
        Vec::with_capacity(batch.records.len());
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

    let applied = protocol.apply(valid, deadline).await;
    for (i, result) in applied.results {
        if let Some(slot) = results.get_mut(i) {
            *slot = Some(result);
        }
    }
    let mut results: Vec<RecordResult<P::Outcome>> = results
        .into_iter()
        .map(|r| r.unwrap_or(RecordResult::Deferred))
        .collect();

    // Keep every rejected record before acknowledging it.
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
                reason_code = %reason.code,
                reason = %reason.message,
                dead_letter_table = dead_letters.table(),
                "record rejected; keeping it as a dead letter"
            );
            (i, dead_letters.keep(record, &reason).await)
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

    let mut summary = BatchSummary {
        records: batch.records.len(),
        write_calls: applied.write_calls,
        ..BatchSummary::default()
    };
    let mut failed_ids = Vec::new();
    for (record, result) in batch.records.iter().zip(&results) {
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
    let response = BatchResponse::new(batch.kind, failed_ids);
    log_summary(function, batch.kind, &summary);
    crate::metrics::emit_batch_metrics(function, &summary);
    BatchReport {
        response,
        summary,
        results,
    }
}

fn log_summary(function: &str, kind: SourceKind, s: &BatchSummary) {
    tracing::info!(
        function,
        source = ?kind,
        records = s.records,
        applied = s.count("applied"),
        stale = s.count("stale"),
        duplicate = s.count("duplicate"),
        superseded = s.count("superseded"),
        invalid = s.count("invalid"),
        failed = s.count("failed"),
        deferred = s.count("deferred"),
        write_calls = s.write_calls,
        reported_failures = s.reported_failures,
        outcomes = %serde_json::to_string(&s.outcomes).unwrap_or_default(),
        "batch summary"
    );
}
