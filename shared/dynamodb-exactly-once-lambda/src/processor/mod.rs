//! A batch processor for your own code: an `async fn(Record<T>) -> Result<(), RecordError>`
//! run over Kinesis (KPL aggregates expanded), SQS (standard and FIFO) and DynamoDB Streams
//! batches with the pipeline the writers use: partial batch responses, ordering, the
//! deadline, dead letters, the batch summary and metrics.
//!
//! ```no_run
//! use dynamodb_exactly_once_lambda::dead_letter::ReportOnly;
//! use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError};
//!
//! #[derive(serde::Deserialize)]
//! struct Order {
//!     id: String,
//!     amount: i64,
//! }
//!
//! async fn handle(record: Record<Order>) -> Result<(), RecordError> {
//!     if record.body.amount <= 0 {
//!         return Err(RecordError::reject("amount must be positive"));
//!     }
//!     // … call something, keyed by record.delivery_id() if it must happen once …
//!     Ok(())
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), lambda_runtime::Error> {
//!     let processor = Processor::builder("orders", handle)
//!         .dead_letters(ReportOnly)
//!         .build()?;
//!     lambda_runtime::run(processor).await
//! }
//! ```
//!
//! Per record:
//!
//! | the handler | the record is | `batchItemFailures` |
//! |---|---|---|
//! | returns `Ok(())` | acknowledged (`processed`) | no |
//! | returns [`RecordError::Retry`] (or panics) | delivered again (`failed`) | yes |
//! | returns [`RecordError::Reject`], or the body does not deserialize (`invalid_body`) | given to the dead-letter sink: kept and acknowledged ([`DeadLetters`](crate::dead_letter::DeadLetters), `invalid`), or reported for the source's own dead-letter queue ([`ReportOnly`], `rejected_reported`) | only if not kept |
//! | returns [`RecordError::Completed`] (the work completed in an earlier delivery) | acknowledged (`completed_earlier`) | no |
//! | is not started before the deadline's margin, or still runs at the cut-off | delivered again (`deferred`, `failed`) | yes |
//!
//! Order: an SQS FIFO batch by message group, always (a group's records one at a time, none
//! after one reported); a Kinesis or DynamoDB Streams batch as [`StreamOrder`] says (default:
//! the whole shard in order, stopping at the first record reported, which is safe for a
//! handler that is not idempotent); an SQS standard batch concurrently, up to
//! [`ProcessorBuilder::concurrency`] records at once. `docs/processor.md` states the contract
//! per source.
//!
//! Dead letters: an ordered stream batch (Kinesis, DynamoDB Streams; [`StreamOrder::Shard`]
//! or [`StreamOrder::PartitionKey`]) logs an ERROR until a sink is chosen with
//! [`ProcessorBuilder::dead_letters`]: it runs under [`ReportOnly`], where the records held
//! back behind a rejected one share its fate. Bodies: JSON into `T` ([`Processor::builder`]), bytes
//! ([`Processor::raw_builder`]), text ([`Processor::text_builder`]), your decoder
//! ([`Processor::decoder_builder`]); a DynamoDB stream record as [`DynamoDbChange<T>`], its
//! images typed. Each record carries the Lambda context and its source's metadata
//! ([`Record::context`], [`Record::metadata`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use lambda_runtime::{LambdaEvent, Service};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::Instrument;

use dynamodb_exactly_once::__private::ANSWER_MARGIN;
use dynamodb_exactly_once::{ConfigError, Deadline};

use crate::dead_letter::{DeadLetterSink, ReportOnly};
use crate::error::HandlerError;
use crate::otel::batch_span;
use crate::pipeline::{process_work, AgeCheck, BatchReport, Decoded};
use crate::source::value::KafkaValues;
use crate::source::{Batch, BatchResponse, SourceKind};
use crate::telemetry::{invocation_span, traced};
use crate::writer::DEFAULT_DEADLINE_MARGIN;

mod change;
mod record;
mod service;
mod work;

pub use change::DynamoDbChange;
pub use record::{Record, RecordError, MAX_REASON_CHARS};
pub use work::{Decode, Handled};
use work::{Extras, Handler, Handling, WithExtras};

/// Default number of records (or ordered keys) run at once.
pub(crate) const DEFAULT_CONCURRENCY: usize = 8;

/// How the records of a Kinesis or DynamoDB Streams batch are run. SQS FIFO batches are
/// always run by message group, SQS standard batches always concurrently.
///
/// Lambda restarts a stream shard from the *lowest* reported sequence number: every record
/// after it is delivered again, also the ones that succeeded. Only [`StreamOrder::Shard`]
/// runs none of them before that, so it is the one to use for a handler whose effects are not
/// idempotent.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamOrder {
    /// The whole batch (one shard) in sequence order, one record at a time, stopping at the
    /// first record reported: the later ones are held back (reported, not run). Nothing runs
    /// twice because of the restart rule (a KPL aggregate's user records share its sequence
    /// number: when one is reported, its earlier ones come back too).
    #[default]
    Shard,
    /// Kinesis: the records of one partition key in order, keys concurrently; after a
    /// record reported, its key's later records are held back. The other keys' records after
    /// it run again on the redelivery: the handler must be idempotent for them. A DynamoDB
    /// Streams batch is run by shard (its records carry no partition key).
    PartitionKey,
    /// Concurrently, up to the concurrency limit, no order: every record after the lowest
    /// reported one runs again on the redelivery (an idempotent handler).
    Unordered,
}

