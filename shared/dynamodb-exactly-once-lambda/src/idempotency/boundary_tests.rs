//! The layer at the edges of its schedules: two call sites with one key, a panicking
//! function, `expires_after` shorter than a deadline, a takeover of a slow run, payloads resent
//! in another envelope, stored results a new type cannot read, the counters.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use serde_json::json;

use dynamodb_exactly_once::__private::epoch_millis;

use super::*;

/// How long a completed record is kept by default.
fn default_expiry() -> Duration {
    IdempotencyConfig::builder("fn")
        .build()
        .expect("the defaults are valid")
        .expires_after()
}

fn layer(cache_keys: usize, expires_after: Duration) -> Idempotency<InMemory> {
    let config = IdempotencyConfig::builder("fn")
        .cache_keys(cache_keys)
        .expires_after(expires_after)
        .in_progress_expiry(Duration::from_secs(1))
        .build()
        .expect("config");
    Idempotency::new(InMemory::new(), config)
}

#[tokio::test]
async fn two_call_sites_with_one_key_each_run_once() {
    let idem = layer(8, default_expiry());
    let (charged, emailed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let order = json!({"orderId": "o-1"});
    for _ in 0..2 {
        let _ = idem
            .call("charge", "o-1")
            .payload(&order)
            .run(|| async {
                charged.fetch_add(1, Ordering::SeqCst);
                Ok::<(), String>(())
            })
            .await
            .expect("charge");
        let _ = idem
            .call("email", "o-1")
            .payload(&order)
            .run(|| async {
                emailed.fetch_add(1, Ordering::SeqCst);
                Ok::<(), String>(())
            })
            .await
            .expect("email");
    }
    assert_eq!(charged.load(Ordering::SeqCst), 1);
    assert_eq!(
        emailed.load(Ordering::SeqCst),
        1,
        "the email was never sent"
    );
}

#[tokio::test]
async fn a_panic_in_the_function_releases_the_key_so_an_immediate_retry_runs() {
    let idem = layer(0, default_expiry());
    let deadline = Some(epoch_millis() + 60_000);
    let panicked =
        std::panic::AssertUnwindSafe(idem.call("op", "k").payload(&1).deadline_ms(deadline).run(
            || async {
                if deadline.is_some() {
                    panic!("the function panicked");
                }
                Ok::<u32, String>(0)
            },
        ))
        .catch_unwind()
        .await;
    assert!(panicked.is_err(), "the panic goes on to the caller");
    let retry = idem
        .call("op", "k")
        .payload(&1)
        .deadline_ms(deadline)
        .run(|| async { Ok::<u32, String>(7) })
        .await;
    assert_eq!(retry.ok(), Some(Run::Ran(7)));
}

#[tokio::test]
async fn expires_after_shorter_than_the_deadline_never_frees_a_key_in_progress() {
    let idem = layer(0, Duration::from_secs(1));
    let start = epoch_millis();
    let deadline = start + 10_000;
    // A claims with a 10 s deadline and hangs (its future is dropped, its claim stays).
    let hung = tokio::time::timeout(
        Duration::from_millis(20),
        idem.call("op", "k")
            .payload(&1)
            .deadline_ms(deadline)
            .run(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok::<u32, String>(0)
            }),
    )
    .await;
    assert!(hung.is_err(), "cut off");
    // B, 1.5 s later (past expires_after, long before A's deadline), finds it in progress.
    let record = idem.persistence().get("fn#op#k").expect("claimed");
    let b = ClaimRequest::new("fn#op#k", "op", "b", start + 1_500, start + 11_500, 1)
        .with_payload_hash(record.payload_hash.clone());
    let found = idem.persistence().claim(&b).await.expect("answered");
    assert!(matches!(found, Claim::Existing(_)), "{found:?}");
    // A result is kept expires_after from its completion, not from its claim.
    let slow = layer(0, Duration::from_secs(1));
    let _ = slow
        .call("op", "k")
        .payload(&1)
        .deadline_ms(deadline)
        .run(|| async {
            tokio::time::sleep(Duration::from_millis(1_100)).await;
            Ok::<u32, String>(1)
        })
        .await
        .expect("ran");
    let again = slow
        .call("op", "k")
        .payload(&1)
        .deadline_ms(deadline)
        .run(|| async { Ok::<u32, String>(2) });
    assert_eq!(again.await.ok(), Some(Run::Replayed(1)));
}

#[tokio::test]
async fn a_run_whose_key_was_taken_over_neither_counts_as_stored_nor_caches_its_value() {
    let idem = layer(8, default_expiry());
    let start = epoch_millis();
    // A holds the key for 50 ms and runs for 150 ms; C takes the key over at 80 ms.
    let a = idem
        .call("op", "k")
        .payload(&1)
        .deadline_ms(start + 50)
        .run(|| async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            Ok::<String, String>("receipt-1".into())
        });
    let c = async {
        tokio::time::sleep(Duration::from_millis(80)).await;
        idem.call("op", "k")
            .payload(&1)
            .deadline_ms(start + 60_000)
            .run(|| async { Ok::<String, String>("receipt-2".into()) })
            .await
    };
    let (a, c) = tokio::join!(a, c);
    assert_eq!(c.ok(), Some(Run::Ran("receipt-2".to_string())));
    let a = a.expect("a ran");
    assert_ne!(
        a,
        Run::Ran("receipt-1".to_string()),
        "A's result is not the stored one"
    );
    assert_eq!(a, Run::NotStored("receipt-1".to_string()));
    assert_eq!(idem.stats().result_not_stored, 1);
    let d = idem
        .call("op", "k")
        .payload(&1)
        .run(|| async { Ok::<String, String>("receipt-3".into()) });
    assert_eq!(d.await.ok(), Some(Run::Replayed("receipt-2".to_string())));
}

