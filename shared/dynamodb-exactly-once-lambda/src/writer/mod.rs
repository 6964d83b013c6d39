//! The glue every writer function shares: a protocol, its dead-letter sink and its deadline
//! margin, behind one `handle(LambdaEvent<Value>)`.
//!
//! Built one way: [`Writer::builder`] with the required parts (the function's name and the
//! protocol), the optional ones chained, [`WriterBuilder::build`] validating; or from the
//! environment by [`writer_from_env`] (the ready functions).

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once::__private::ANSWER_MARGIN;
use dynamodb_exactly_once::batch::Redelivery;
use dynamodb_exactly_once::{ConfigError, Deadline, Protocol};
use lambda_runtime::LambdaEvent;
use serde_json::Value;
use tracing::Instrument;

use crate::dead_letter::{DeadLetterSink, DeadLetters, ReportOnly};
use crate::error::HandlerError;
use crate::event_time::EventTime;
use crate::mapping::{Mapped, RecordMapping};
use crate::otel::batch_span;
use crate::pipeline::{process_work, AgeCheck, BatchReport, Decoded};
use crate::source::value::KafkaValues;
use crate::source::{Batch, BatchResponse};
use crate::telemetry::{invocation_span, traced};

mod env;

pub use env::writer_from_env;

/// Default time kept in reserve before the invocation deadline.
pub(crate) const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_millis(2000);

/// A writer function: a protocol plus where its rejected records go. Built by
/// [`Writer::builder`] (or [`writer_from_env`]).
#[derive(Debug, Clone)]
pub struct Writer<P> {
    function: String,
    protocol: P,
    dead_letters: Arc<dyn DeadLetterSink>,
    /// The sink, when it is the dead-letter table (to list and replay its letters).
    table: Option<DeadLetters>,
    deadline_margin: Duration,
    event_time: Option<EventTime>,
    mapping: Option<RecordMapping>,
    kafka_values: Option<KafkaValues>,
}

impl<P> Writer<P> {
    /// A writer of `protocol` named `function` (its dead letters, logs and metrics carry the
    /// name). Defaults: no dead-letter sink chosen (rejected records are reported for the
    /// source's own dead-letter queue, as under [`ReportOnly`]; refused by
    /// [`WriterBuilder::build`] for a protocol that asks for in-order stream batches),
    /// a deadline margin of 2 s, no event time, no record mapping.
    pub fn builder(function: impl Into<String>, protocol: P) -> WriterBuilder<P> {
        WriterBuilder {
            function: function.into(),
            protocol,
            dead_letters: None,
            table: None,
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            event_time: None,
            mapping: None,
            kafka_values: None,
        }
    }

    /// The function's name, recorded with dead letters and logs.
    pub fn function(&self) -> &str {
        &self.function
    }

    /// The write protocol.
    pub fn protocol(&self) -> &P {
        &self.protocol
    }

    /// Where rejected records go.
    pub fn dead_letters(&self) -> &dyn DeadLetterSink {
        self.dead_letters.as_ref()
    }

    /// The dead-letter table, when the sink is one ([`DeadLetters`]): to list or replay its
    /// letters.
    pub fn dead_letter_table(&self) -> Option<&DeadLetters> {
        self.table.as_ref()
    }

    /// How long before the invocation deadline the writer stops starting writes.
    pub fn deadline_margin(&self) -> Duration {
        self.deadline_margin
    }

    /// Where record bodies carry their event time, if they do.
    pub fn event_time(&self) -> Option<&EventTime> {
        self.event_time.as_ref()
    }

    /// How Kinesis and SQS bodies of another shape become the protocol's records, if they do.
    pub fn mapping(&self) -> Option<&RecordMapping> {
        self.mapping.as_ref()
    }

    /// How Kafka values in Avro or Protobuf are decoded, if they are (`None`: JSON values).
    pub fn kafka_values(&self) -> Option<&KafkaValues> {
        self.kafka_values.as_ref()
    }
}

/// Builds a [`Writer`]; see [`Writer::builder`].
#[must_use]
#[derive(Debug)]
pub struct WriterBuilder<P> {
    function: String,
    protocol: P,
    dead_letters: Option<Arc<dyn DeadLetterSink>>,
    table: Option<DeadLetters>,
    deadline_margin: Duration,
    event_time: Option<EventTime>,
    mapping: Option<RecordMapping>,
    kafka_values: Option<KafkaValues>,
}

impl<P: Protocol> WriterBuilder<P> {
    /// Where rejected records go: [`DeadLetters`] (a table: kept, then acknowledged; listed and
    /// replayed by `ops dead-letters`), `SqsDeadLetters` (feature `sqs`: a message on an SQS
    /// queue, then acknowledged), [`ReportOnly`] (reported for the source's own dead-letter
    /// queue or on-failure destination), or your own [`DeadLetterSink`].
    pub fn dead_letters(mut self, sink: impl DeadLetterSink + 'static) -> Self {
        self.table = (&sink as &dyn Any).downcast_ref::<DeadLetters>().cloned();
        self.dead_letters = Some(Arc::new(sink));
        self
    }

    /// Stop starting writes `margin` before the invocation deadline (default
    /// 2 s; at least 250 ms).
    pub fn deadline_margin(mut self, margin: Duration) -> Self {
        self.deadline_margin = margin;
        self
    }

    /// Date records by the producer's event time where it is earlier than their arrival.
    pub fn event_time(mut self, event_time: EventTime) -> Self {
        self.event_time = Some(event_time);
        self
    }

