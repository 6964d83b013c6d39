//! The idempotency layer's guarantee under replayed schedules, on DynamoDB Local: actors (one
//! SDK client each, `dev_testing::Interleaving`) deliver the same SQS message; their calls
//! are held, lose their responses or stop at chosen points. Every test counts the function's
//! executions.
//!
//! The guarantee (docs/idempotency.md, "What it guarantees"): per key, at most one execution
//! in progress and one stored result, within the record's expiry; every delivery after the
//! completion gets that result. A run that stops between its claim and its
//! completion (a crash, a timeout) holds the key until its deadline: the next delivery after
//! it runs the function again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::{client, At, Interleaving};
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once_lambda::idempotency::{
    ClaimRequest, DynamoDbPersistence, Idempotency, IdempotencyConfig, IdempotencyError,
    IdempotencyLayer, KeySource, Persistence, Run,
};
use dynamodb_exactly_once_lambda::processor::Record;
use lambda_runtime::service_fn;
use serde_json::{json, Value};
use tower_layer::Layer as _;
use tower_service::Service;

use crate::idempotency::table;

type Layer = Arc<Idempotency<DynamoDbPersistence>>;
type Outcome = Result<Run<String>, IdempotencyError<String>>;

/// The layer of one actor on `table` (no cache: every delivery reaches the table).
fn layer(client: Client, table: &str) -> Layer {
    cached_layer(client, table, 0)
}

/// The layer of one actor on `table`, with a cache of `cache_keys`.
fn cached_layer(client: Client, table: &str, cache_keys: usize) -> Layer {
    let config = IdempotencyConfig::builder("payments")
        .cache_keys(cache_keys)
        .build()
        .expect("config");
    Arc::new(Idempotency::new(
        DynamoDbPersistence::new(client, table),
        config,
    ))
}

/// A delivery of SQS message `m0` (an order), its handler abandoned at `deadline_ms`.
fn delivery(deadline_ms: u64) -> Record<Value> {
    let body = json!({"orderId": "o-1", "cents": 250});
    let batch = dev_testing::events::sqs_batch(std::slice::from_ref(&body), 0);
    let position = batch.records[0].position.clone();
    Record::new(body.clone(), position, body.to_string().into_bytes())
        .with_deadline_ms(Some(deadline_ms))
}

/// Deliver `record` to `layer`: the function counts its executions and answers
/// `receipt-<n>`.
async fn deliver(layer: &Layer, record: &Record<Value>, runs: &Arc<AtomicUsize>) -> Outcome {
    layer
        .run_record("charge", &KeySource::Id, record, || async {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            Ok::<_, String>(format!("receipt-{n}"))
        })
        .await
}

