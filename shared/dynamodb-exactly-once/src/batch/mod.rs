//! Batches of records through a protocol, independent of where they came from.
//!
//! A [`Protocol`] parses a record body (or rejects it with a [`Rejection`]) and applies the
//! valid records of a batch, returning one [`RecordResult`] per record. The Lambda edge
//! (`dynamodb-exactly-once-lambda`) drives this from Kinesis and SQS events; any other consumer (an ECS
//! service, a Kafka consumer, a test) can drive it the same way.
//!
//! Each record ends in exactly one [`RecordResult`]:
//!
//! | result | meaning | a consumer should |
//! |---|---|---|
//! | `Done(outcome)` | decided (applied, stale, duplicate, superseded, …) | acknowledge it |
//! | `Rejected(reason)` | can never succeed | keep it (dead letter), then acknowledge it |
//! | `Failed(failure)` | not decided: a DynamoDB call failed, or the pipeline did not get to it | deliver it again |
//! | `Deferred` | not attempted: the deadline is close | deliver it again |
//!
//! A [`RecordFailure`] is a [`StoreError`] of the record's own write or of a write it shares
//! with other records, or a pipeline state: `CutOff` at the invocation deadline, or
//! `HeldBack` behind an earlier record of its ordering key (see [`Protocol::ordered_by_key`]),
//! labelled `held_back`; or, for code outside this library (a record handler, a dead-letter
//! sink), an `External` error, or a rejection `LeftToSource` (reported instead of kept, for the
//! source's own dead-letter queue), labelled `rejected_reported`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::change::ItemChange;
use crate::ddb::{ErrorClass, StoreError};
use crate::rejection::Rejection;

/// A protocol outcome that a batch summary can count.
pub trait Outcome: std::fmt::Debug + Send {
    /// A stable snake_case label, e.g. `applied`.
    fn label(&self) -> &'static str;
}

/// What happened to one record.
///
/// Exhaustive on purpose: every record of a batch ends in exactly one of these four, and code
/// that answers for a batch (partial batch responses, dead letters) must handle each.
#[derive(Debug)]
#[must_use = "a rejected or failed record must be reported to the source"]
pub enum RecordResult<O> {
    /// The protocol decided the record (an expected outcome, not an error).
    Done(O),
    /// The record can never succeed; it must be kept as a dead letter.
    Rejected(Rejection),
    /// The record was not decided (a DynamoDB call failed, or the pipeline did not get to
    /// it); it must be delivered again.
    Failed(RecordFailure),
    /// Not attempted because the deadline is close; delivered again.
    Deferred,
}

impl<O: Outcome> RecordResult<O> {
    /// A label for logs and summaries.
    pub fn label(&self) -> &'static str {
        match self {
            RecordResult::Done(o) => o.label(),
            RecordResult::Rejected(_) => "invalid",
            RecordResult::Failed(RecordFailure::HeldBack { .. }) => "held_back",
            RecordResult::Failed(RecordFailure::LeftToSource(_)) => "rejected_reported",
            RecordResult::Failed(_) => "failed",
            RecordResult::Deferred => "deferred",
        }
    }
}

/// Why a record was not decided, so that it must be delivered again.
///
/// Its own DynamoDB write failed (`Store`), or a write it shares with other records of the
/// batch (`Shared`), or the batch pipeline stopped before it: `CutOff` at the invocation
/// deadline, `HeldBack` behind an earlier record of its ordering key. The last two are states
/// of the pipeline, not infrastructure errors: they are never a [`StoreError`]. Code outside
/// the library (a record handler, a dead-letter sink) fails with `External`; a rejected record
/// that no sink keeps is `LeftToSource`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordFailure {
    /// A DynamoDB call of this record failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The write this record shares with others (the winner of its key, the chunk of its
    /// item) failed; each of its records holds the one error.
    #[error("the write this record shares failed: {0}")]
    Shared(Arc<StoreError>),
    /// The invocation's deadline came before DynamoDB answered (the call may still land).
    #[error("cut off at the invocation deadline before DynamoDB answered ({0})")]
    CutOff(&'static str),
    /// Not attempted: an earlier record of the same ordering key (an SQS FIFO message group,
    /// a Kinesis partition key of an ordered protocol) was not applied in this batch, so this
    /// one waits for the redelivery, to be applied after it.
    #[error("held back behind record {after} of the same ordering key, which was not applied")]
    HeldBack {
        /// The source id (sequence number or message id) of the record it waits for.
        after: String,
    },
    /// Code outside this library failed for this record and asked for it to be delivered
    /// again: a record handler's transient error, a dead-letter sink that could not keep it.
    #[error("{0}")]
    External(Box<dyn std::error::Error + Send + Sync>),
    /// The record can never succeed, and it is reported instead of kept: the source's own
    /// dead-letter queue (SQS redrive policy) or on-failure destination (Kinesis, DynamoDB
    /// Streams) takes it once its retries are exhausted.
    #[error("rejected, left to the source's dead-letter queue: {0}")]
    LeftToSource(Rejection),
}

