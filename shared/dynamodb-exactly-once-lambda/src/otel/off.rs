//! Without the feature `otel`: no exporter; the same functions, doing nothing.

use std::time::Duration;

use tracing::Span;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::enabled;

/// Always `None` in a build without the feature `otel`; says so once on stderr when the
/// environment asks for traces ([`enabled`]).
pub(crate) fn layer<S>() -> Option<Box<dyn Layer<S> + Send + Sync>>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    if enabled() {
        eprintln!(
            "traces off: OTEL_EXPORTER_OTLP_ENDPOINT is set, but this build of \
             dynamodb-exactly-once-lambda has no `otel` feature"
        );
    }
    None
}

/// No effect in a build without the feature `otel`.
pub(crate) fn set_parent(_span: &Span, _header: Option<&str>) {}

/// No effect in a build without the feature `otel`.
pub(crate) async fn flush(_limit: Option<Duration>) {}
