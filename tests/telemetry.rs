//! Logs and metrics as an operator reads them: every line logged while a batch is handled
//! carries the invocation's request id, trace id and function name.

use crate::common;

use common::*;
use dev_testing::client;
use dynamodb_exactly_once_lambda::__private::json_subscriber;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};
use tracing_subscriber::EnvFilter;

#[tokio::test]
async fn every_line_of_a_batch_carries_the_request_id() {
    let (w, _) = ratchet_writer(client()).await;
    let capture = LogCapture::default();
    let _guard =
        tracing::subscriber::set_default(json_subscriber(EnvFilter::new("info"), capture.clone()));
    let mut context = Context::default();
    context.request_id = "req-7f3a".into();
    context.xray_trace_id = Some("Root=1-abc".into());
    let bodies = [put("u", "a", 1, json!({})), json!("not a record")];
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| json!({"eventSource":"aws:sqs","messageId":format!("m{i}"),"body":b.to_string()}))
        .collect();

    let _ = w
        .handle(LambdaEvent::new(json!({ "Records": records }), context))
        .await
        .expect("handled");

    let text = capture.text();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert!(
        lines.len() >= 2,
        "a WARN for the rejected record and the summary: {text}"
    );
    for line in &lines {
        assert_eq!(line["span"]["request_id"], "req-7f3a", "{line}");
        assert_eq!(line["span"]["trace_id"], "Root=1-abc", "{line}");
        assert_eq!(line["span"]["function"], "ratchet-writer", "{line}");
        assert!(
            line["level"].is_string(),
            "Lambda's log filter needs a level: {line}"
        );
    }
    assert!(lines.iter().any(|l| l["message"] == "batch summary"));
}