impl RecordFailure {
    /// How this failure should be handled: the store error's class; `Transient` for a record
    /// cut off or held back, and for an external error; `InvalidRequest` for a rejection left
    /// to the source.
    pub fn class(&self) -> ErrorClass {
        match self {
            RecordFailure::Store(err) => err.class(),
            RecordFailure::Shared(err) => err.class(),
            RecordFailure::CutOff(_)
            | RecordFailure::HeldBack { .. }
            | RecordFailure::External(_) => ErrorClass::Transient,
            RecordFailure::LeftToSource(_) => ErrorClass::InvalidRequest,
        }
    }

    /// Whether delivering the record again may succeed.
    pub fn is_retryable(&self) -> bool {
        self.class() == ErrorClass::Transient
    }

    /// The store error behind this failure (`None`: cut off, held back, external or left to
    /// the source).
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            RecordFailure::Store(err) => Some(err),
            RecordFailure::Shared(err) => Some(err),
            RecordFailure::CutOff(_)
            | RecordFailure::HeldBack { .. }
            | RecordFailure::External(_)
            | RecordFailure::LeftToSource(_) => None,
        }
    }

    /// The store error behind this failure, owned: a shared one once this is its last holder
    /// (`Err(self)` otherwise, and for a record cut off or held back).
    pub fn into_store_error(self) -> Result<StoreError, Self> {
        match self {
            RecordFailure::Store(err) => Ok(err),
            RecordFailure::Shared(err) => Arc::try_unwrap(err).map_err(RecordFailure::Shared),
            other => Err(other),
        }
    }
}

impl StoreError {
    /// This error as the failure of one record of a shared write (every record of a failed
    /// chunk or key group holds a [`RecordFailure::Shared`] of the same error).
    pub fn shared(self: &Arc<Self>) -> RecordFailure {
        RecordFailure::Shared(Arc::clone(self))
    }
}

/// What a protocol's batch application returns.
#[non_exhaustive]
#[derive(Debug)]
#[must_use = "the results say which records were applied, rejected or must be delivered again"]
pub struct Applied<O> {
    /// One result per input record, by the index it was given.
    pub results: Vec<(usize, RecordResult<O>)>,
    /// DynamoDB write calls made.
    pub write_calls: usize,
}

impl<O> Applied<O> {
    /// The results of a batch (one per input record, by its index) and the write calls made.
    pub fn new(results: Vec<(usize, RecordResult<O>)>, write_calls: usize) -> Self {
        Applied {
            results,
            write_calls,
        }
    }
}

/// A write protocol applied to batches.
pub trait Protocol: Sync {
    /// A parsed, validated record.
    type Record: Send;
    /// The protocol's outcome type.
    type Outcome: Outcome;

    /// Parse and validate one record body.
    fn parse(&self, body: &[u8]) -> Result<Self::Record, Rejection>;

    /// Parse one record body delivered under `delivery`, a stable identity of the record in
    /// its source (the stream, shard and sequence number, or the queue and message id): the
    /// same on every redelivery of the record. The default ignores it. A protocol that is not
    /// idempotent under redelivery ([`Protocol::redelivery`]) derives its op tokens from it,
    /// so that a redelivered record whose write landed unanswered is recognised.
    fn parse_delivered(&self, body: &[u8], delivery: &str) -> Result<Self::Record, Rejection> {
        let _ = delivery;
        self.parse(body)
    }

    /// Map one item change (a DynamoDB stream record) to a record, under the mapping the
    /// protocol's settings chose. The default takes none (`no_change_mapping`).
    fn parse_change(&self, change: &ItemChange) -> Result<Self::Record, Rejection> {
        let _ = change;
        Err(crate::change::no_change_mapping(
            "a change mapping of this protocol",
        ))
    }