    /// Read Kinesis and SQS bodies through `mapping` (see [`crate::mapping`]).
    pub fn mapping(mut self, mapping: RecordMapping) -> Self {
        self.mapping = Some(mapping);
        self
    }

    /// Decode Kafka values with `values` (Avro or Protobuf, schema-registry framing; see
    /// [`crate::source::value`]) before the mapping or the protocol reads them; a value that
    /// does not decode is kept as a dead letter, `undecodable_value`.
    pub fn kafka_values(mut self, values: KafkaValues) -> Self {
        self.kafka_values = Some(values);
        self
    }

    /// The writer, or the setting at fault. A protocol that asks for in-order stream batches
    /// ([`Protocol::ordered_by_key`], or not idempotent under redelivery,
    /// [`Protocol::redelivery`]) is refused without a chosen sink (the
    /// [`Processor`](crate::processor::Processor), which cannot know its source when built,
    /// logs an ERROR per ordered stream batch instead): under [`ReportOnly`] the records held
    /// back behind a rejected one share its fate, discarded never applied when the source
    /// gives up on it. Choose [`ReportOnly`] explicitly to accept that.
    pub fn build(self) -> Result<Writer<P>, ConfigError> {
        if self.function.trim().is_empty() {
            return Err(ConfigError::new("function", "must not be empty"));
        }
        if self.deadline_margin < ANSWER_MARGIN {
            return Err(ConfigError::new(
                "deadline_margin",
                too_small(self.deadline_margin),
            ));
        }
        let dead_letters = match self.dead_letters {
            Some(sink) => sink,
            None if in_order(&self.protocol) => {
                return Err(ConfigError::new(
                    "dead_letters",
                    format!(
                        "the writer `{}` applies stream batches in order and has no dead-letter \
                         sink chosen: a rejected record would hold back the rest of its shard \
                         or key, and when the source gives up on it those records are \
                         discarded never applied. Choose `.dead_letters(DeadLetters::new(..))` \
                         (kept and acknowledged; the rest goes on), or \
                         `.dead_letters(ReportOnly)` to accept that",
                        self.function
                    ),
                ))
            }
            None => Arc::new(ReportOnly),
        };
        Ok(Writer {
            function: self.function,
            protocol: self.protocol,
            dead_letters,
            table: self.table,
            deadline_margin: self.deadline_margin,
            event_time: self.event_time,
            mapping: self.mapping,
            kafka_values: self.kafka_values,
        })
    }
}

/// Whether `protocol` applies stream batches in order (by shard or by partition key).
fn in_order<P: Protocol>(protocol: &P) -> bool {
    protocol.ordered_by_key() || protocol.redelivery() != Redelivery::Idempotent
}

/// Why a deadline margin below the 250 ms answer margin is refused.
fn too_small(margin: Duration) -> String {
    format!(
        "{} ms is too small: at least {} ms, the time kept to send the answer after work in \
         flight is cut off",
        margin.as_millis(),
        ANSWER_MARGIN.as_millis()
    )
}

impl<P: Protocol> Writer<P> {
    /// Handle one invocation: the partial batch response.
    /// Every line it logs carries the invocation's request id, trace id and function name.
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<BatchResponse, HandlerError> {
        let span = invocation_span(&event.context, &self.function);
        let deadline = crate::pipeline::invocation_deadline(
            &self.function,
            event.context.deadline,
            self.deadline_margin,
        );
        traced(span, deadline, async {
            tracing::debug!(
                deadline_ms = event.context.deadline,
                now_ms = epoch_millis(),
                "invocation"
            );
            let mut batch = Batch::from_event(event.payload).inspect_err(|err| {
                tracing::error!(error = %err, "the payload is not a Kinesis or SQS batch");
            })?;
            if let Some(event_time) = &self.event_time {
                event_time.stamp_decoded(&mut batch, self.kafka_values.as_ref());
            }
            Ok(self.handle_batch(&batch, deadline).await.response)
        })
        .await
    }

    /// Process an already decoded batch: the report, its summary logged and emitted as
    /// metrics.
    pub async fn handle_batch(&self, batch: &Batch, deadline: Deadline) -> BatchReport<P::Outcome> {
        self.run_batch(
            batch,
            deadline,
            AgeCheck::Enforce,
            self.dead_letters.as_ref(),
        )
        .await
    }

    /// One batch, its rejected records given to `sink` (the writer's own, or the table a
    /// replay reads).
    pub(crate) async fn run_batch(
        &self,
        batch: &Batch,
        deadline: Deadline,
        ages: AgeCheck,
        sink: &dyn DeadLetterSink,
    ) -> BatchReport<P::Outcome> {
        let span = batch_span(&self.function, batch.kind, batch.records.len());
        let values = self.kafka_values.as_ref();
        let report = match &self.mapping {
            None => {
                let work = Decoded {
                    work: &self.protocol,
                    values,
                };
                process_work(&self.function, batch, &work, sink, deadline, ages)
                    .instrument(span)
                    .await
            }
            Some(mapping) => {
                let mapped = Mapped {
                    protocol: &self.protocol,
                    mapping,
                };
                let work = Decoded {
                    work: &mapped,
                    values,
                };
                process_work(&self.function, batch, &work, sink, deadline, ages)
                    .instrument(span)
                    .await
            }
        };
        report.summary.log(&self.function, batch.kind);
        crate::metrics::emit_batch_metrics(&self.function, &report.summary);
        report
    }
}
