//! The batch pipeline shared by every writer function: decode → parse → apply → keep what is
//! malformed → answer with a partial batch response, returning a [`BatchReport`] whose summary
//! the caller logs and emits as metrics.
//!
//! Records rejected at parse time (malformed, too old, an aggregate kept whole) are kept
//! first: beside the apply (unordered) or before it (ordered), never after it, so that their
//! dead letters are not left the time the writes did not use.
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
//! # Layout
//!
//! This module owns what every batch goes through: parsing (a KPL aggregate that cannot be
//! expanded is rejected here, `bad_aggregate`, see [`crate::source::kpl`]; so is a Kafka
//! record that cannot be read, `bad_kafka_record`, see [`crate::source::kafka`]), the choice of
//! route ([`key_of`]), the types the routes share (`Run`, `Slots`, `Parsed`) and the answer
//! (ids in the partial batch response are named once: the user records of one aggregate share
//! it). Then a batch takes one of two routes, child modules that only import from here:
//!
//! * `unordered`: the whole batch in one `apply` of the protocol, the parse-time dead letters
//!   beside it, then the dead letters of what the protocol rejected.
//! * `ordered`: SQS FIFO batches (by message group), Kinesis batches of a protocol that
//!   needs per-key order ([`Protocol::ordered_by_key`], by partition key; Kafka batches by
//!   topic-partition), and every batch of a protocol that is not idempotent under redelivery
//!   ([`Protocol::redelivery`], by shard: a stream batch, or a standard queue's batch, as one
//!   sequence; a Kafka batch as one sequence per topic-partition): a key's records one after
//!   the other, each bounded by the deadline on its own (what finished keeps its result at a
//!   cut-off), each rejected one kept before the key goes on, a failure holding back the
//!   key's later records.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;

use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once::__private::ANSWER_MARGIN;
use dynamodb_exactly_once::batch::{RecordFailure, Redelivery};
use dynamodb_exactly_once::{Deadline, Outcome, Protocol, RecordResult, Rejection, RejectionCode};

use crate::dead_letter::{DeadLetterSink, Disposal};
use crate::source::{kafka, kpl};
use crate::source::{Batch, BatchResponse, SourceKind, SourcePosition, SourceRecord};

mod decoded;
mod ordered;
mod unordered;
pub(crate) mod work;
use crate::summary::BatchSummary;
pub(crate) use decoded::Decoded;
pub(crate) use work::{fifo_or, Work};

/// Whether records older than the protocol's [`Protocol::max_record_age`] are kept as dead
/// letters (`too_old`) instead of applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AgeCheck {
    /// Keep them (deliveries, and replays unless forced).
    Enforce,
    /// Apply them (a forced replay, after an operator checked them).
    Skip,
}

/// The result of one batch.
#[derive(Debug)]
#[must_use = "the report holds the partial batch response to answer Lambda with"]
#[non_exhaustive]
pub struct BatchReport<O> {
    /// What to answer Lambda.
    pub response: BatchResponse,
    /// Counts.
    pub summary: BatchSummary,
    /// Per-record results in batch order.
    pub results: Vec<RecordResult<O>>,
}

/// Run one batch through any unit of work (a protocol, a record handler).
pub(crate) async fn process_work<W: Work>(
    function: &str,
    batch: &Batch,
    work: &W,
    dead_letters: &dyn DeadLetterSink,
    deadline: Deadline,
    ages: AgeCheck,
) -> BatchReport<W::Outcome> {
    let max_age = match ages {
        AgeCheck::Enforce => work.max_record_age(),
        AgeCheck::Skip => None,
    };
    let (slots, valid) = parse_all(batch, work, max_age, ages);
    let run = Run {
        function,
        batch,
        dead_letters,
        deadline,
    };
    let (results, write_calls) = match work.order(batch) {
        Some(key) => ordered::apply(&run, work, key, slots, valid).await,
        None => unordered::apply(&run, work, slots, valid).await,
    };
    let (response, summary) = answer(function, batch, &results, write_calls);
    BatchReport {
        response,
        summary,
        results,
    }
}

/// Work time an invocation keeps at least, when its budget is below the deadline margin.
pub(crate) const MIN_WORK_TIME: Duration = Duration::from_millis(500);