    /// The oldest record (since its source received it) this protocol applies safely: an older
    /// one may undo what it cannot see any more (a ratchet put whose item's tombstone expired
    /// revives it; a counter delta whose key left the window counts twice). The Lambda edge
    /// keeps such records as dead letters (`too_old`). `None`: no limit.
    fn max_record_age(&self) -> Option<Duration> {
        None
    }

    /// The record `record` with the time its source received it (`arrived_ms`, epoch ms), for
    /// a protocol whose stored state says how old a record it still applies safely (the
    /// counter: what its items forgot). The Lambda edge calls it after a successful parse
    /// whenever the arrival time is known and ages are enforced (not for a forced replay).
    /// The default ignores it.
    fn with_arrival(&self, record: Self::Record, arrived_ms: u64) -> Self::Record {
        let _ = arrived_ms;
        record
    }

    /// Whether records sharing a source ordering key (a Kinesis partition key) must be applied
    /// in source order: the Lambda edge then applies a key's records one after the other and,
    /// after one of them is reported for redelivery, holds back the key's later records of
    /// the batch (reported, not applied). Other keys go on. Needed where the effect of a
    /// record depends on the ones before it on the same key (the transaction coordinator: a
    /// transfer must not overtake an earlier one of its account). SQS FIFO batches are always
    /// applied that way, by message group, whatever this says. Default: `false`.
    fn ordered_by_key(&self) -> bool {
        false
    }

    /// What applying a record a second time does (Kinesis and DynamoDB Streams re-send every
    /// record after the lowest one reported; a cut-off write may have landed). An
    /// [`Redelivery::Idempotent`] protocol absorbs it; for any other answer the Lambda edge
    /// applies a batch in source order, one record at a time, and stops at the first one
    /// reported for retry, so that no record is applied before one that will come back.
    /// Default: `Idempotent`.
    fn redelivery(&self) -> Redelivery {
        Redelivery::Idempotent
    }

    /// The item a record writes, when consecutive records of one ordering key (an SQS FIFO
    /// group, a Kinesis partition key) that write the same item may be applied together, in
    /// one `apply`: the protocol writes such a run in one step per item, its result for an
    /// earlier record never depends on a later one, and its `apply` keeps finished results at
    /// a cut-off. The Lambda edge then coalesces them (one write instead of one per record)
    /// and still reports every record after the first one it reports. `None` (the default):
    /// one record per `apply` on an ordered route.
    fn coalesce_key(&self, _record: &Self::Record) -> Option<String> {
        None
    }

    /// How many independent units (items, transactions, ordered keys) a batch works on at
    /// once. Default: 1.
    fn concurrency(&self) -> usize {
        1
    }

    /// Apply the valid records of a batch (indices refer to the batch).
    fn apply(
        &self,
        records: Vec<(usize, Self::Record)>,
        deadline: Deadline,
    ) -> impl Future<Output = Applied<Self::Outcome>> + Send;
}

/// What applying an already applied record again does: see [`Protocol::redelivery`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Redelivery {
    /// Nothing: it is decided as a duplicate, or writes the same state again (ratchet,
    /// counter, transactions).
    Idempotent,
    /// Its effect again (a plain list append), unless something else recognises it: records
    /// must be applied in source order and none after one that will be delivered again
    /// (document).
    Ordered,
}

/// Time kept to answer the invocation after work in flight is abandoned.
#[doc(hidden)]
pub const ANSWER_MARGIN: Duration = Duration::from_millis(250);

/// How much earlier than the batch a part of it (one item's writes) is cut off: the parts end
/// first, so every part that finished keeps its result when the batch's own bound comes.
#[doc(hidden)]
pub const PART_MARGIN: Duration = Duration::from_millis(50);

/// When a batch must stop starting new work, and when work in flight must be abandoned.
///
/// Built from the invocation deadline: new work stops `margin` before it
/// ([`Deadline::expired`]); calls still in flight (a stalled response, a slow retry) are cut
/// off [`ANSWER_MARGIN`] before it ([`Deadline::bound`]), so that the partial batch response is
/// always sent and what did not finish is reported, never lost. [`Deadline::none`] never
/// expires.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    stop_at: Option<SystemTime>,
    cutoff: Option<SystemTime>,
}

impl Deadline {
    /// No deadline.
    pub fn none() -> Self {
        Deadline {
            stop_at: None,
            cutoff: None,
        }
    }

