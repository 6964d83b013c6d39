//! Structured logs through `tracing`, as `lambda_runtime` documents them, and traces:
//!
//! * **Level**: `AWS_LAMBDA_LOG_LEVEL` (set by Lambda's advanced logging controls), else
//!   `RUST_LOG`, else `info`.
//! * **Format**: `AWS_LAMBDA_LOG_FORMAT=TEXT` gives plain text lines; anything else (`JSON`, or
//!   unset) one JSON object per line, event fields flattened, with a `level` field Lambda's
//!   log-level filtering understands.
//! * **Context**: every line written while an invocation is handled carries the invocation's
//!   span: `request_id`, `trace_id` (X-Ray) and `function`, so "what
//!   happened to record X" is one CloudWatch Logs Insights query.
//! * **Traces**: with `OTEL_EXPORTER_OTLP_ENDPOINT` set, spans go to an OTLP collector as well
//!   (the cargo feature `otel`); each invocation runs in its span and flushes them, never
//!   past the invocation's deadline.
//!
//! Payloads are never logged: rejection messages quote at most a few dozen characters of an
//! offending value.

use std::future::Future;
use std::io;
use std::sync::Once;

use dynamodb_exactly_once::Deadline;
use lambda_runtime::Context;
use tracing::{Instrument, Span};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::otel;

/// The log level filter: `AWS_LAMBDA_LOG_LEVEL`, else `RUST_LOG`, else `info`.
pub(crate) fn level_filter() -> EnvFilter {
    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .ok()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.to_lowercase())
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".into());
    EnvFilter::new(level)
}

/// Whether `AWS_LAMBDA_LOG_FORMAT` asks for plain text.
pub(crate) fn text_format() -> bool {
    std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("text"))
}

/// The JSON log layer writing to `writer`, filtered by `filter` (spans that exist for traces
/// only are left out, so each line shows the invocation span).
fn json_layer<S, W>(filter: EnvFilter, writer: W) -> impl Layer<S> + Send + Sync
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_span_list(false)
        .with_target(false)
        .with_writer(writer)
        .with_filter(without_trace_spans(filter))
}

fn without_trace_spans(filter: EnvFilter) -> EnvFilter {
    match format!("{}=off", otel::SPAN_TARGET).parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

/// The JSON subscriber writing to `writer` (tests capture lines with it).
#[doc(hidden)]
pub fn json_subscriber<W>(filter: EnvFilter, writer: W) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    Registry::default().with(json_layer(filter, writer))
}

/// Install the process-wide subscriber: logs on stdout and, when configured, the trace
/// exporter (idempotent: a second call is ignored).
pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(install);
}

fn install() {
    let filter = level_filter();
    let logs = if text_format() {
        tracing_subscriber::fmt::layer()
            .with_target(false)
            .with_writer(io::stdout)
            .with_filter(without_trace_spans(filter))
            .boxed()
    } else {
        json_layer(filter, io::stdout).boxed()
    };
    let _ = Registry::default()
        .with(logs)
        .with(otel::layer())
        .try_init();
}

/// Run one invocation's work inside `span`, then flush its trace spans (when traces are on),
/// waiting for the flush no later than the `deadline`'s cutoff: the answer always leaves
/// before the deadline.
pub(crate) async fn traced<F: Future>(span: Span, deadline: Deadline, work: F) -> F::Output {
    let output = work.instrument(span).await;
    otel::flush(deadline.cutoff_in()).await;
    output
}

/// The span of one invocation: every line logged inside it carries the request id, the X-Ray
/// trace id and the function's name; as a trace span, it continues Lambda's X-Ray trace.
pub(crate) fn invocation_span(context: &Context, function: &str) -> Span {
    let name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| function.to_string());
    let span = tracing::info_span!(
        "invocation",
        request_id = %context.request_id,
        trace_id = context.xray_trace_id.as_deref().unwrap_or(""),
        function = %name,
    );
    otel::set_parent(&span, context.xray_trace_id.as_deref());
    span
}
