//! The second review's scenarios (P1–P10), each pinned: effects that must not run twice,
//! batches that must not be discarded, keys that must meet Powertools'.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::client::offline_client;
use std::time::Duration;

use dynamodb_exactly_once::__private::epoch_millis;
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
        kafka: None,
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

/// The in-memory store spelling keys and hashes as Powertools does.
#[derive(Debug, Default)]
struct PowertoolsInMemory(InMemory);

impl Persistence for PowertoolsInMemory {
    async fn claim(
        &self,
        request: &ClaimRequest,
    ) -> Result<Claim, dynamodb_exactly_once::StoreError> {
        self.0.claim(request).await
    }

    async fn complete(
        &self,
        key: &str,
        token: &str,
        result: Option<&[u8]>,
        expires_at_s: u64,
    ) -> Result<Completion, dynamodb_exactly_once::StoreError> {
        self.0.complete(key, token, result, expires_at_s).await
    }

    async fn release(
        &self,
        key: &str,
        token: &str,
    ) -> Result<(), dynamodb_exactly_once::StoreError> {
        self.0.release(key, token).await
    }

    fn format(&self) -> RecordFormat {
        RecordFormat::Powertools
    }
}

/// An inner service counting its calls, answering a receipt.
fn receipts(
    calls: &Arc<AtomicUsize>,
) -> impl tower_service::Service<
    Record<Value>,
    Response = String,
    Error = RecordError,
    Future = impl std::future::Future<Output = Result<String, RecordError>> + Send,
> + Clone
       + Send
       + Sync
       + 'static {
    let calls = Arc::clone(calls);
    lambda_runtime::service_fn(move |record: Record<Value>| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move { Ok(format!("receipt {}", record.body["orderId"])) }
    })
}

