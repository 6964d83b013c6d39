use std::sync::atomic::{AtomicUsize, Ordering};

use dynamodb_exactly_once::Deadline;
use lambda_runtime::service_fn;
use serde_json::{json, Value};

use super::*;
use crate::idempotency::{IdempotencyConfig, InMemory, Run};
use crate::processor::{Processor, RecordError};
use crate::source::{Batch, SourceKind, SourcePosition, SourceRecord};

type Store = Arc<Idempotency<InMemory>>;

fn store(enabled: bool) -> Store {
    let config = IdempotencyConfig::builder("fn")
        .cache_keys(0)
        .enabled(enabled)
        .build()
        .expect("config");
    Arc::new(Idempotency::new(InMemory::new(), config))
}

fn position(id: &str) -> SourcePosition {
    SourcePosition {
        kind: SourceKind::Sqs,
        source_arn: Some("arn:aws:sqs:us-east-1:1:q".into()),
        id: id.into(),
        shard_id: None,
        partition_key: None,
        message_group_id: None,
        sqs_sequence_number: None,
        sub_record: None,
        event_id: None,
        arrived_at_ms: None,
        kafka: None,
    }
}

fn record(id: &str, body: Value) -> Record<Value> {
    Record::new(body.clone(), position(id), body.to_string().into_bytes())
}

/// `service` made ready, then called once.
async fn oneshot<S: Service<R>, R>(service: &mut S, request: R) -> Result<S::Response, S::Error> {
    std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
    service.call(request).await
}

/// An inner service counting its calls: a receipt per order, `{"fail": true}` fails.
fn charging(
    calls: &Arc<AtomicUsize>,
) -> impl Service<
    Record<Value>,
    Response = String,
    Error = RecordError,
    Future = impl Future<Output = Result<String, RecordError>> + Send,
> + Clone
       + Send
       + Sync
       + 'static {
    let calls = Arc::clone(calls);
    service_fn(move |record: Record<Value>| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        async move {
            if record.body["fail"] == json!(true) {
                return Err(RecordError::retry("provider down"));
            }
            Ok(format!("receipt-{}-{n}", record.body["orderId"]))
        }
    })
}

#[tokio::test]
async fn the_inner_service_is_called_once_for_two_deliveries_and_the_duplicate_gets_its_response() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(
        store(true),
        "op",
        KeySource::pointer("/orderId").expect("ok"),
    );
    let mut service = layer.layer(charging(&calls));
    let order = json!({"orderId": "o-1", "cents": 250});
    // Two deliveries: the message redelivered, and the producer's resend (another message).
    let first = oneshot(&mut service, record("m-1", order.clone())).await;
    let again = oneshot(&mut service, record("m-1", order.clone())).await;
    let resent = oneshot(&mut service, record("m-2", order)).await;
    assert_eq!(first.ok().as_deref(), Some("receipt-\"o-1\"-0"));
    assert_eq!(again.ok().as_deref(), Some("receipt-\"o-1\"-0"));
    assert_eq!(resent.ok().as_deref(), Some("receipt-\"o-1\"-0"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Another key runs; the same key with another body is refused without a call.
    let other = oneshot(&mut service, record("m-3", json!({"orderId": "o-2"}))).await;
    assert_eq!(other.ok().as_deref(), Some("receipt-\"o-2\"-1"));
    let changed = oneshot(
        &mut service,
        record("m-4", json!({"orderId": "o-2", "x": 1})),
    )
    .await;
    assert!(matches!(
        changed,
        Err(IdempotencyError::PayloadMismatch { .. })
    ));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_failed_call_runs_again_and_a_record_without_a_key_is_never_served() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(
        store(true),
        "op",
        KeySource::pointer("/orderId").expect("ok"),
    );
    let mut service = layer.layer(charging(&calls));
    let failing = json!({"orderId": "o-1", "fail": true});
    for _ in 0..2 {
        let err = oneshot(&mut service, record("m-1", failing.clone()))
            .await
            .expect_err("fails");
        assert!(RecordError::from(err).is_retry());
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "released: the retry ran");
    let err = oneshot(&mut service, record("m-2", json!({"id": 1})))
        .await
        .expect_err("no key");
    assert!(matches!(
        err,
        IdempotencyError::Key(KeySourceError::Unreadable { .. })
    ));
    let RecordError::Reject(rejection) = RecordError::from(err) else {
        panic!("rejected");
    };
    assert_eq!(rejection.code.as_str(), "missing_idempotency_key");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn behind_the_processor_a_redelivered_batch_calls_nothing_again() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(store(true), "op", KeySource::Id);
    let processor = Processor::service_builder("payments", layer.layer(charging(&calls)))
        .build()
        .expect("processor");
    let bodies = [json!({"orderId": "a"}), json!({"orderId": "b"})];
    let batch = Batch {
        kind: SourceKind::Sqs,
        records: bodies
            .iter()
            .enumerate()
            .map(|(i, b)| SourceRecord {
                position: position(&format!("m{i}")),
                body: b.to_string().into_bytes(),
            })
            .collect(),
    };
    for _ in 0..2 {
        let report = processor.handle_batch(&batch, Deadline::none()).await;
        assert!(
            report.response.failed_ids().is_empty(),
            "{:?}",
            report.summary
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// Any request type: a key and a payload of its own.
#[derive(Debug, Clone, Serialize)]
struct Email {
    to: String,
    campaign: u32,
}

#[derive(Debug)]
struct ByRecipient;

impl RequestKey<Email> for ByRecipient {
    fn key(&self, email: &Email) -> Result<String, KeySourceError> {
        Ok(format!("{}/{}", email.campaign, email.to))
    }

    fn payload(&self, email: &Email) -> Value {
        json!(email)
    }
}

#[tokio::test]
async fn any_request_type_with_a_request_key_and_the_switch_for_unit_tests() {
    for (enabled, want) in [(true, 1), (false, 2)] {
        let sent = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&sent);
        let inner = service_fn(move |email: Email| {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, std::io::Error>(format!("{}#{n}", email.to)) }
        });
        let mut service = IdempotencyLayer::new(store(enabled), "op", ByRecipient).layer(inner);
        let email = Email {
            to: "a@example.com".into(),
            campaign: 7,
        };
        let first = oneshot(&mut service, email.clone()).await.expect("sent");
        let again = oneshot(&mut service, email).await.expect("answered");
        assert_eq!(first, "a@example.com#0");
        assert_eq!(sent.load(Ordering::SeqCst), want, "enabled: {enabled}");
        if enabled {
            assert_eq!(again, first);
        }
    }
    // The same through `run`: the stored result comes back as `Replayed`.
    let idem = store(true);
    let run = |n: u32| {
        idem.call("op", "k")
            .payload(&1)
            .run(move || async move { Ok::<_, String>(n) })
    };
    assert_eq!(run(1).await.ok(), Some(Run::Ran(1)));
    assert_eq!(run(2).await.ok(), Some(Run::Replayed(1)));
}
