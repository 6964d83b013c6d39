//! Traces for X-Ray and OpenTelemetry users: spans exported over OTLP (HTTP/protobuf) to a
//! collector, **only when `OTEL_EXPORTER_OTLP_ENDPOINT`** (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, e.g. to the AWS Distro for OpenTelemetry
//! (ADOT) Lambda layer's collector at `http://localhost:4318`, which forwards them to X-Ray.
//!
//! * **Spans**: the invocation ([`crate::telemetry::invocation_span`]), each batch
//!   ([`batch_span`]) and each DynamoDB call (the SDK's own `DynamoDB.<Operation>` spans,
//!   with `rpc.system = aws-api`, `rpc.service`, `rpc.method`; X-Ray shows them as DynamoDB
//!   subsegments).
//! * **One trace with Lambda's**: the invocation span's parent is the X-Ray trace header Lambda
//!   hands the invocation (`Root=…;Parent=…;Sampled=…`), and trace ids are X-Ray compatible;
//!   X-Ray's sampling decision is kept (a `Sampled=0` invocation exports nothing).
//! * **Flushed before the answer, never past the deadline**: spans are batched in memory and
//!   flushed at the end of every invocation ([`flush`]), before Lambda freezes the
//!   environment. The flush runs on a thread of its own and the invocation waits for it only
//!   until the deadline's cutoff (see [`dynamodb_exactly_once::Deadline`]): a slow or absent
//!   collector never delays the answer past the deadline.
//!
//! **Feature `otel`** (on in the ready functions, off by default): the exporter, the
//! OpenTelemetry SDK and its HTTP client are linked only with it. Without it [`layer`] is
//! always `None`, [`set_parent`] and [`flush`] do nothing, and a function whose environment
//! asks for traces says once on stderr that this build has none.
//!
//! Cost when off: one environment lookup at start-up; no exporter, no layer. Failure modes:
//! an unreachable or slow collector loses spans (bounded by the exporter's timeout, default
//! 10 s, at each flush); a flush still running at the cutoff goes on in the background (while
//! it runs, later invocations start no other flush: their spans go with a later one); it
//! never fails an invocation or a record, nor delays its answer past the cutoff.

#[cfg(feature = "otel")]
mod export;
#[cfg(not(feature = "otel"))]
mod off;

#[cfg(feature = "otel")]
pub(crate) use export::{flush, layer, set_parent};
#[cfg(not(feature = "otel"))]
pub(crate) use off::{flush, layer, set_parent};

use tracing::Span;

use crate::source::SourceKind;

/// Target of the spans that exist for traces only (the batch span): the log lines leave them
/// out, so every line keeps the invocation span's fields.
pub(crate) const SPAN_TARGET: &str = "dynamodb_exactly_once_lambda::otel";

/// Whether the environment asks for traces.
pub(crate) fn enabled() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|var| std::env::var(var).is_ok_and(|v| !v.trim().is_empty()))
}

/// The span of one batch (exported as a trace span, left out of log lines).
pub(crate) fn batch_span(function: &str, source: SourceKind, records: usize) -> Span {
    tracing::info_span!(target: SPAN_TARGET, "batch", function, source = ?source, records)
}