/// A record handler behind the batch pipeline; a `tower::Service<LambdaEvent<Value>>`, so
/// `lambda_runtime::run(processor)` works. Built by [`Processor::builder`].
pub struct Processor<T> {
    function: String,
    work: Handling<T>,
    dead_letters: Arc<dyn DeadLetterSink>,
    /// Whether the sink was chosen ([`ProcessorBuilder::dead_letters`]), not the default.
    sink_chosen: bool,
    deadline_margin: Duration,
    kafka_values: Option<KafkaValues>,
}

impl<T> Clone for Processor<T> {
    fn clone(&self) -> Self {
        Processor {
            function: self.function.clone(),
            work: self.work.clone(),
            dead_letters: Arc::clone(&self.dead_letters),
            sink_chosen: self.sink_chosen,
            deadline_margin: self.deadline_margin,
            kafka_values: self.kafka_values.clone(),
        }
    }
}

impl<T> std::fmt::Debug for Processor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processor")
            .field("function", &self.function)
            .field("record", &std::any::type_name::<T>())
            .field("dead_letters", &self.dead_letters)
            .field("stream_order", &self.work.stream_order)
            .field("concurrency", &self.work.concurrency)
            .field("deadline_margin", &self.deadline_margin)
            .finish()
    }
}

impl<T: DeserializeOwned + Send + 'static> Processor<T> {
    /// A processor named `function` (the name its dead letters, logs and metrics carry) running
    /// `handler` on every record. Defaults: no dead-letter sink chosen ([`ReportOnly`]; an
    /// ordered stream batch logs an ERROR until one is chosen, see
    /// [`Processor::handle_batch`]), [`StreamOrder::Shard`], a concurrency of 8, a
    /// deadline margin of 2 s.
    pub fn builder<H, F>(function: impl Into<String>, handler: H) -> ProcessorBuilder<T>
    where
        H: Fn(Record<T>) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), RecordError>> + Send + 'static,
    {
        Self::decoder_builder(function, work::json::<T>, handler)
    }

    /// A processor whose record handler is a `tower::Service<Record<T>>`: your own, or one
    /// wrapped in layers (an [`IdempotencyLayer`](crate::idempotency::IdempotencyLayer)
    /// answers a duplicate with the stored response without calling it). Its response is
    /// dropped (the record is acknowledged); its error says retry or reject. Each record is
    /// served by a clone of `service`, made ready first.
    pub fn service_builder<S>(function: impl Into<String>, service: S) -> ProcessorBuilder<T>
    where
        S: Service<Record<T>> + Clone + Send + Sync + 'static,
        S::Future: Send + 'static,
        S::Error: Into<RecordError>,
    {
        Self::builder(function, move |record| {
            let mut service = service.clone();
            async move {
                std::future::poll_fn(|cx| service.poll_ready(cx))
                    .await
                    .map_err(Into::into)?;
                service.call(record).await.map(drop).map_err(Into::into)
            }
        })
    }
}

impl Processor<Vec<u8>> {
    /// A processor whose handler gets each body as delivered, bytes (`Record<Vec<u8>>`):
    /// Avro, protobuf, CSV, compressed data. Otherwise as [`Processor::builder`].
    pub fn raw_builder<H, F>(function: impl Into<String>, handler: H) -> ProcessorBuilder<Vec<u8>>
    where
        H: Fn(Record<Vec<u8>>) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), RecordError>> + Send + 'static,
    {
        Self::decoder_builder(function, |body| Ok(body.to_vec()), handler)
    }
}

