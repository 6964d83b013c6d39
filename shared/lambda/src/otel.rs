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
//! Cost when off: one environment lookup at start-up; no exporter, no layer. Failure modes:
//! an unreachable or slow collector loses spans (bounded by the exporter's timeout, default
//! 10 s, at each flush); a flush still running at the cutoff goes on in the background (while
//! it runs, later invocations start no other flush: their spans go with a later one); it
//! never fails an invocation or a record, nor delays its answer past the cutoff.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_aws::detector::LambdaResourceDetector;
use opentelemetry_aws::trace::xray_propagator::span_context_from_str;
use opentelemetry_aws::trace::XrayIdGenerator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

use crate::source::SourceKind;

/// Target of the spans that exist for traces only (the batch span): the log lines leave them
/// out, so every line keeps the invocation span's fields.
pub const SPAN_TARGET: &str = "dynamodb_exactly_once_lambda::otel";

/// What is exported: our spans (invocation, batch) and the SDK's per-call spans (DEBUG level
/// in `aws_sdk_dynamodb`), not the SDK's internal retry/serialization spans nor events below
/// WARN.
const EXPORT_FILTER: &str = "warn,dynamodb_exactly_once_lambda=info,aws_sdk_dynamodb=debug";

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Whether the environment asks for traces.
pub fn enabled() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|var| std::env::var(var).is_ok_and(|v| !v.trim().is_empty()))
}

/// The layer exporting spans, when [`enabled`] (`None` otherwise, or when the exporter cannot
/// be built: the reason is printed once to stderr and the function runs without traces).
pub fn layer<S>() -> Option<impl Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    if !enabled() {
        return None;
    }
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
    {
        Ok(exporter) => exporter,
        Err(err) => {
            eprintln!("traces off: the OTLP exporter could not be built: {err}");
            return None;
        }
    };
    let resource = Resource::builder()
        .with_detector(Box::new(LambdaResourceDetector))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_id_generator(XrayIdGenerator::default())
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("dynamodb-exactly-once-lambda");
    let _ = PROVIDER.set(provider);
    Some(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(EnvFilter::new(EXPORT_FILTER)),
    )
}

/// Make `span` a child of the X-Ray trace `header` (Lambda's `Root=…;Parent=…;Sampled=…`).
/// No effect when traces are off or the header is absent or malformed.
pub fn set_parent(span: &Span, header: Option<&str>) {
    if PROVIDER.get().is_none() {
        return;
    }
    let Some(parent) = header.and_then(span_context_from_str) else {
        return;
    };
    let _ = span.set_parent(Context::new().with_remote_span_context(parent));
}

/// The span of one batch (exported as a trace span, left out of log lines).
pub fn batch_span(function: &str, source: SourceKind, records: usize) -> Span {
    tracing::info_span!(target: SPAN_TARGET, "batch", function, source = ?source, records)
}

/// Whether a flush is running: at most one at a time.
static FLUSHING: AtomicBool = AtomicBool::new(false);

/// Clears [`FLUSHING`] when the flush thread ends, however it ends.
struct Flushing;

impl Drop for Flushing {
    fn drop(&mut self) {
        FLUSHING.store(false, Ordering::Release);
    }
}

/// Export the spans finished so far (at the end of every invocation), waiting at most `limit`
/// for the exporter (`None`: until it is done). The blocking export runs on a thread of its
/// own, so a flush that outlasts `limit` goes on in the background without holding the
/// answer. No effect when traces are off.
pub async fn flush(limit: Option<Duration>) {
    let Some(provider) = PROVIDER.get() else {
        return;
    };
    if FLUSHING.swap(true, Ordering::AcqRel) {
        tracing::warn!(
            "the previous trace flush is still running; these spans go with a later one"
        );
        return;
    }
    let provider = provider.clone();
    let (done, finished) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("trace-flush".into())
        .spawn(move || {
            let _flushing = Flushing;
            let _ = done.send(provider.force_flush());
        });
    if let Err(err) = spawned {
        FLUSHING.store(false, Ordering::Release);
        tracing::warn!(error = %err, "traces could not be flushed: no thread for the flush");
        return;
    }
    let waited = match limit {
        None => Ok(finished.await),
        Some(limit) => tokio::time::timeout(limit, finished).await,
    };
    match waited {
        Ok(Ok(Ok(()))) | Ok(Err(_)) => {}
        Ok(Ok(Err(err))) => tracing::warn!(error = %err, "traces could not be flushed"),
        Err(_) => tracing::warn!(
            waited_ms = limit.map_or(0, |l| l.as_millis()),
            "the trace flush is still running at the deadline's cutoff; answering without it"
        ),
    }
}
