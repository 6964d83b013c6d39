//! Traces as an X-Ray / OpenTelemetry user receives them: with `OTEL_EXPORTER_OTLP_ENDPOINT`
//! set, one invocation exports its span (a child of Lambda's X-Ray trace), a batch span and a
//! span per DynamoDB call, before the invocation returns; an invocation X-Ray did not sample
//! exports nothing. The collector is a loopback HTTP server that keeps what it receives. A
//! collector that does not answer never makes the invocation answer after its deadline.
//!
//! Its own test binary: `telemetry::init` installs the process-wide subscriber, exporting to
//! one collector per process; the tests take turns on it.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use dev_testing::client;
use lambda_runtime::{Context, LambdaEvent};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};

type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// While set, the collector holds each request this long before it answers.
static STALLED: AtomicBool = AtomicBool::new(false);
const STALL: Duration = Duration::from_secs(6);

/// One test at a time uses the process's collector.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The process's OTLP/HTTP collector on a free loopback port (every request's path and body),
/// installed as the trace exporter's endpoint.
fn collector() -> Received {
    static COLLECTOR: OnceLock<Received> = OnceLock::new();
    COLLECTOR
        .get_or_init(|| {
            let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
            let endpoint = format!("http://{}", listener.local_addr().expect("address"));
            let received = Received::default();
            let keep = received.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let keep = keep.clone();
                    std::thread::spawn(move || serve(stream, &keep));
                }
            });
            std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
            dynamodb_exactly_once_lambda::telemetry::init();
            received
        })
        .clone()
}

/// Answer HTTP/1.1 requests on one connection (keep-alive) with 200 and an empty body (after
/// [`STALL`] while [`STALLED`]).
fn serve(stream: TcpStream, received: &Received) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut stream = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_string();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        received.lock().expect("lock").push((path, body));
        if STALLED.load(Ordering::SeqCst) {
            std::thread::sleep(STALL);
        }
        let answer =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// Every span received so far.
fn spans(received: &Received) -> Vec<Span> {
    let bodies = received.lock().expect("lock").clone();
    bodies
        .iter()
        .inspect(|(path, _)| assert_eq!(path, "/v1/traces"))
        .flat_map(|(_, body)| {
            let request =
                ExportTraceServiceRequest::decode(body.as_slice()).expect("OTLP protobuf");
            request
                .resource_spans
                .into_iter()
                .flat_map(|r| r.scope_spans)
                .flat_map(|s| s.spans)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .map(|v| match v {
            V::StringValue(s) => s.clone(),
            V::IntValue(i) => i.to_string(),
            other => format!("{other:?}"),
        })
}

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

fn event(bodies: &[Value]) -> Value {
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| json!({"eventSource":"aws:sqs","messageId":format!("m{i}"),"body":b.to_string()}))
        .collect();
    json!({ "Records": records })
}

#[tokio::test]
async fn a_batch_exports_its_invocation_batch_and_dynamodb_spans_under_the_xray_trace() {
    let _turn = TURN.lock().await;
    let received = collector();
    let (w, _) = ratchet_writer(client()).await;

    // Given an invocation X-Ray sampled.
    let mut context = Context::default();
    context.request_id = "req-traced".into();
    context.xray_trace_id =
        Some("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1".into());
    let bodies = [put("u", "a", 1, json!({})), put("u", "b", 1, json!({}))];

    // When it is handled.
    let _ = w
        .handle(LambdaEvent::new(event(&bodies), context))
        .await
        .expect("handled");

    // Then its spans reached the collector before the invocation returned.
    let spans = spans(&received);
    let trace_id = bytes("5759e988bd862e3fe1be46a994272793");
    let named = |name: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == name).collect() };
    let invocation = named("invocation");
    assert_eq!(invocation.len(), 1, "{spans:?}");
    let invocation = invocation[0];
    assert_eq!(
        invocation.trace_id, trace_id,
        "the invocation continues X-Ray's trace"
    );
    assert_eq!(invocation.parent_span_id, bytes("53995c3f42cd8ad8"));
    assert_eq!(
        attribute(invocation, "request_id").as_deref(),
        Some("req-traced")
    );
    let batch = named("batch");
    assert_eq!(batch.len(), 1, "{spans:?}");
    assert_eq!(batch[0].parent_span_id, invocation.span_id);
    assert_eq!(attribute(batch[0], "records").as_deref(), Some("2"));
    let puts = named("DynamoDB.PutItem");
    assert_eq!(puts.len(), 2, "one span per DynamoDB call: {spans:?}");
    for put in puts {
        assert_eq!(put.trace_id, trace_id);
        assert_eq!(put.parent_span_id, batch[0].span_id);
        assert_eq!(attribute(put, "rpc.system").as_deref(), Some("aws-api"));
        assert_eq!(attribute(put, "rpc.service").as_deref(), Some("DynamoDB"));
    }

    // Given an invocation X-Ray did not sample: nothing of its trace is exported.
    let before = received.lock().expect("lock").len();
    let mut context = Context::default();
    context.xray_trace_id =
        Some("Root=1-5759e988-00000000000000000000beef;Parent=53995c3f42cd8ad8;Sampled=0".into());
    let _ = w
        .handle(LambdaEvent::new(event(&bodies[..1]), context))
        .await
        .expect("handled");
    let unsampled = bytes("5759e98800000000000000000000beef");
    assert!(
        self::spans(&received)
            .iter()
            .all(|s| s.trace_id != unsampled),
        "an unsampled invocation exported spans"
    );
    assert!(received.lock().expect("lock").len() >= before);
}

#[tokio::test]
async fn a_collector_that_does_not_answer_never_delays_the_answer_past_the_deadline() {
    let _turn = TURN.lock().await;
    let _received = collector();
    let (w, _) = ratchet_writer(client()).await;
    // Given a collector that holds every export longer than the invocation has left
    STALLED.store(true, Ordering::SeqCst);
    let budget = Duration::from_millis(3000);
    let mut context = Context::default();
    context.deadline = dynamodb_exactly_once::__private::epoch_millis() + budget.as_millis() as u64;
    context.xray_trace_id =
        Some("Root=1-5759e988-bd862e3fe1be46a99427abcd;Parent=53995c3f42cd8ad8;Sampled=1".into());

    // When an invocation is handled
    let started = Instant::now();
    let response = w
        .handle(LambdaEvent::new(
            event(&[put("u", "t", 1, json!({}))]),
            context,
        ))
        .await
        .expect("handled");
    let took = started.elapsed();
    STALLED.store(false, Ordering::SeqCst);

    // Then it answers before its deadline, its record applied
    assert!(response.failed_ids().is_empty());
    assert!(took < budget, "answered after {took:?}");
    // (the held export ends before the next test's turn)
    tokio::time::sleep(STALL).await;
}