impl Processor<String> {
    /// A processor whose handler gets each body as text (`Record<String>`, plain text, not
    /// JSON); a body that is not UTF-8 is `invalid_body`. Otherwise as [`Processor::builder`].
    pub fn text_builder<H, F>(function: impl Into<String>, handler: H) -> ProcessorBuilder<String>
    where
        H: Fn(Record<String>) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), RecordError>> + Send + 'static,
    {
        Self::decoder_builder(
            function,
            |body| String::from_utf8(body.to_vec()).map_err(|e| e.to_string()),
            handler,
        )
    }
}

impl<T: Send + 'static> Processor<T> {
    /// A processor whose bodies become `T` through `decode` (a protobuf or Avro decoder, say);
    /// a body it refuses is `invalid_body`, with its reason. Otherwise as
    /// [`Processor::builder`].
    pub fn decoder_builder<H, F>(
        function: impl Into<String>,
        decode: Decode<T>,
        handler: H,
    ) -> ProcessorBuilder<T>
    where
        H: Fn(Record<T>) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), RecordError>> + Send + 'static,
    {
        let handler: Handler<T> = Arc::new(move |record| handler(record).boxed());
        ProcessorBuilder {
            function: function.into(),
            handler,
            decode,
            dead_letters: None,
            stream_order: StreamOrder::default(),
            concurrency: DEFAULT_CONCURRENCY,
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            kafka_values: None,
        }
    }

    /// Handle one invocation: the partial batch response. Every line it logs carries the
    /// invocation's request id, trace id and function name. Each record carries the
    /// invocation's Lambda context ([`Record::context`]) and its source's metadata
    /// ([`Record::metadata`]).
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<BatchResponse, HandlerError> {
        let span = invocation_span(&event.context, &self.function);
        let deadline = crate::pipeline::invocation_deadline(
            &self.function,
            event.context.deadline,
            self.deadline_margin,
        );
        let extras = Extras {
            metadata: crate::source::metadata::metadata_of(&event.payload),
            context: Some(Arc::new(event.context.clone())),
        };
        traced(span, deadline, async {
            let batch = Batch::from_event(event.payload).inspect_err(|err| {
                tracing::error!(error = %err, "the payload is not a Kinesis, SQS or DynamoDB Streams batch");
            })?;
            Ok(self.run(&batch, deadline, &extras).await.response)
        })
        .await
    }

    /// Process an already decoded batch: the report (per-record results in batch order), its
    /// summary logged and emitted as metrics.
    ///
    /// A stream batch run in order ([`StreamOrder::Shard`] or [`StreamOrder::PartitionKey`])
    /// by a processor whose dead-letter sink was not chosen runs under [`ReportOnly`], with
    /// an ERROR line per batch naming the choice: the records held back behind a rejected
    /// one share its fate, and when the source gives up on it they are discarded without
    /// ever running. (Failing the invocation instead would discard every batch unrun once
    /// the mapping's retries ran out.)
    pub async fn handle_batch(&self, batch: &Batch, deadline: Deadline) -> BatchReport<Handled> {
        self.run(batch, deadline, &Extras::default()).await
    }

    async fn run(
        &self,
        batch: &Batch,
        deadline: Deadline,
        extras: &Extras,
    ) -> BatchReport<Handled> {
        if let Some(warning) = self.unchosen_sink(batch) {
            tracing::error!(function = %self.function, error = %warning,
                "an ordered stream batch with no dead-letter sink chosen: run under ReportOnly");
        }
        let span = batch_span(&self.function, batch.kind, batch.records.len());
        let handling = WithExtras {
            handling: &self.work,
            extras,
        };
        let work = Decoded {
            work: &handling,
            values: self.kafka_values.as_ref(),
        };
        let report = process_work(
            &self.function,
            batch,
            &work,
            self.dead_letters.as_ref(),
            deadline,
            AgeCheck::Enforce,
        )
        .instrument(span)
        .await;
        report.summary.log(&self.function, batch.kind);
        crate::metrics::emit_batch_metrics(&self.function, &report.summary);
        report
    }

    /// The function's name (dead letters, logs, metrics).
    pub fn function(&self) -> &str {
        &self.function
    }

    /// What is wrong with running `batch` here: an ordered stream batch with no dead-letter
    /// sink chosen (see [`Processor::handle_batch`]).
    fn unchosen_sink(&self, batch: &Batch) -> Option<ConfigError> {
        let stream = matches!(
            batch.kind,
            SourceKind::Kinesis | SourceKind::DynamoDb | SourceKind::Kafka
        );
        let ordered = self.work.stream_order != StreamOrder::Unordered;
        (stream && ordered && !self.sink_chosen && !batch.records.is_empty()).then(|| {
            ConfigError::new(
                "dead_letters",
                format!(
                    "the processor `{}` got a {} batch in {:?} order with no dead-letter sink \
                     chosen: a rejected record would hold back the rest of its shard or key, \
                     and when the source gives up on it those records are discarded never run. \
                     Choose `.dead_letters(DeadLetters::new(..))` (kept and acknowledged; the \
                     rest runs), or `.dead_letters(ReportOnly)` to accept that, or \
                     `StreamOrder::Unordered` (every record runs at least once)",
                    self.function,
                    batch.kind.as_str(),
                    self.work.stream_order
                ),
            )
        })
    }
}

