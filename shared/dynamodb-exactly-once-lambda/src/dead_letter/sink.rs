//! Where rejected records go: the [`DeadLetterSink`] trait, with two implementations here and
//! a third behind the cargo feature `sqs` (`SqsDeadLetters`: one message per letter on an SQS
//! queue, acknowledged once SQS accepted it; see `dead_letter::sqs`).
//!
//! * [`DeadLetters`]: the dead-letter **table**. The record is kept (payload, reason,
//!   position), then acknowledged: the shard or group goes on, and the letter can be listed
//!   and replayed (`ops dead-letters`).
//! * [`ReportOnly`]: no copy is kept here. The record is logged (WARN, with its reason) and
//!   **reported for redelivery** in `batchItemFailures`, so that the source's own mechanism
//!   takes it: the SQS queue's redrive policy moves it to the queue's dead-letter queue after
//!   `maxReceiveCount` receives; a Kinesis or DynamoDB Streams event source mapping sends the
//!   batch's description to its on-failure destination after `MaximumRetryAttempts` (or
//!   `MaximumRecordAgeInSeconds`) and moves on. Until then the record is delivered again, and
//!   in an ordered batch (an SQS FIFO group, a stream shard in order) it holds back what
//!   follows it, and the held-back records **share its fate**: a stream's event source
//!   mapping discards them with it, never run; a FIFO queue's redrive moves them with it,
//!   unprocessed (they reach `maxReceiveCount` in the same batches). Without such a policy
//!   the record is delivered again until it expires from the source. The
//!   [`Processor`](crate::processor::Processor) refuses ordered stream batches until a sink
//!   is chosen, and [`WriterBuilder::build`](crate::writer::WriterBuilder::build) a protocol
//!   that applies them in order, so `ReportOnly` there is always an explicit choice
//!   (`<PREFIX>_DEAD_LETTER_SINK=report` for a ready function).
//!
//! Invariant for every sink: a rejected record is acknowledged only if its sink answered
//! [`Disposal::Kept`]; an error or [`Disposal::LeftToSource`] reports it for redelivery.

use futures::future::BoxFuture;

use dynamodb_exactly_once::batch::RecordFailure;
use dynamodb_exactly_once::Rejection;

use super::DeadLetters;
use crate::source::SourceRecord;

/// What a sink did with a rejected record.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Disposal {
    /// Kept durably: the record is acknowledged.
    Kept,
    /// Not kept: the record is reported for redelivery, for the source's own dead-letter
    /// queue or on-failure destination ([`RecordFailure::LeftToSource`]).
    LeftToSource,
}

/// Takes the records that can never succeed (see the module documentation).
///
/// Implement it for another destination (S3, an event bus): `keep` returns
/// [`Disposal::Kept`] only once the record is durably stored, and an error
/// ([`RecordFailure::External`] for a failure of another service) when it could not be: the
/// record is then delivered again. `keep` is called within the invocation's deadline and may be
/// cut off; it must be safe to call again for the same record.
pub trait DeadLetterSink: Send + Sync + std::fmt::Debug {
    /// Keep (or not) one rejected record.
    fn keep<'a>(
        &'a self,
        record: &'a SourceRecord,
        reason: &'a Rejection,
    ) -> BoxFuture<'a, Result<Disposal, RecordFailure>>;

    /// Where the letters go, for logs (a table's name, `report-only`).
    fn target(&self) -> &str;
}

impl DeadLetterSink for DeadLetters {
    fn keep<'a>(
        &'a self,
        record: &'a SourceRecord,
        reason: &'a Rejection,
    ) -> BoxFuture<'a, Result<Disposal, RecordFailure>> {
        Box::pin(async move {
            DeadLetters::keep(self, record, reason)
                .await
                .map(|()| Disposal::Kept)
                .map_err(RecordFailure::Store)
        })
    }

    fn target(&self) -> &str {
        self.table()
    }
}

/// No dead letters here: a rejected record is logged and reported for redelivery, so the
/// source's own dead-letter queue or on-failure destination takes it (see the module
/// documentation for what that means per source).
#[derive(Debug, Clone, Copy, Default)]
pub struct ReportOnly;

impl DeadLetterSink for ReportOnly {
    fn keep<'a>(
        &'a self,
        _record: &'a SourceRecord,
        _reason: &'a Rejection,
    ) -> BoxFuture<'a, Result<Disposal, RecordFailure>> {
        Box::pin(async { Ok(Disposal::LeftToSource) })
    }

    fn target(&self) -> &str {
        "report-only"
    }
}