    /// Stop `margin` before the deadline given in epoch milliseconds (`0`: none).
    ///
    /// A value too small to be an epoch time (before 2001) is read as a budget in milliseconds
    /// from now: `cargo lambda watch` sends the function timeout (e.g. `600000`) that way.
    pub fn from_epoch_ms(deadline_ms: u64, margin: Duration) -> Self {
        const EPOCH_2001_MS: u64 = 978_307_200_000;
        if deadline_ms == 0 {
            return Self::none();
        }
        let at = if deadline_ms < EPOCH_2001_MS {
            SystemTime::now() + Duration::from_millis(deadline_ms)
        } else {
            UNIX_EPOCH + Duration::from_millis(deadline_ms)
        };
        let before = |d: Duration| Some(at.checked_sub(d).unwrap_or(UNIX_EPOCH));
        Deadline {
            stop_at: before(margin),
            cutoff: before(margin.min(ANSWER_MARGIN)),
        }
    }

    /// Stop starting new work after `after` from now (work in flight is never cut off).
    pub fn after(after: Duration) -> Self {
        Deadline {
            stop_at: Some(SystemTime::now() + after),
            cutoff: None,
        }
    }

    /// Whether new work must not be started any more.
    pub fn expired(&self) -> bool {
        self.stop_at.is_some_and(|at| SystemTime::now() >= at)
    }

    /// Time left before work in flight must be abandoned (`None`: never).
    pub fn cutoff_in(&self) -> Option<Duration> {
        self.cutoff.map(|at| {
            at.duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
        })
    }

    /// When work in flight is cut off, epoch milliseconds (`None`: never): the last moment
    /// work started under this deadline can still be running (the idempotency layer holds a
    /// record's key in progress until then).
    pub fn cutoff_epoch_ms(&self) -> Option<u64> {
        self.cutoff.map(|at| {
            let ms = at
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            u64::try_from(ms).unwrap_or(u64::MAX)
        })
    }

    /// Run `work` until it finishes or the cutoff comes (`None`: cut off, and every result of
    /// `work` is lost). A cut-off DynamoDB call may still land while the records it carried
    /// are reported for redelivery: harmless for an idempotent protocol; a protocol that is not
    /// ([`Protocol::redelivery`]) must recognise the landed write by other means (the Lambda
    /// edge bounds one record at a time for it, so only that record is in doubt).
    pub async fn bound<F: Future>(&self, work: F) -> Option<F::Output> {
        match self.cutoff_in() {
            None => Some(work.await),
            Some(left) => tokio::time::timeout(left, work).await.ok(),
        }
    }

    /// Like [`Deadline::bound`] for one part of a batch (see [`Deadline::bound_part`]): the
    /// part's results, or its records reported [`RecordFailure::CutOff`] at `operation`.
    pub(crate) async fn bound_records<O, F>(
        &self,
        indices: Vec<usize>,
        operation: &'static str,
        work: F,
    ) -> Vec<(usize, RecordResult<O>)>
    where
        F: Future<Output = Vec<(usize, RecordResult<O>)>>,
    {
        match self.bound_part(work).await {
            Some(results) => results,
            None => indices
                .into_iter()
                .map(|i| (i, RecordResult::Failed(RecordFailure::CutOff(operation))))
                .collect(),
        }
    }

    /// Like [`Deadline::bound`] for one part of a batch (one item's writes, run beside the
    /// others), [`PART_MARGIN`] earlier: the protocol reports the cut-off part's records as
    /// [`RecordFailure::CutOff`] while the parts that finished keep their results.
    pub async fn bound_part<F: Future>(&self, work: F) -> Option<F::Output> {
        match self.cutoff_in() {
            None => Some(work.await),
            Some(left) => tokio::time::timeout(left.saturating_sub(PART_MARGIN), work)
                .await
                .ok(),
        }
    }
}

/// `records` split into those whose key fits `table`'s key schema (described once per
/// process) and the others' results: `invalid_key` rejections naming the reason, or every
/// record failed when the table cannot be described.
pub(crate) async fn fitting_keys<R, O>(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    records: Vec<(usize, R)>,
    key: impl Fn(&R) -> &crate::ddb::ItemKey,
) -> (Vec<(usize, R)>, Vec<(usize, RecordResult<O>)>) {
    let refuse = |reason: String| {
        let code = crate::rejection::RejectionCode::InvalidKey;
        RecordResult::Rejected(Rejection::new(code, reason))
    };
    let fail = |err| RecordResult::Failed(RecordFailure::Shared(err));
    crate::ddb::schema::split_fitting(client, table, records, key, refuse, fail).await
}

#[cfg(test)]
mod tests;