/// Builds a [`Processor`]; see [`Processor::builder`].
#[must_use]
pub struct ProcessorBuilder<T> {
    function: String,
    handler: Handler<T>,
    decode: Decode<T>,
    dead_letters: Option<Arc<dyn DeadLetterSink>>,
    stream_order: StreamOrder,
    concurrency: usize,
    deadline_margin: Duration,
    kafka_values: Option<KafkaValues>,
}

impl<T> std::fmt::Debug for ProcessorBuilder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorBuilder")
            .field("function", &self.function)
            .field("dead_letters", &self.dead_letters)
            .field("stream_order", &self.stream_order)
            .field("concurrency", &self.concurrency)
            .field("deadline_margin", &self.deadline_margin)
            .finish()
    }
}

impl<T: Send + 'static> ProcessorBuilder<T> {
    /// Where rejected records go: [`DeadLetters`](crate::dead_letter::DeadLetters) (a table:
    /// kept, then acknowledged), `SqsDeadLetters` (feature `sqs`: a message on an SQS queue,
    /// then acknowledged), [`ReportOnly`] (reported for the source's own dead-letter queue or
    /// on-failure destination), or your own [`DeadLetterSink`].
    ///
    /// Unchosen, rejected records are reported as under [`ReportOnly`]; an ordered stream
    /// batch also logs an ERROR (see [`Processor::handle_batch`]): choose a sink for Kinesis
    /// and DynamoDB Streams.
    pub fn dead_letters(mut self, sink: impl DeadLetterSink + 'static) -> Self {
        self.dead_letters = Some(Arc::new(sink));
        self
    }

    /// How stream batches are ordered (default [`StreamOrder::Shard`]).
    pub fn stream_order(mut self, order: StreamOrder) -> Self {
        self.stream_order = order;
        self
    }

    /// How many records (unordered) or ordering keys (ordered) run at once (default
    /// 8; at least 1).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Stop starting records this long before the invocation deadline (default 2 s; at least
    /// 250 ms, the time kept to answer after work in flight is cut off).
    pub fn deadline_margin(mut self, margin: Duration) -> Self {
        self.deadline_margin = margin;
        self
    }

    /// Decode Kafka values with `values` (Avro or Protobuf, schema-registry framing; see
    /// [`crate::source::value`]) before the handler's record type reads their JSON; a value
    /// that does not decode is kept as a dead letter, `undecodable_value`.
    pub fn kafka_values(mut self, values: KafkaValues) -> Self {
        self.kafka_values = Some(values);
        self
    }

    /// The processor, or the setting at fault.
    pub fn build(self) -> Result<Processor<T>, ConfigError> {
        if self.concurrency == 0 {
            return Err(ConfigError::new("concurrency", "must be at least 1"));
        }
        if self.deadline_margin < ANSWER_MARGIN {
            return Err(ConfigError::new(
                "deadline_margin",
                format!(
                    "{} ms is too small: at least {} ms, the time kept to send the answer after \
                     work in flight is cut off",
                    self.deadline_margin.as_millis(),
                    ANSWER_MARGIN.as_millis()
                ),
            ));
        }
        if self.function.trim().is_empty() {
            return Err(ConfigError::new("function", "must not be empty"));
        }
        Ok(Processor {
            function: self.function,
            work: Handling {
                handler: self.handler,
                decode: self.decode,
                stream_order: self.stream_order,
                concurrency: self.concurrency,
            },
            sink_chosen: self.dead_letters.is_some(),
            dead_letters: self
                .dead_letters
                .unwrap_or_else(|| Arc::new(ReportOnly) as Arc<dyn DeadLetterSink>),
            deadline_margin: self.deadline_margin,
            kafka_values: self.kafka_values,
        })
    }
}
