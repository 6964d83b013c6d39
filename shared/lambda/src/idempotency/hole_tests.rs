//! The second review's scenarios (P1–P10), each pinned: effects that must not run twice,
//! batches that must not be discarded, keys that must meet Powertools'.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dynamodb_exactly_once::ddb::clock::epoch_millis;
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Value};

use super::*;
use crate::dead_letter::ReportOnly;
use crate::processor::{Processor, Record, RecordError};
use crate::source::{Batch, SourceKind, SourcePosition, SourceRecord};

fn idempotency(config: IdempotencyConfigBuilder) -> Arc<Idempotency<InMemory>> {
    let config = config.cache_keys(0).build().expect("config");
    Arc::new(Idempotency::new(InMemory::new(), config))
}

fn position(kind: SourceKind, id: &str) -> SourcePosition {
    SourcePosition {
        kind,
        source_arn: Some("arn:aws:kinesis:us-east-1:1:stream/s".into()),
        id: id.into(),
        shard_id: matches!(kind, SourceKind::Kinesis).then(|| "shardId-0".into()),
        partition_key: matches!(kind, SourceKind::Kinesis).then(|| "pk".into()),
        message_group_id: None,
        sqs_sequence_number: None,
        sub_record: None,
        event_id: None,
        arrived_at_ms: None,
    }
}

fn batch(kind: SourceKind, bodies: &[Value]) -> Batch {
    Batch {
        kind,
        records: bodies
            .iter()
            .enumerate()
            .map(|(i, body)| SourceRecord {
                position: position(kind, &format!("{}", 100 + i)),
                body: body.to_string().into_bytes(),
            })
            .collect(),
    }
}

#[tokio::test]
async fn p1_a_result_that_cannot_be_serialized_keeps_the_key_and_the_redelivery_replays() {
    let idem = idempotency(IdempotencyConfig::builder("fn"));
    let charges = Arc::new(AtomicUsize::new(0));
    let (store, count) = (Arc::clone(&idem), Arc::clone(&charges));
    let processor = Processor::builder("payments", move |record: Record<Value>| {
        let (store, count) = (Arc::clone(&store), Arc::clone(&count));
        async move {
            let keys =
                KeySource::pointer("/orderId").map_err(|e| RecordError::retry(e.to_string()))?;
            let run = store
                .run_record("charge", &keys, &record, || async {
                    count.fetch_add(1, Ordering::SeqCst);
                    // serde_json refuses it ("key must be a string"), after the charge.
                    Ok::<_, RecordError>(HashMap::from([((1u8, 2u8), 3u32)]))
                })
                .await?;
            let _ = run.is_replayed();
            Ok(())
        }
    })
    .dead_letters(ReportOnly)
    .build()
    .expect("processor");
    let sqs = batch(SourceKind::Sqs, &[json!({"orderId": "o-1"})]);
    for delivery in 0..2 {
        let report = processor.handle_batch(&sqs, Deadline::none()).await;
        assert!(
            report.response.failed_ids().is_empty(),
            "delivery {delivery}: {:?}",
            report.summary
        );
    }
    assert_eq!(
        charges.load(Ordering::SeqCst),
        1,
        "charged on every receive"
    );
    assert_eq!(idem.stats().replayed_without_value, 1, "{:?}", idem.stats());
}

/// A processor charging `/orderId` once through `run_record`, counting its runs per order.
fn charging(
    idem: &Arc<Idempotency<InMemory>>,
    runs: &Arc<std::sync::Mutex<Vec<String>>>,
) -> crate::processor::ProcessorBuilder<Value> {
    let (store, runs) = (Arc::clone(idem), Arc::clone(runs));
    Processor::builder("payments", move |record: Record<Value>| {
        let (store, runs) = (Arc::clone(&store), Arc::clone(&runs));
        async move {
            let keys =
                KeySource::pointer("/orderId").map_err(|e| RecordError::retry(e.to_string()))?;
            let order = record.body["orderId"].to_string();
            let _ = store
                .run_record("charge", &keys, &record, || async {
                    if let Ok(mut runs) = runs.lock() {
                        runs.push(order);
                    }
                    Ok::<_, RecordError>(1u8)
                })
                .await?;
            Ok(())
        }
    })
}

#[tokio::test]
async fn p2_a_key_held_briefly_by_another_run_is_waited_for_not_reported_on_an_ordered_stream() {
    let idem = idempotency(IdempotencyConfig::builder("fn"));
    let runs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let processor = charging(&idem, &runs)
        .dead_letters(ReportOnly)
        .build()
        .expect("processor");
    // Another actor (a run in another shard, or one that died) holds `k` for one more second.
    let now = epoch_millis();
    let held = ClaimRequest::new("fn#charge#k", "charge", "other", now, now + 1000, 3600);
    assert_eq!(
        idem.persistence().claim(&held).await.ok(),
        Some(Claim::Claimed)
    );
    let bodies = [
        json!({"orderId": "k"}),
        json!({"orderId": "r2"}),
        json!({"orderId": "r3"}),
    ];
    let kinesis = batch(SourceKind::Kinesis, &bodies);
    let deadline = Deadline::from_epoch_ms(now + 10_000, Duration::from_secs(2));
    let report = processor.handle_batch(&kinesis, deadline).await;
    assert!(
        report.response.failed_ids().is_empty(),
        "reported at once, burning the mapping's retries: {:?}",
        report.summary
    );
    let runs = runs.lock().map(|r| r.clone()).unwrap_or_default();
    assert_eq!(runs, ["\"k\"", "\"r2\"", "\"r3\""]);
    assert!(epoch_millis() >= now + 1000, "k ran only after the hold");
}

#[tokio::test]
async fn p2_a_hold_past_the_records_own_cutoff_is_reported_at_once() {
    let idem = idempotency(IdempotencyConfig::builder("fn"));
    let runs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let processor = charging(&idem, &runs)
        .dead_letters(ReportOnly)
        .build()
        .expect("processor");
    let now = epoch_millis();
    let held = ClaimRequest::new("fn#charge#k", "charge", "other", now, now + 600_000, 3600);
    assert_eq!(
        idem.persistence().claim(&held).await.ok(),
        Some(Claim::Claimed)
    );
    let kinesis = batch(
        SourceKind::Kinesis,
        &[json!({"orderId": "k"}), json!({"orderId": "r2"})],
    );
    let deadline = Deadline::from_epoch_ms(now + 10_000, Duration::from_secs(2));
    let report = processor.handle_batch(&kinesis, deadline).await;
    assert_eq!(
        report.response.failed_ids(),
        ["100", "101"],
        "{:?}",
        report.summary
    );
    assert!(
        epoch_millis() < now + 2000,
        "no wait for a hold that outlasts the invocation"
    );
    assert!(runs.lock().map(|r| r.is_empty()).unwrap_or(false));
}
