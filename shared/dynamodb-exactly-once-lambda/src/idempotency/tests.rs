use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;

use std::sync::Mutex;

use dynamodb_exactly_once::__private::epoch_millis;

use super::*;

fn layer(cache_keys: usize) -> Idempotency<InMemory> {
    let config = IdempotencyConfig::builder("fn")
        .cache_keys(cache_keys)
        .build()
        .expect("config");
    Idempotency::new(InMemory::new(), config)
}

async fn count(
    idem: &Idempotency<InMemory>,
    calls: &AtomicUsize,
    key: &str,
    payload: serde_json::Value,
) -> Result<Run<u32>, IdempotencyError<String>> {
    idem.call("op", key)
        .payload(&payload)
        .run(|| async { Ok::<u32, String>(calls.fetch_add(1, Ordering::SeqCst) as u32 + 10) })
        .await
}

#[tokio::test]
async fn a_duplicate_gets_the_first_result_and_the_function_runs_once() {
    for cache in [0, 8] {
        let idem = layer(cache);
        let calls = AtomicUsize::new(0);
        let first = count(&idem, &calls, "k", json!({"a": 1}))
            .await
            .expect("ran");
        let again = count(&idem, &calls, "k", json!({"a": 1}))
            .await
            .expect("replayed");
        assert_eq!((first, again), (Run::Ran(10), Run::Replayed(10)));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let other = count(&idem, &calls, "k2", json!({"a": 1}))
            .await
            .expect("ran");
        assert_eq!(other, Run::Ran(11));
    }
}

#[tokio::test]
async fn another_payload_under_a_key_is_refused_not_replayed() {
    for cache in [0, 8] {
        let idem = layer(cache);
        let calls = AtomicUsize::new(0);
        let _ = count(&idem, &calls, "k", json!({"a": 1}))
            .await
            .expect("ran");
        let err = count(&idem, &calls, "k", json!({"a": 2}))
            .await
            .expect_err("mismatch");
        assert!(
            matches!(err, IdempotencyError::PayloadMismatch { .. }),
            "{err}"
        );
        assert_eq!(err.is_retryable(), Some(false));
    }
}

#[tokio::test]
async fn a_failed_run_releases_its_key_and_an_in_progress_one_holds_it() {
    let idem = layer(0);
    let failed = idem
        .call("op", "k")
        .payload(&1)
        .run(|| async { Err::<u32, _>("down".to_string()) })
        .await;
    assert!(matches!(failed, Err(IdempotencyError::Handler(ref e)) if e == "down"));
    assert!(idem.persistence().get("fn#op#k").is_none());
    // A claim held by a run that never finished (its process died) until its deadline.
    let until = epoch_millis() + 60_000;
    let claim = ClaimRequest::new("fn#op#held", "op", "other", epoch_millis(), until, 3600);
    assert_eq!(
        idem.persistence().claim(&claim).await.ok(),
        Some(Claim::Claimed)
    );
    let calls = AtomicUsize::new(0);
    let err = count(&idem, &calls, "held", json!(1))
        .await
        .expect_err("in progress");
    assert!(matches!(err, IdempotencyError::InProgress { until_ms } if until_ms == until));
    assert_eq!(err.is_retryable(), Some(true));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_claim_past_its_deadline_is_taken_over() {
    let idem = layer(0);
    let calls = AtomicUsize::new(0);
    // A run whose deadline passed while its function hung (the future is dropped).
    let hung = tokio::time::timeout(
        Duration::from_millis(20),
        idem.call("op", "k")
            .payload(&1)
            .deadline_ms(epoch_millis() + 50)
            .run(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok::<u32, String>(0)
            }),
    )
    .await;
    assert!(hung.is_err(), "cut off");
    let early = count(&idem, &calls, "k", json!(1)).await;
    assert!(matches!(early, Err(IdempotencyError::InProgress { .. })));
    tokio::time::sleep(Duration::from_millis(60)).await;
    let retried = count(&idem, &calls, "k", json!(1)).await.expect("ran");
    assert_eq!(retried, Run::Ran(10));
}