/// The deadline of an invocation whose deadline is `deadline_ms` (epoch ms, as Lambda's
/// context gives it), stopping `margin` before it: when the time left is below `margin` plus
/// [`MIN_WORK_TIME`] (a function timeout too short for its margin), nothing would ever start;
/// that invocation then logs an ERROR naming the function timeout and stops
/// `max(ANSWER_MARGIN, budget / 3)` before the deadline instead.
pub(crate) fn invocation_deadline(function: &str, deadline_ms: u64, margin: Duration) -> Deadline {
    let budget = Duration::from_millis(deadline_ms.saturating_sub(epoch_millis()));
    // `0` is no deadline; a budget (a value too small for an epoch time, from `cargo lambda
    // watch`) is read by `Deadline::from_epoch_ms` itself.
    let epoch = deadline_ms >= 978_307_200_000;
    if !epoch || budget >= margin + MIN_WORK_TIME {
        return Deadline::from_epoch_ms(deadline_ms, margin);
    }
    let reduced = (budget / 3).max(ANSWER_MARGIN).min(margin);
    tracing::error!(
        function,
        budget_ms = budget.as_millis() as u64,
        deadline_margin_ms = margin.as_millis() as u64,
        reduced_margin_ms = reduced.as_millis() as u64,
        "the invocation has {} ms, less than the deadline margin ({} ms) plus {} ms of work: \
         raise the function's timeout (Lambda's Timeout; the default 3 s leaves 1 s) or lower \
         the deadline margin; this invocation stops {} ms before its deadline",
        budget.as_millis(),
        margin.as_millis(),
        MIN_WORK_TIME.as_millis(),
        reduced.as_millis()
    );
    Deadline::from_epoch_ms(deadline_ms, reduced)
}

/// The key records of an ordered batch are ordered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum OrderKey {
    /// SQS FIFO: the `MessageGroupId`.
    MessageGroup,
    /// Kinesis: the partition key.
    PartitionKey,
    /// Kinesis and DynamoDB Streams: the shard (a delivered batch is one shard: the whole
    /// batch in sequence order, as Lambda's restart-from-the-lowest-reported rule needs); a
    /// standard queue's batch is one sequence too. Kafka: the topic-partition (a batch spans
    /// several: each in offset order, a failure holding back its own partition only).
    Shard,
}

impl OrderKey {
    /// The record's key (`None`: a key of its own).
    fn of(self, position: &SourcePosition) -> Option<&str> {
        match self {
            OrderKey::MessageGroup => position.message_group_id.as_deref(),
            OrderKey::PartitionKey => position.partition_key.as_deref(),
            OrderKey::Shard => Some(position.shard_id.as_deref().unwrap_or_default()),
        }
    }
}

/// Whether a batch is an SQS FIFO batch: its queue's ARN ends in `.fifo`. A message group id
/// alone does not make a queue FIFO (a standard queue's fair-queue messages carry one too).
pub(crate) fn is_fifo(batch: &Batch) -> bool {
    batch.kind == SourceKind::Sqs
        && batch.records.iter().any(|r| {
            r.position
                .source_arn
                .as_deref()
                .is_some_and(|arn| arn.ends_with(".fifo"))
        })
}

/// How a batch must be ordered for a protocol (`None`: not at all).
pub(crate) fn key_of<P: Protocol>(batch: &Batch, protocol: &P) -> Option<OrderKey> {
    let otherwise = if protocol.redelivery() != Redelivery::Idempotent {
        Some(OrderKey::Shard)
    } else if batch.kind == SourceKind::Kinesis && protocol.ordered_by_key() {
        Some(OrderKey::PartitionKey)
    } else if batch.kind == SourceKind::Kafka && protocol.ordered_by_key() {
        // A Kafka key lives in one partition: partition order keeps key order.
        Some(OrderKey::Shard)
    } else {
        None
    };
    fifo_or(batch, otherwise)
}

/// How many dead-letter writes run at once.
const DEAD_LETTER_CONCURRENCY: usize = 8;

/// A result slot per record of a batch: filled at parse time for rejected records.
type Slots<O> = Vec<Option<RecordResult<O>>>;

/// Parsed records with their index in the batch.
type Parsed<R> = Vec<(usize, R)>;

