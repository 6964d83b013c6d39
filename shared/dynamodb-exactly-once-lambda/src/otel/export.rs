//! The exporter (feature `otel`): OTLP over HTTP/protobuf, X-Ray ids and parents, flushes
//! on a thread of their own.

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

use super::enabled;

/// What is exported: our spans (invocation, batch) and the SDK's per-call spans (DEBUG level
/// in `aws_sdk_dynamodb`), not the SDK's internal retry/serialization spans nor events below
/// WARN.
const EXPORT_FILTER: &str = "warn,dynamodb_exactly_once_lambda=info,aws_sdk_dynamodb=debug";

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The layer exporting spans, when [`enabled`] (`None` otherwise, or when the exporter cannot
/// be built: the reason is printed once to stderr and the function runs without traces).
pub(crate) fn layer<S>() -> Option<impl Layer<S> + Send + Sync>
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
pub(crate) fn set_parent(span: &Span, header: Option<&str>) {
    if PROVIDER.get().is_none() {
        return;
    }
    let Some(parent) = header.and_then(span_context_from_str) else {
        return;
    };
    let _ = span.set_parent(Context::new().with_remote_span_context(parent));
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
pub(crate) async fn flush(limit: Option<Duration>) {
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