#[tokio::test]
async fn p5_the_tower_layer_hashes_a_numeric_key_as_its_json_value_as_run_record_and_python_do() {
    use tower_layer::Layer;
    let config = IdempotencyConfig::builder("payments")
        .cache_keys(0)
        .build()
        .expect("config");
    let idem = Arc::new(Idempotency::new(PowertoolsInMemory::default(), config));
    let keys = KeySource::pointer("/orderId").expect("pointer");
    let order = json!({"orderId": 5});
    let record = Record::new(
        order.clone(),
        position(SourceKind::Sqs, "m-1"),
        order.to_string().into_bytes(),
    );
    // Python's key for `{"orderId": 5}`: md5 of `json.dumps(5)`, i.e. of `5`.
    let python_key = format!(
        "payments.charge#{}",
        hex::encode(<md5::Md5 as md5::Digest>::digest(b"5"))
    );
    let ran = idem
        .run_record("charge", &keys, &record, || async {
            Ok::<_, String>("receipt 5".to_string())
        })
        .await;
    assert_eq!(ran.ok(), Some(Run::Ran("receipt 5".to_string())));
    assert!(
        idem.persistence().0.get(&python_key).is_some(),
        "run_record wrote Python's key"
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let processor = Processor::service_builder(
        "payments",
        IdempotencyLayer::new(Arc::clone(&idem), "charge", keys).layer(receipts(&calls)),
    )
    .build()
    .expect("processor");
    let report = processor
        .handle_batch(&batch(SourceKind::Sqs, &[order]), Deadline::none())
        .await;
    assert!(
        report.response.failed_ids().is_empty(),
        "{:?}",
        report.summary
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the layer charged again under another key"
    );
}

#[tokio::test]
async fn p6_behind_the_processor_a_completed_duplicate_without_a_readable_response_is_acknowledged()
{
    use tower_layer::Layer;
    let idem = idempotency(IdempotencyConfig::builder("fn"));
    let keys = KeySource::pointer("/orderId").expect("pointer");
    let order = json!({"orderId": "o-1"});
    let record = Record::new(
        order.clone(),
        position(SourceKind::Sqs, "m-1"),
        order.to_string().into_bytes(),
    );
    // The response type before a deploy: a number.
    let ran = idem
        .run_record("charge", &keys, &record, || async { Ok::<_, String>(7u64) })
        .await;
    assert_eq!(ran.ok(), Some(Run::Ran(7)));
    let calls = Arc::new(AtomicUsize::new(0));
    let processor = Processor::service_builder(
        "payments",
        IdempotencyLayer::new(Arc::clone(&idem), "charge", keys).layer(receipts(&calls)),
    )
    .dead_letters(ReportOnly)
    .build()
    .expect("processor");
    let report = processor
        .handle_batch(&batch(SourceKind::Sqs, &[order]), Deadline::none())
        .await;
    assert!(
        report.response.failed_ids().is_empty(),
        "{:?}",
        report.summary
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// Log lines captured in memory.
#[derive(Clone, Default)]
pub(super) struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    pub(super) fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

#[tokio::test]
async fn p7_the_environment_switch_warns_when_built_and_every_run_says_not_stored() {
    let logs = Logs::default();
    let subscriber =
        crate::telemetry::json_subscriber(tracing_subscriber::EnvFilter::new("info"), logs.clone());
    let env = |name: &str| (name == "POWERTOOLS_IDEMPOTENCY_DISABLED").then(|| "true".to_string());
    let config = tracing::subscriber::with_default(subscriber, || {
        IdempotencyConfig::builder_reading("fn", env).build()
    })
    .expect("config");
    let text = logs.text();
    assert!(
        text.contains("\"level\":\"WARN\"") && text.contains("POWERTOOLS_IDEMPOTENCY_DISABLED"),
        "silent: {text:?}"
    );
    let idem = Idempotency::new(InMemory::new(), config);
    let run = idem
        .call("op", "k")
        .run(|| async { Ok::<u8, String>(1) })
        .await;
    assert_eq!(
        run.ok(),
        Some(Run::NotStored(1)),
        "not `Ran`, which says stored"
    );
    assert_eq!(idem.stats().disabled, 1);
}

#[test]
fn p4_powertools_sort_key_mode_needs_the_peers_static_key_and_keeps_settings_made_before() {
    // A sort key set before `.powertools()` is kept, not silently dropped.
    let kept = DynamoDbPersistence::builder(offline_client(), "t")
        .sort_key_attr("sk")
        .powertools()
        .static_partition_key("idempotency#payments")
        .build()
        .expect("layout");
    assert_eq!(kept.names().sort_key(), Some("sk"));
    assert_eq!(kept.names().static_partition_key(), "idempotency#payments");
    assert_eq!(kept.names().key(), "id");
    // Without the peer's static key, the Rust function's own name would be used: refused.
    let refused = DynamoDbPersistence::builder(offline_client(), "t")
        .powertools()
        .sort_key_attr("sk")
        .build();
    let err = refused.expect_err("refused without the peer's static key");
    assert!(err.to_string().contains("static_partition_key"), "{err}");
}

#[tokio::test]
async fn p8_a_powertools_key_prefix_without_a_dot_is_written_as_python_writes_it() {
    let config = IdempotencyConfig::builder("payments")
        .operation_as_key_prefix(true)
        .cache_keys(0)
        .build()
        .expect("config");
    let idem = Idempotency::new(PowertoolsInMemory::default(), config);
    // Python: IdempotencyConfig(key_prefix="orders"), key "o-7": `orders#<md5 of "\"o-7\"">`.
    let python_key = format!(
        "orders#{}",
        hex::encode(<md5::Md5 as md5::Digest>::digest(b"\"o-7\""))
    );
    let ran = idem
        .call("orders", "o-7")
        .run(|| async { Ok::<u8, String>(1) })
        .await;
    assert_eq!(ran.ok(), Some(Run::Ran(1)));
    assert!(
        idem.persistence().0.get(&python_key).is_some(),
        "not Python's key"
    );
    // A prefix with `#` is Powertools' too (its key ends in a fixed-length digest).
    let hashed = idem
        .call("orders#v2", "o-7")
        .run(|| async { Ok::<u8, String>(2) })
        .await;
    assert_eq!(hashed.ok(), Some(Run::Ran(2)));
}