#[tokio::test]
async fn a_resend_with_another_envelope_or_number_spelling_is_a_duplicate() {
    let idem = layer(0, default_expiry());
    let first = json!({"id": "e-1", "detail": {"orderId": "o-1", "amount": 1}});
    let resend: serde_json::Value =
        serde_json::from_str(r#"{"detail": {"amount": 1.0, "orderId": "o-1"}, "id": "e-1"}"#)
            .expect("json");
    let _ = idem
        .call("op", "o-1")
        .payload(&first)
        .run(|| async { Ok::<u32, String>(1) })
        .await
        .expect("ran");
    let again = idem
        .call("op", "o-1")
        .payload(&resend)
        .run(|| async { Ok::<u32, String>(2) });
    assert_eq!(
        again.await.ok(),
        Some(Run::Replayed(1)),
        "1 and 1.0 are one number"
    );
    // An EventBridge resend: a new `id`, the same `detail`.
    let config = IdempotencyConfig::builder("fn")
        .validate_payload_at(["/detail"])
        .build()
        .expect("config");
    let idem = Idempotency::new(InMemory::new(), config);
    let _ = idem
        .call("op", "o-1")
        .payload(&first)
        .run(|| async { Ok::<u32, String>(1) })
        .await
        .expect("ran");
    let resent = json!({"id": "e-2", "detail": {"orderId": "o-1", "amount": 1}});
    let again = idem
        .call("op", "o-1")
        .payload(&resent)
        .run(|| async { Ok::<u32, String>(2) });
    assert_eq!(again.await.ok(), Some(Run::Replayed(1)));
    let changed = json!({"id": "e-3", "detail": {"orderId": "o-1", "amount": 2}});
    let again = idem
        .call("op", "o-1")
        .payload(&changed)
        .run(|| async { Ok::<u32, String>(3) });
    assert!(matches!(
        again.await,
        Err(IdempotencyError::PayloadMismatch { .. })
    ));
}

#[tokio::test]
async fn a_record_without_a_key_runs_without_idempotency_when_asked() {
    use crate::processor::Record;
    use crate::source::{SourceKind, SourcePosition};
    let config = IdempotencyConfig::builder("fn")
        .on_missing_key(MissingKey::Run)
        .build()
        .expect("config");
    let idem = Idempotency::new(InMemory::new(), config);
    let keys = KeySource::pointer("/orderId").expect("valid");
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
    let body = json!({"other": 1});
    let record = Record::new(body.clone(), position, body.to_string().into_bytes());
    for _ in 0..2 {
        let run = idem.run_record("op", &keys, &record, || async { Ok::<u32, String>(1) });
        assert_eq!(run.await.ok(), Some(Run::NotStored(1)));
    }
    let strict = layer(0, default_expiry());
    let run = strict.run_record("op", &keys, &record, || async { Ok::<u32, String>(1) });
    assert!(matches!(run.await, Err(IdempotencyError::Key(_))));
}

#[tokio::test]
async fn replays_and_in_progress_refusals_are_counted() {
    let idem = layer(0, default_expiry());
    let _ = idem
        .call("op", "k")
        .payload(&1)
        .run(|| async { Ok::<u32, String>(1) })
        .await
        .expect("ran");
    let _ = idem
        .call("op", "k")
        .payload(&1)
        .run(|| async { Ok::<u32, String>(1) })
        .await
        .expect("replayed");
    let now = epoch_millis();
    let held = ClaimRequest::new("fn#op#held", "op", "t", now, now + 60_000, 3600);
    let _ = idem.persistence().claim(&held).await.expect("claimed");
    let refused = idem
        .call("op", "held")
        .payload(&1)
        .run(|| async { Ok::<u32, String>(1) })
        .await;
    assert!(refused.is_err());
    let stats = idem.stats();
    assert_eq!(
        (stats.ran, stats.replayed, stats.in_progress),
        (1, 1, 1),
        "{stats:?}"
    );
}

#[test]
fn a_namespace_with_a_hash_sign_is_refused() {
    assert!(IdempotencyConfig::builder("a#b").build().is_err());
}

#[tokio::test]
async fn a_stored_result_this_type_cannot_read_is_acknowledged_as_completed() {
    let idem = layer(0, default_expiry());
    let _ = idem
        .call("op", "k")
        .payload(&1)
        .run(|| async { Ok::<String, String>("v1".into()) })
        .await
        .expect("ran");
    let after_deploy = idem
        .call("op", "k")
        .payload(&1)
        .run(|| async { Ok::<u64, String>(2) })
        .await;
    assert!(after_deploy.is_ok(), "{after_deploy:?}");
    assert!(
        matches!(
            after_deploy,
            Ok(Run::ReplayedWithoutValue(NoValue::Unreadable { .. }))
        ),
        "{after_deploy:?}"
    );
    assert_eq!(idem.stats().replayed_without_value, 1);
}
