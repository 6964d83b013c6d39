//! The second review's P10, one test each: empty keys, empty arrays and objects as keys,
//! deadlines that are no epoch time, missing keys in the tower layer, payload pointers that
//! never match.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dynamodb_exactly_once::__private::epoch_millis;
use serde_json::{json, Value};

use super::*;
use crate::processor::Record;
use crate::source::{SourceKind, SourcePosition};

fn idempotency(config: IdempotencyConfigBuilder) -> Idempotency<InMemory> {
    Idempotency::new(
        InMemory::new(),
        config.cache_keys(0).build().expect("config"),
    )
}

fn record(body: Value) -> Record<Value> {
    let position = SourcePosition {
        kind: SourceKind::Sqs,
        source_arn: None,
        id: "m-1".into(),
        shard_id: None,
        partition_key: None,
        message_group_id: None,
        sqs_sequence_number: None,
        sub_record: None,
        event_id: None,
        arrived_at_ms: None,
        kafka: None,
    };
    Record::new(body.clone(), position, body.to_string().into_bytes())
}

#[tokio::test]
async fn an_empty_key_given_to_run_is_refused() {
    let idem = idempotency(IdempotencyConfig::builder("fn"));
    let run = idem
        .call("op", "")
        .run(|| async { Ok::<u8, String>(1) })
        .await;
    assert!(
        matches!(
            run,
            Err(IdempotencyError::Key(KeySourceError::Empty { .. }))
        ),
        "{run:?}"
    );
}

#[tokio::test]
async fn empty_arrays_and_objects_are_missing_keys_as_in_powertools() {
    let idem = idempotency(IdempotencyConfig::builder("fn"));
    let keys = KeySource::pointer("/orderId").expect("pointer");
    for empty in [json!([]), json!({}), json!([null]), json!({"a": null})] {
        let run = idem
            .run_record(
                "op",
                &keys,
                &record(json!({ "orderId": empty })),
                || async { Ok::<u8, String>(1) },
            )
            .await;
        assert!(
            matches!(run, Err(IdempotencyError::Key(_))),
            "{empty}: {run:?}"
        );
    }
    let real = idem
        .run_record("op", &keys, &record(json!({"orderId": [1]})), || async {
            Ok::<u8, String>(1)
        })
        .await;
    assert_eq!(real.ok(), Some(Run::Ran(1)));
}

#[tokio::test]
async fn a_deadline_that_is_no_epoch_time_still_holds_the_key() {
    let idem = idempotency(IdempotencyConfig::builder("fn"));
    // 0, a budget in ms (as `cargo lambda watch` gives), and a time already past.
    for (key, deadline) in [
        ("zero", 0),
        ("budget", 600_000),
        ("past", epoch_millis() - 5_000),
    ] {
        let calls = AtomicUsize::new(0);
        let held = idem
            .call("op", key)
            .deadline_ms(deadline)
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                let stored = idem.persistence().get(&format!("fn#op#{key}"));
                let until = match stored.map(|r| r.status) {
                    Some(Status::InProgress { until_ms }) => until_ms,
                    _ => 0,
                };
                Ok::<bool, String>(until > epoch_millis())
            })
            .await;
        assert_eq!(
            held.ok(),
            Some(Run::Ran(true)),
            "{key}: the claim held nothing"
        );
    }
}

#[tokio::test]
async fn the_tower_layer_runs_a_request_without_a_key_when_asked() {
    use tower_layer::Layer;
    use tower_service::Service;
    let config = IdempotencyConfig::builder("fn").on_missing_key(MissingKey::Run);
    let idem = Arc::new(idempotency(config));
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let inner = lambda_runtime::service_fn(move |_: Record<Value>| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Ok::<u8, String>(1) }
    });
    let keys = KeySource::pointer("/orderId").expect("pointer");
    let mut service = IdempotencyLayer::new(idem, "op", keys).layer(inner);
    for _ in 0..2 {
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .expect("ready");
        let answer = service.call(record(json!({"other": 1}))).await;
        assert_eq!(answer.ok(), Some(1));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_payload_pointer_that_matches_nothing_is_not_silently_off() {
    let logs = super::hole_tests::Logs::default();
    let subscriber =
        crate::telemetry::json_subscriber(tracing_subscriber::EnvFilter::new("info"), logs.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let config = IdempotencyConfig::builder("fn").validate_payload_at(["/detial"]);
    let idem = idempotency(config);
    let run = idem
        .call("op", "k")
        .payload(&json!({"detail": {"amount": 1}}))
        .run(|| async { Ok::<u8, String>(1) })
        .await;
    // Powertools hashes `null` too (a shared table must agree), so it runs: with a warning.
    assert_eq!(run.ok(), Some(Run::Ran(1)));
    let text = logs.text();
    assert!(
        text.contains("\"level\":\"WARN\"") && text.contains("/detial"),
        "silent: {text:?}"
    );
}