/// `deliver` on a task of its own (an actor that can be held).
fn spawn_delivery(
    layer: &Layer,
    record: &Record<Value>,
    runs: &Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<Outcome> {
    let (layer, record, runs) = (Arc::clone(layer), record.clone(), Arc::clone(runs));
    tokio::spawn(async move { deliver(&layer, &record, &runs).await })
}

/// The stored attributes of the key (`payments#m0`).
async fn stored(table: &str) -> std::collections::HashMap<String, AttributeValue> {
    client()
        .get_item()
        .table_name(table)
        .key("Id", AttributeValue::S("payments#charge#m0".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get")
        .item
        .unwrap_or_default()
}

fn text(item: &std::collections::HashMap<String, AttributeValue>, name: &str) -> String {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

async fn sleep_until(epoch_ms: u64) {
    let left = epoch_ms.saturating_sub(epoch_millis()) + 100;
    tokio::time::sleep(Duration::from_millis(left)).await;
}

// (a) ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_between_the_claim_and_the_completion_is_in_progress_then_replayed() {
    // Given A, held after its function ran and before its completion write
    let table = table(&client()).await;
    let il = Interleaving::new();
    il.pause_before("A", At::op("UpdateItem"));
    let record = delivery(epoch_millis() + 60_000);
    let runs = Arc::new(AtomicUsize::new(0));
    let a = spawn_delivery(&layer(il.client("A", 1), &table), &record, &runs);
    il.wait_paused("A").await.expect("A holds its completion");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // When B delivers the same message meanwhile
    let b = deliver(&layer(il.client("B", 1), &table), &record, &runs).await;

    // Then B is in progress until A's deadline, did not run the function, and wrote nothing
    let deadline = record.deadline_ms().expect("deadline");
    assert!(
        matches!(b, Err(IdempotencyError::InProgress { until_ms }) if until_ms == deadline),
        "{b:?}"
    );
    assert_eq!(b.err().and_then(|e| e.is_retryable()), Some(true));
    let b_calls: Vec<String> = il.calls("B").into_iter().map(|c| c.operation).collect();
    assert_eq!(b_calls, ["PutItem"], "one failed conditional put");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // And once A completes, a third delivery gets A's result without running
    il.release("A");
    let a = a.await.expect("A");
    assert_eq!(a.ok(), Some(Run::Ran("receipt-1".into())));
    let c = deliver(&layer(client(), &table), &record, &runs).await;
    assert_eq!(c.ok(), Some(Run::Replayed("receipt-1".into())));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

// (b) ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_claim_response_retried_by_the_sdk_is_recognised_and_runs_the_function_once() {
    // Given A's claim applied but its answer lost, the SDK's retry held
    let table = table(&client()).await;
    let il = Interleaving::new();
    il.lose_response("A", At::op("PutItem").attempt(1));
    il.pause_before("A", At::op("PutItem").attempt(2));
    let record = delivery(epoch_millis() + 60_000);
    let runs = Arc::new(AtomicUsize::new(0));
    let a = spawn_delivery(&layer(il.client("A", 2), &table), &record, &runs);
    il.wait_paused("A").await.expect("A's retry is held");

    // When B delivers meanwhile, then A's retry goes on
    let b = deliver(&layer(il.client("B", 1), &table), &record, &runs).await;
    il.release("A");
    let a = a.await.expect("A");

    // Then B found A's claim, and A's retry found its own: A ran the function, once
    assert!(
        matches!(b, Err(IdempotencyError::InProgress { .. })),
        "{b:?}"
    );
    assert_eq!(a.ok(), Some(Run::Ran("receipt-1".into())));
    let c = deliver(&layer(client(), &table), &record, &runs).await;
    assert_eq!(c.ok(), Some(Run::Replayed("receipt-1".into())));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_claim_response_without_a_retry_fails_retryably_and_holds_the_key_to_its_deadline() {
    // Given A's claim applied, its answer lost, and no SDK retry left
    let table = table(&client()).await;
    let il = Interleaving::new();
    il.lose_response("A", At::op("PutItem"));
    let record = delivery(epoch_millis() + 2_000);
    let runs = Arc::new(AtomicUsize::new(0));

    // When A delivers
    let a = deliver(&layer(il.client("A", 1), &table), &record, &runs).await;

    // Then A fails retryably without running the function (the record is delivered again)
    assert!(matches!(a, Err(IdempotencyError::Store(_))), "{a:?}");
    assert_eq!(a.err().and_then(|e| e.is_retryable()), Some(true));
    // ... its claim holds the key until its deadline: a redelivery before it is in progress
    let early = deliver(&layer(client(), &table), &record, &runs).await;
    assert!(
        matches!(early, Err(IdempotencyError::InProgress { .. })),
        "{early:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // ... and the first redelivery after it runs the function, once
    sleep_until(record.deadline_ms().expect("deadline")).await;
    let later = deliver(&layer(client(), &table), &record, &runs).await;
    assert_eq!(later.ok(), Some(Run::Ran("receipt-1".into())));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

// (c) ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_died_after_its_claim_holds_the_key_until_its_deadline_then_one_retry_runs() {
    // Given A, which claimed the key, started its function and died (no call after its claim)
    let table = table(&client()).await;
    let il = Interleaving::new();
    il.crash_from("A", 1);
    let record = delivery(epoch_millis() + 2_000);
    let runs = Arc::new(AtomicUsize::new(0));
    let a = {
        let (a, record, runs) = (
            layer(il.client("A", 1), &table),
            record.clone(),
            Arc::clone(&runs),
        );
        tokio::spawn(async move {
            a.run_record("charge", &KeySource::Id, &record, || async {
                runs.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<Result<String, String>>().await
            })
            .await
        })
    };
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.abort();

    // When B delivers before A's deadline, C after it, D after C
    let b = deliver(&layer(client(), &table), &record, &runs).await;
    sleep_until(record.deadline_ms().expect("deadline")).await;
    let c = deliver(&layer(client(), &table), &record, &runs).await;
    let d = deliver(&layer(client(), &table), &record, &runs).await;

    // Then B is refused without running, C runs the function once (A's effect may have
    // happened too: the documented limit), and D gets C's result
    assert!(
        matches!(b, Err(IdempotencyError::InProgress { .. })),
        "{b:?}"
    );
    assert_eq!(c.ok(), Some(Run::Ran("receipt-2".into())));
    assert_eq!(d.ok(), Some(Run::Replayed("receipt-2".into())));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_outlives_its_claim_cannot_overwrite_the_next_runs_result() {
    // Given A (a warm process with a cache), held before its completion until after its
    // deadline, and C, which took the key over after that deadline and completed
    let table = table(&client()).await;
    let il = Interleaving::new();
    il.pause_before("A", At::op("UpdateItem"));
    let record = delivery(epoch_millis() + 1_500);
    let runs = Arc::new(AtomicUsize::new(0));
    let a_layer = cached_layer(il.client("A", 1), &table, 8);
    let a = spawn_delivery(&a_layer, &record, &runs);
    il.wait_paused("A").await.expect("A holds its completion");
    sleep_until(record.deadline_ms().expect("deadline")).await;
    let c = deliver(&layer(client(), &table), &record, &runs).await;
    assert_eq!(c.ok(), Some(Run::Ran("receipt-2".into())));

    // When A's completion finally goes out
    il.release("A");
    let a = a.await.expect("A");

    // Then it is refused (another token holds the key) and A says its value is not the
    // stored one: C's result stays, for every duplicate, A's own warm process included
    assert_eq!(a.ok(), Some(Run::NotStored("receipt-1".into())));
    assert_eq!(text(&stored(&table).await, "Result"), "\"receipt-2\"");
    let d = deliver(&layer(client(), &table), &record, &runs).await;
    assert_eq!(d.ok(), Some(Run::Replayed("receipt-2".into())));
    let d_in_a = deliver(&a_layer, &record, &runs).await;
    assert_eq!(d_in_a.ok(), Some(Run::Replayed("receipt-2".into())));
    assert_eq!(a_layer.stats().result_not_stored, 1);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

// (d) ---------------------------------------------------------------------------------------

/// An inner service counting its calls behind the tower layer of `actor`, keyed by
/// `/orderId`: it answers `<orderId>-<n>`.
fn charging_service(
    actor: Client,
    table: &str,
    calls: &Arc<AtomicUsize>,
) -> impl Service<
    Record<Value>,
    Response = String,
    Error = IdempotencyError<String>,
    Future = impl std::future::Future<Output = Result<String, IdempotencyError<String>>> + Send,
> {
    let calls = Arc::clone(calls);
    let inner = service_fn(move |record: Record<Value>| {
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok::<_, String>(format!("{}-{n}", record.body["orderId"])) }
    });
    let keys = KeySource::pointer("/orderId").expect("pointer");
    IdempotencyLayer::new(layer(actor, table), "charge", keys).layer(inner)
}

fn order(id: &str) -> Record<Value> {
    let body = json!({ "orderId": id });
    let position = delivery(0).position;
    Record::new(body.clone(), position, body.to_string().into_bytes())
        .with_deadline_ms(Some(epoch_millis() + 60_000))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_completion_response_still_gives_duplicates_the_result_through_the_tower_layer() {
    let table = table(&client()).await;
    for (max_attempts, id) in [(2, "retried"), (1, "not-retried")] {
        // Given A's completion applied but its answer lost: retried by the SDK (the retry
        // held), or not retried at all (A's completion failed as far as A knows)
        let il = Interleaving::new();
        il.lose_response("A", At::op("UpdateItem").attempt(1));
        il.pause_before("A", At::op("UpdateItem").attempt(2));
        let calls = Arc::new(AtomicUsize::new(0));
        let mut a = charging_service(il.client("A", max_attempts), &table, &calls);
        let mut a = Some(tokio::spawn(a.call(order(id))));
        let mut a_done = None;
        if max_attempts == 2 {
            il.wait_paused("A").await.expect("A's retry is held");
        } else if let Some(task) = a.take() {
            a_done = Some(task.await.expect("A"));
        }

        // When B delivers the same order
        let b = charging_service(client(), &table, &calls)
            .call(order(id))
            .await;

        // Then B gets A's response without calling the inner service, and A succeeded
        let want = format!("\"{id}\"-1");
        assert_eq!(b.ok().as_deref(), Some(want.as_str()), "{id}");
        il.release_all("A");
        let a = match (a, a_done) {
            (Some(task), _) => task.await.expect("A"),
            (None, done) => done.expect("A ran"),
        };
        assert_eq!(a.ok().as_deref(), Some(want.as_str()), "{id}");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{id}");
    }
}

// A claim delivered late ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_attempt_arriving_after_its_run_completed_does_not_undo_the_completion() {
    // Given a run that completed
    let table = table(&client()).await;
    let record = delivery(epoch_millis() + 60_000);
    let runs = Arc::new(AtomicUsize::new(0));
    let first = deliver(&layer(client(), &table), &record, &runs).await;
    assert_eq!(first.ok(), Some(Run::Ran("receipt-1".into())));

    // When its claim's first attempt, delayed in the network past the SDK's retry, reaches
    // DynamoDB now (the same request: the run's token)
    let item = stored(&table).await;
    let late = ClaimRequest::new(
        "payments#charge#m0",
        "charge",
        text(&item, "Token"),
        epoch_millis(),
        record.deadline_ms().expect("deadline"),
        3600,
    )
    .with_payload_hash(text(&item, "PayloadHash"));
    let persistence = DynamoDbPersistence::new(client(), &table);
    let _ = persistence.claim(&late).await;

    // Then the completion stands: a duplicate gets the result, nothing runs again
    assert_eq!(text(&stored(&table).await, "Status"), "COMPLETED");
    let again = deliver(&layer(client(), &table), &record, &runs).await;
    assert_eq!(again.ok(), Some(Run::Replayed("receipt-1".into())));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
