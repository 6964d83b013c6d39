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
//!
//! Ordered batches (SQS FIFO, and Kinesis for a protocol that needs per-key order) go through
//! [`crate::ordering`] instead of one `apply` of the whole batch: a key's records one after the
//! other, a failure holding back the key's later records. A KPL aggregate that cannot be
//! expanded is rejected here (`bad_aggregate`, see [`crate::source::kpl`]). Ids in the
//! partial batch response are named once (the user records of one aggregate share it).

use std::collections::HashSet;
use std::time::Duration;

use dynamodb_exactly_once::ddb::clock::epoch_millis;
use dynamodb_exactly_once::{
    Applied, Deadline, Outcome, Protocol, RecordResult, Rejection, RejectionCode, StoreError,
};
use futures::StreamExt;

use crate::dead_letter::DeadLetters;
use crate::ordering;
use crate::source::dynamodb::decode_change;
use crate::source::kpl;
use crate::source::{Batch, BatchResponse, SourceKind, SourceRecord};
use crate::summary::BatchSummary;

/// Whether records older than the protocol's [`Protocol::max_record_age`] are kept as dead
/// letters (`too_old`) instead of applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgeCheck {
    /// Keep them (deliveries, and replays unless forced).
    Enforce,
    /// Apply them (a forced replay, after an operator checked them).
    Skip,
}

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
    ages: AgeCheck,
) -> BatchReport<P::Outcome> {
    let max_age = match ages {
        AgeCheck::Enforce => protocol.max_record_age(),
        AgeCheck::Skip => None,
    };
    let (slots, valid) = parse_all(batch, protocol, max_age);
    let run = Run {
        function,
        batch,
        dead_letters,
        deadline,
    };
    let (results, write_calls) = match ordering::key_of(batch, protocol) {
        Some(key) => ordering::apply_in_order(&run, protocol, key, slots, valid).await,
        None => apply_unordered(&run, protocol, slots, valid).await,
    };
    let (response, summary) = answer(function, batch, &results, write_calls);
    BatchReport {
        response,
        summary,
        results,
    }
}

/// A result slot per record of a batch: filled at parse time for rejected records.
pub(crate) type Slots<O> = Vec<Option<RecordResult<O>>>;

/// Parsed records with their index in the batch.
pub(crate) type Parsed<R> = Vec<(usize, R)>;

/// What one batch run needs besides the protocol.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run<'a> {
    pub(crate) function: &'a str,
    pub(crate) batch: &'a Batch,
    pub(crate) dead_letters: &'a DeadLetters,
    pub(crate) deadline: Deadline,
}

impl Run<'_> {
    /// Keep the rejected record `i` as a dead letter (bounded by the deadline).
    pub(crate) async fn keep(&self, i: usize, reason: &Rejection) -> Result<(), StoreError> {
        let record = &self.batch.records[i];
        tracing::warn!(
            function = self.function,
            record_id = %record.position.id,
            sub_sequence_number = record.position.sub_record.as_ref().map(|s| s.sub_sequence_number),
            source_arn = record.position.source_arn.as_deref().unwrap_or(""),
            shard_id = record.position.shard_id.as_deref().unwrap_or(""),
            reason_code = reason.code.as_str(),
            reason = %reason.message,
            dead_letter_table = self.dead_letters.table(),
            "record rejected; keeping it as a dead letter"
        );
        let kept = self
            .deadline
            .bound(self.dead_letters.keep(record, reason))
            .await;
        let kept = kept.unwrap_or(Err(StoreError::CutOff("dead letter PutItem")));
        if let Err(err) = &kept {
            tracing::error!(function = self.function, record_id = %record.position.id,
                error = %err, "dead letter could not be written; the record will be delivered again");
        }
        kept
    }
}

/// The whole batch in one `apply` (the protocol orders what it needs), then the dead letters.
async fn apply_unordered<P: Protocol>(
    run: &Run<'_>,
    protocol: &P,
    mut slots: Slots<P::Outcome>,
    valid: Vec<(usize, P::Record)>,
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

/// Parsed records to apply, and a result slot per record (filled for rejected ones).
fn parse_all<P: Protocol>(
    batch: &Batch,
    protocol: &P,
    max_age: Option<Duration>,
) -> (Slots<P::Outcome>, Parsed<P::Record>) {
    let mut results = Vec::with_capacity(batch.records.len());
    let mut valid = Vec::new();
    let now = epoch_millis();
    for (i, record) in batch.records.iter().enumerate() {
        if let Some(reason) = kpl::defect(record).or_else(|| too_old(record, max_age, now)) {
            results.push(Some(RecordResult::Rejected(reason)));
            continue;
        }
        match parse(protocol, record) {
            Ok(parsed) => {
                valid.push((i, parsed));
                results.push(None);
            }
            Err(reason) => results.push(Some(RecordResult::Rejected(reason))),
        }
    }
    (results, valid)
}

/// A record body through the protocol; a DynamoDB stream record as an item change, under the
/// mapping the protocol's settings chose.
fn parse<P: Protocol>(protocol: &P, record: &SourceRecord) -> Result<P::Record, Rejection> {
    match record.position.kind {
        SourceKind::DynamoDb => protocol.parse_change(&decode_change(&record.body)?),
        SourceKind::Kinesis | SourceKind::Sqs => protocol.parse(&record.body),
    }
}

/// A record older than `max_age` since its source received it (unknown arrival: never).
fn too_old(record: &SourceRecord, max_age: Option<Duration>, now_ms: u64) -> Option<Rejection> {
    let max_ms = u64::try_from(max_age?.as_millis()).unwrap_or(u64::MAX);
    let age_ms = now_ms.saturating_sub(record.position.arrived_at_ms?);
    (age_ms > max_ms).then(|| {
        Rejection::new(
            RejectionCode::TooOld,
            format!(
                "the record arrived {} s ago; this protocol applies records up to {} s old \
                 (older ones could undo what it no longer sees). Replay with force after checking",
                age_ms / 1000,
                max_ms / 1000
            ),
        )
    })
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
    let kept: Vec<(usize, Result<(), StoreError>)> = futures::stream::iter(rejected)
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
    let mut named: HashSet<&str> = HashSet::new();
    for (record, result) in batch.records.iter().zip(results) {
        *summary.outcomes.entry(result.label()).or_default() += 1;
        let id = record.position.id.as_str();
        match result {
            RecordResult::Failed(err) => {
                tracing::warn!(function, record_id = %id, error = %err,
                    retryable = err.is_retryable(), "record failed; reporting it for retry");
            }
            RecordResult::Deferred => {}
            _ => continue,
        }
        // The user records of one KPL aggregate share its id: named once.
        if named.insert(id) {
            failed_ids.push(id.to_string());
        }
    }
    summary.reported_failures = failed_ids.len();
    (BatchResponse::new(batch.kind, failed_ids), summary)
}
