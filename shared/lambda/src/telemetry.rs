//! Structured logs through `tracing`, as `lambda_runtime` documents them:
//!
//! * **Level**: `AWS_LAMBDA_LOG_LEVEL` (set by Lambda's advanced logging controls), else
//!   `RUST_LOG`, else `info`.
//! * **Format**: `AWS_LAMBDA_LOG_FORMAT=TEXT` gives plain text lines; anything else (`JSON`, or
//!   unset) one JSON object per line, event fields flattened, with a `level` field Lambda's
//!   log-level filtering understands.
//! * **Context**: every line written while an invocation is handled carries the invocation's
//!   span ([`invocation_span`]): `request_id`, `trace_id` (X-Ray) and `function`, so "what
//!   happened to record X" is one CloudWatch Logs Insights query.
//!
//! Payloads are never logged: rejection messages quote at most a few dozen characters of an
//! offending value.

use std::io;

use lambda_runtime::Context;
use tracing::Span;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// The log level filter: `AWS_LAMBDA_LOG_LEVEL`, else `RUST_LOG`, else `info`.
pub fn level_filter() -> EnvFilter {
    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .ok()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.to_lowercase())
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".into());
    EnvFilter::new(level)
}

/// Whether `AWS_LAMBDA_LOG_FORMAT` asks for plain text.
pub fn text_format() -> bool {
    std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("text"))
}

/// The JSON subscriber writing to `writer` (tests capture lines with it).
pub fn json_subscriber<W>(filter: EnvFilter, writer: W) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_span_list(false)
        .with_target(false)
        .with_env_filter(filter)
        .with_writer(writer)
        .finish()
}

/// Install the process-wide subscriber (idempotent: a second call is ignored).
pub fn init() {
    let filter = level_filter();
    let _ = if text_format() {
        tracing_subscriber::fmt()
            .with_target(false)
            .with_env_filter(filter)
            .with_writer(io::stdout)
            .try_init()
    } else {
        tracing::subscriber::set_global_default(json_subscriber(filter, io::stdout))
            .map_err(Into::into)
    };
}

/// The span of one invocation: every line logged inside it carries the request id, the X-Ray
/// trace id and the function's name.
pub fn invocation_span(context: &Context, function: &str) -> Span {
    let name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| function.to_string());
    tracing::info_span!(
        "invocation",
        request_id = %context.request_id,
        trace_id = context.xray_trace_id.as_deref().unwrap_or(""),
        function = %name,
    )
}