#[tokio::test]
async fn turned_off_the_function_always_runs() {
    let config = IdempotencyConfig::builder("fn")
        .enabled(false)
        .build()
        .expect("config");
    let idem = Idempotency::new(InMemory::new(), config);
    let calls = AtomicUsize::new(0);
    let _ = count(&idem, &calls, "k", json!(1)).await.expect("ran");
    let _ = count(&idem, &calls, "k", json!(1)).await.expect("ran");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn configurations_are_validated_when_built() {
    assert!(IdempotencyConfig::builder("").build().is_err());
    let err = IdempotencyConfig::builder("fn")
        .in_progress_expiry(Duration::from_millis(10))
        .build()
        .expect_err("too short");
    assert_eq!(err.setting, "in_progress_expiry");
    let err = IdempotencyConfig::builder("fn")
        .validate_payload_at(["detail"])
        .build()
        .expect_err("not a pointer");
    assert_eq!(err.setting, "validate_payload_at");
}

#[tokio::test]
async fn a_record_runs_once_per_key_held_until_its_deadline_and_one_without_a_key_never_runs() {
    use crate::processor::Record;
    use crate::source::{SourceKind, SourcePosition};
    let idem = layer(0);
    let keys = KeySource::pointer("/orderId").expect("valid");
    let mut position = SourcePosition {
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
    let body = json!({"orderId": "o-1", "cents": 5});
    let deadline = epoch_millis() + 60_000;
    let record = |position: &SourcePosition, body: &serde_json::Value| {
        Record::new(
            body.clone(),
            position.clone(),
            body.to_string().into_bytes(),
        )
        .with_deadline_ms(Some(deadline))
    };
    let calls = AtomicUsize::new(0);
    let first = idem
        .run_record("op", &keys, &record(&position, &body), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            // While it runs, the key is held until the record's deadline.
            let held = idem.persistence().get("fn#op#o-1").map(|r| r.status);
            Ok::<_, String>(held == Some(Status::InProgress { until_ms: deadline }))
        })
        .await;
    assert_eq!(first.ok(), Some(Run::Ran(true)));
    // The producer sent the order again: another message, the same key and body.
    position.id = "m-2".into();
    let again = idem
        .run_record("op", &keys, &record(&position, &body), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(false)
        })
        .await;
    assert_eq!(again.ok(), Some(Run::Replayed(true)));
    let keyless = idem
        .run_record(
            "op",
            &keys,
            &record(&position, &json!({"id": 1})),
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(false)
            },
        )
        .await;
    assert!(matches!(keyless, Err(IdempotencyError::Key(_))));
    assert_eq!(keyless.err().and_then(|e| e.is_retryable()), Some(false));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_processor_gives_each_record_the_invocations_cutoff_as_its_deadline() {
    use crate::processor::{Processor, Record};
    use crate::source::{Batch, SourceKind, SourcePosition, SourceRecord};
    use dynamodb_exactly_once::Deadline;
    let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let into = std::sync::Arc::clone(&seen);
    let processor = Processor::builder("fn", move |record: Record<serde_json::Value>| {
        let into = std::sync::Arc::clone(&into);
        async move {
            if let Ok(mut seen) = into.lock() {
                seen.push(record.deadline_ms());
            }
            Ok(())
        }
    })
    .build()
    .expect("processor");
    let batch = Batch {
        kind: SourceKind::Sqs,
        records: vec![SourceRecord {
            position: SourcePosition {
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
            },
            body: b"{}".to_vec(),
        }],
    };
    let at = epoch_millis() + 60_000;
    let deadline = Deadline::from_epoch_ms(at, Duration::from_secs(2));
    let _ = processor.handle_batch(&batch, deadline).await;
    let _ = processor.handle_batch(&batch, Deadline::none()).await;
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(seen, vec![deadline.cutoff_epoch_ms(), None]);
    assert!(
        seen[0].is_some_and(|ms| ms < at && ms + 1000 > at),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_late_copy_of_a_claim_does_not_reopen_the_completed_key() {
    let store = InMemory::new();
    let now = epoch_millis();
    let claim = ClaimRequest::new("fn#op#k", "op", "t", now, now + 60_000, 3600);
    assert_eq!(store.claim(&claim).await.ok(), Some(Claim::Claimed));
    assert_eq!(
        store.claim(&claim).await.ok(),
        Some(Claim::Claimed),
        "a retry"
    );
    let _ = store
        .complete("fn#op#k", "t", Some(b"1"), claim.expires_at_s)
        .await
        .expect("completed");
    let late = store.claim(&claim).await.expect("answered");
    assert!(
        matches!(
            late,
            Claim::Existing(StoredRecord {
                status: Status::Completed { .. },
                ..
            })
        ),
        "{late:?}"
    );
}