/// What one batch run needs besides the protocol.
#[derive(Debug, Clone, Copy)]
struct Run<'a> {
    function: &'a str,
    batch: &'a Batch,
    dead_letters: &'a dyn DeadLetterSink,
    deadline: Deadline,
}

impl Run<'_> {
    /// Keep the rejected record `i` through the dead-letter sink (bounded by the deadline):
    /// `Ok` once kept; `Err` when it must be reported instead (the sink failed, was cut off,
    /// or leaves it to the source: [`RecordFailure::LeftToSource`]).
    async fn keep(&self, i: usize, reason: &Rejection) -> Result<(), RecordFailure> {
        let record = &self.batch.records[i];
        tracing::warn!(
            function = self.function,
            record_id = %record.position.id,
            sub_sequence_number = record.position.sub_record.as_ref().map(|s| s.sub_sequence_number),
            source_arn = record.position.source_arn.as_deref().unwrap_or(""),
            shard_id = record.position.shard_id.as_deref().unwrap_or(""),
            reason_code = reason.code.as_str(),
            reason = %reason.message,
            dead_letters = self.dead_letters.target(),
            "record rejected; giving it to the dead-letter sink"
        );
        let kept = self
            .deadline
            .bound(self.dead_letters.keep(record, reason))
            .await;
        match kept {
            Some(Ok(Disposal::Kept)) => Ok(()),
            Some(Ok(Disposal::LeftToSource)) => {
                tracing::warn!(function = self.function, record_id = %record.position.id,
                    "no dead letter kept here; the record is reported for the source's own dead-letter queue");
                Err(RecordFailure::LeftToSource(reason.clone()))
            }
            Some(Err(err)) => Err(unkept(self.function, record, err)),
            None => Err(unkept(
                self.function,
                record,
                RecordFailure::CutOff("dead letter"),
            )),
        }
    }

    /// Keep every rejected record of `slots` (several at once); one whose dead letter cannot
    /// be written becomes `Failed`.
    async fn keep_rejected<O>(&self, slots: &mut [Option<RecordResult<O>>]) {
        let rejected: Vec<(usize, Rejection)> = slots
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Some(RecordResult::Rejected(reason)) => Some((i, reason.clone())),
                _ => None,
            })
            .collect();
        let unkept: Vec<(usize, RecordFailure)> = futures::stream::iter(rejected)
            .map(|(i, reason)| async move { (i, self.keep(i, &reason).await) })
            .buffer_unordered(DEAD_LETTER_CONCURRENCY)
            .filter_map(|(i, kept)| async move { kept.err().map(|err| (i, err)) })
            .collect()
            .await;
        for (i, err) in unkept {
            slots[i] = Some(RecordResult::Failed(err));
        }
    }
}

/// A dead letter that could not be written: logged, the record reported.
fn unkept(function: &str, record: &SourceRecord, err: RecordFailure) -> RecordFailure {
    tracing::error!(function, record_id = %record.position.id, error = %err,
        "dead letter could not be written; the record will be delivered again");
    err
}

/// Parsed records to apply, and a result slot per record (filled for rejected ones).
fn parse_all<W: Work>(
    batch: &Batch,
    work: &W,
    max_age: Option<Duration>,
    ages: AgeCheck,
) -> (Slots<W::Outcome>, Parsed<W::Record>) {
    let mut results = Vec::with_capacity(batch.records.len());
    let mut valid = Vec::new();
    let now = epoch_millis();
    for (i, record) in batch.records.iter().enumerate() {
        let defect = kpl::defect(record).or_else(|| kafka::defect(record));
        if let Some(reason) = defect.or_else(|| too_old(record, max_age, now)) {
            results.push(Some(RecordResult::Rejected(reason)));
            continue;
        }
        match work.parse(record) {
            Ok(parsed) => {
                let parsed = match (ages, record.position.arrived_at_ms) {
                    (AgeCheck::Enforce, Some(ms)) => work.with_arrival(parsed, ms),
                    _ => parsed,
                };
                valid.push((i, parsed));
                results.push(None);
            }
            Err(reason) => results.push(Some(RecordResult::Rejected(reason))),
        }
    }
    (results, valid)
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
