//! The Lambda edge of `dynamodb-exactly-once`: the only crate that knows about Lambda.
//!
//! # Layout
//!
//! * [`source`]: Kinesis/SQS/DynamoDB Streams event detection, source positions, partial batch
//!   responses; `source::kpl` expands KPL-aggregated Kinesis records; [`source::value`]
//!   decodes Kafka values in Avro or Protobuf (features `avro`, `protobuf`).
//! * `pipeline` (internal): one batch through a protocol or a record handler (parse → apply → keep what is rejected →
//!   partial batch response), returning a [`BatchReport`]; unordered batches in one `apply`, ordered
//!   ones (SQS FIFO by message group; Kinesis by partition key for a protocol that needs it;
//!   every batch of a protocol that is not idempotent under redelivery, by shard) a key's
//!   records in order, none after one reported for retry.
//! * [`dead_letter`]: the dead-letter table (keep, list in source order, remove) for records
//!   that can never succeed, per deployment; the `DeadLetterSink` trait the pipeline keeps
//!   them through (the table, `ReportOnly`: left to the source's own dead-letter queue, or,
//!   with the cargo feature `sqs`, `SqsDeadLetters`: a message per letter on an SQS queue).
//! * [`processor`]: your own `async fn(Record<T>) -> Result<(), RecordError>` behind the same
//!   pipeline (typed bodies, partial batch responses, ordering, deadline, dead letters), a
//!   `tower::Service` built by `Processor::builder`.
//! * [`writer`]: a protocol plus its dead-letter sink behind one handler, built by
//!   `Writer::builder`; `writer_from_env` (the sink from `<PREFIX>_DEAD_LETTER_SINK`).
//! * [`event_time`]: the producer's event time (from the body) as a record's age.
//! * [`replay`]: dead letters through a writer again, in source order, one deployment at a
//!   time, never applied twice.
//! * [`settings`]: a protocol's settings from `<PREFIX>_<SETTING>` environment variables (no
//!   protocol known here), the ready functions' names and prefixes.
//! * [`run`]: writers, the sweeper and (cargo feature `journal`) the counter journal's roll-up
//!   as `tower::Service`s; `run_writer` / `run_sweeper` / `run_rollup`, the whole `main` of a
//!   ready function.
//! * [`summary`]: the counts of one batch and its INFO summary line.
//! * [`idempotency`]: any async function run once per operation and key (a DynamoDB table,
//!   Powertools' layout or this crate's), a record handler's `run_record`, a `tower::Layer`.
//! * [`mapping`]: record mappings, templates turning bodies of another shape into a protocol's
//!   records (`<PREFIX>_RECORD_MAPPING`).
//! * `metrics` (internal): CloudWatch metrics per batch in the Embedded Metric Format.
//! * [`telemetry`]: JSON logs through `tracing`.
//! * `otel` (internal): trace spans (invocation, batch, DynamoDB calls) over OTLP, when configured
//!   (the exporter with the cargo feature `otel`, on in the ready functions).
//! * [`client`]: the DynamoDB client (and, with `journal`, the DynamoDB Streams one) from the
//!   standard AWS environment.
//! * [`error`]: invocation errors and their `Diagnostic`.

#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![warn(unnameable_types)]

pub mod client;
pub mod dead_letter;
pub mod error;
pub mod event_time;
pub mod idempotency;
pub mod mapping;
mod metrics;
mod otel;
mod pipeline;
pub mod processor;
pub mod replay;
pub mod run;
pub mod settings;
pub mod source;
pub mod summary;
pub mod telemetry;
pub mod writer;

pub use error::HandlerError;
pub use pipeline::BatchReport;
pub use processor::{Processor, Record, RecordError};
pub use replay::{ReplayError, ReplayReport, ReplayScope};
#[cfg(feature = "journal")]
pub use run::{run_rollup, RollupFunction};
pub use run::{run_sweeper, run_writer, sweeper_from_env, SweeperFunction};
pub use source::{Batch, BatchResponse};
pub use writer::{writer_from_env, Writer, WriterBuilder};

/// Helpers shared by this project's other crates (the operator CLI, the tests and the bench
/// tool): not part of the public API, no stability promise (serde's pattern).
#[doc(hidden)]
pub mod __private {
    pub use crate::client::{sdk_config_from_env, timeouts_from_env};
    pub use crate::dead_letter::{letter_id, part_id};
    pub use crate::replay::refuse_mixed_deployments;
    pub use crate::source::dynamodb::decode_change;
    pub use crate::source::kpl::{defect as kpl_defect, MAGIC as KPL_MAGIC};
    pub use crate::telemetry::json_subscriber;
}

/// The Rust snippets of `docs/processor.md`, compiled as doctests (the SQS sink's needs the
/// `sqs` feature).
#[cfg(all(doctest, feature = "sqs"))]
#[doc = include_str!("../../../docs/processor.md")]
pub struct ProcessorDoc;

/// The crate README's snippet, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoc;

/// The Rust snippet of `docs/getting-started.md`, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/getting-started.md")]
pub struct GettingStartedDoc;

/// The Rust snippets of `docs/mapping.md`, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/mapping.md")]
pub struct MappingDoc;
