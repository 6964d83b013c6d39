//! A record handler as the pipeline's unit of work: records decoded (serde JSON, bytes, text,
//! your decoder), run concurrently up to a limit, each bounded by the deadline on its own,
//! panics caught.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use lambda_runtime::Context;
use serde::de::DeserializeOwned;

use dynamodb_exactly_once::batch::RecordFailure;
use dynamodb_exactly_once::{Applied, Deadline, Outcome, RecordResult, Rejection, RejectionCode};

use dynamodb_exactly_once::__private::bounded;

use super::record::{Record, RecordError, MAX_REASON_CHARS};
use super::StreamOrder;
use crate::pipeline::{fifo_or, OrderKey, Work};
use crate::source::{Batch, RecordMetadata, SourceKind, SourceRecord};

/// A user's record handler, boxed.
pub(super) type Handler<T> =
    Arc<dyn Fn(Record<T>) -> BoxFuture<'static, Result<(), RecordError>> + Send + Sync>;

/// What a record the handler finished ended in.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Handled {
    /// The handler returned `Ok`: the record is acknowledged.
    Processed,
    /// The handler returned [`RecordError::Completed`]: the record's work completed in an
    /// earlier delivery; acknowledged.
    CompletedEarlier,
}

impl Outcome for Handled {
    fn label(&self) -> &'static str {
        match self {
            Handled::Processed => "processed",
            Handled::CompletedEarlier => "completed_earlier",
        }
    }
}

/// How a body becomes the handler's `T`; `Err`: why not (the record is `invalid_body`).
pub type Decode<T> = fn(&[u8]) -> Result<T, String>;

/// The body as JSON into `T` (serde).
pub(super) fn json<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

/// The handler and how the pipeline runs it.
pub(super) struct Handling<T> {
    pub(super) handler: Handler<T>,
    pub(super) decode: Decode<T>,
    pub(super) stream_order: StreamOrder,
    pub(super) concurrency: usize,
}

impl<T> Clone for Handling<T> {
    fn clone(&self) -> Self {
        Handling {
            handler: Arc::clone(&self.handler),
            decode: self.decode,
            stream_order: self.stream_order,
            concurrency: self.concurrency,
        }
    }
}

/// What one invocation gives every record besides its body: the Lambda context and the
/// source's metadata by record id (empty through `handle_batch`).
#[derive(Default)]
pub(super) struct Extras {
    pub(super) context: Option<Arc<Context>>,
    pub(super) metadata: HashMap<String, Arc<RecordMetadata>>,
}

/// The handling of one invocation: records carry its [`Extras`].
pub(super) struct WithExtras<'a, T> {
    pub(super) handling: &'a Handling<T>,
    pub(super) extras: &'a Extras,
}

impl<T: Send + 'static> Work for WithExtras<'_, T> {
    type Record = Record<T>;
    type Outcome = Handled;

    fn parse(&self, record: &SourceRecord) -> Result<Record<T>, Rejection> {
        let mut parsed = self.handling.parse(record)?;
        if let Some(context) = &self.extras.context {
            parsed = parsed.with_context(Arc::clone(context));
        }
        if let Some(meta) = self.extras.metadata.get(&record.position.id) {
            parsed = parsed.with_metadata(Arc::clone(meta));
        }
        Ok(parsed)
    }

    fn max_record_age(&self) -> Option<Duration> {
        None
    }

    fn order(&self, batch: &Batch) -> Option<OrderKey> {
        self.handling.order(batch)
    }

    fn concurrency(&self) -> usize {
        self.handling.concurrency()
    }

    fn apply(
        &self,
        records: Vec<(usize, Record<T>)>,
        deadline: Deadline,
    ) -> impl Future<Output = Applied<Handled>> + Send {
        self.handling.apply(records, deadline)
    }
}

impl<T: Send + 'static> Work for Handling<T> {
    type Record = Record<T>;
    type Outcome = Handled;

    /// The body decoded into `T`; one that does not decode is rejected (`invalid_body`).
    fn parse(&self, record: &SourceRecord) -> Result<Record<T>, Rejection> {
        let body = (self.decode)(&record.body).map_err(|e| {
            Rejection::new(
                RejectionCode::InvalidBody,
                format!(
                    "the body ({} bytes) does not decode into {}: {e}",
                    record.body.len(),
                    std::any::type_name::<T>()
                ),
            )
        })?;
        Ok(Record::new(
            body,
            record.position.clone(),
            record.body.clone(),
        ))
    }

    fn max_record_age(&self) -> Option<Duration> {
        None
    }

    /// SQS FIFO by message group, always; a stream batch as the processor's [`StreamOrder`]
    /// says; an SQS standard batch unordered.
    fn order(&self, batch: &Batch) -> Option<OrderKey> {
        let stream = match (batch.kind, self.stream_order) {
            (SourceKind::Sqs, _) | (_, StreamOrder::Unordered) => None,
            (SourceKind::Kinesis, StreamOrder::PartitionKey) => Some(OrderKey::PartitionKey),
            // Kafka: a key lives in one partition, so partition order keeps key order.
            (SourceKind::Kinesis | SourceKind::DynamoDb | SourceKind::Kafka, _) => {
                Some(OrderKey::Shard)
            }
        };
        fifo_or(batch, stream)
    }

    fn concurrency(&self) -> usize {
        self.concurrency.max(1)
    }

    fn apply(
        &self,
        records: Vec<(usize, Record<T>)>,
        deadline: Deadline,
    ) -> impl Future<Output = Applied<Handled>> + Send {
        let limit = self.concurrency.max(1);
        async move {
            let results = futures::stream::iter(records)
                .map(|(i, record)| async move { (i, self.run_one(record, deadline).await) })
                .buffer_unordered(limit)
                .collect()
                .await;
            Applied::new(results, 0)
        }
    }
}

impl<T: Send + 'static> Handling<T> {
    /// One record through the handler: not started once the deadline's margin is reached
    /// (deferred); cut off `PART_MARGIN` (50 ms) before
    /// the batch's own cut-off, so that the records that finished keep their results.
    async fn run_one(&self, record: Record<T>, deadline: Deadline) -> RecordResult<Handled> {
        if deadline.expired() {
            return RecordResult::Deferred;
        }
        let record = record.with_deadline_ms(deadline.cutoff_epoch_ms());
        let handler = Arc::clone(&self.handler);
        // The handler is called inside the caught future: a panic while building its future
        // is caught too.
        let call = AssertUnwindSafe(async move { handler(record).await }).catch_unwind();
        match deadline.bound_part(call).await {
            None => RecordResult::Failed(RecordFailure::CutOff("record handler")),
            Some(Err(panic)) => {
                let message = bounded(panic_message(panic.as_ref()), MAX_REASON_CHARS);
                tracing::error!(panic = %message, "the record handler panicked; the record is reported for retry");
                RecordResult::Failed(RecordFailure::External(
                    format!("the record handler panicked: {message}").into(),
                ))
            }
            Some(Ok(Ok(()))) => RecordResult::Done(Handled::Processed),
            Some(Ok(Err(RecordError::Reject(reason)))) => RecordResult::Rejected(reason),
            Some(Ok(Err(RecordError::Completed { reason }))) => {
                tracing::warn!(reason = %reason, "the record completed in an earlier delivery; acknowledged");
                RecordResult::Done(Handled::CompletedEarlier)
            }
            Some(Ok(Err(err))) => RecordResult::Failed(RecordFailure::External(Box::new(err))),
        }
    }
}

/// A panic's message, when it is text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
