//! Structured JSON logs through `tracing`: one JSON object per line, fields flattened, level
//! from `RUST_LOG` or `AWS_LAMBDA_LOG_LEVEL` (default `info`). Payloads are never logged at
//! INFO.

use tracing_subscriber::EnvFilter;

/// Install the JSON subscriber (idempotent: a second call is ignored).
pub fn init() {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .or_else(|| {
            std::env::var("AWS_LAMBDA_LOG_LEVEL")
                .ok()
                .map(|l| l.to_lowercase())
        })
        .unwrap_or_else(|| "info".into());
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(false)
        .with_env_filter(EnvFilter::new(filter))
        .try_init();
}
