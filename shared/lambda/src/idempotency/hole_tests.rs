//! The second review's scenarios (P1–P10), each pinned: effects that must not run twice,
//! batches that must not be discarded, keys that must meet Powertools'.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
