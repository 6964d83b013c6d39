//! One idempotency table holding the records of all four layouts at once: this layer's own
//! (`key_attr("id")` to share the table), and the Python, TypeScript and Java Powertools
//! presets, each charging the same order under the same selection. The presets' keys differ
//! in form or text (Python's and Java's MD5 hex of different texts, TypeScript's base64, the
//! native `<namespace>#<operation>#<key>`), so each layout runs the order once, finds its own
//! record on a redelivery, and never reads or overwrites another's.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dev_testing::client;
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once_lambda::idempotency::{
    DynamoDbPersistence, DynamoDbPersistenceBuilder, Idempotency, IdempotencyConfig, KeySource, Run,
};
use dynamodb_exactly_once_lambda::processor::Record;
use serde_json::{json, Value};

type Layer = Arc<Idempotency<DynamoDbPersistence>>;

fn layer(persistence: DynamoDbPersistenceBuilder, namespace: &str) -> Layer {
    let config = IdempotencyConfig::builder(namespace)
        .validate_payload_at(["/amount"])
        .cache_keys(0)
        .build()
        .expect("config");
    Arc::new(Idempotency::new(
        persistence.build().expect("layout"),
        config,
    ))
}

/// Charge `order` through `layer` as a stream consumer would: the key `/orderId`.
async fn charge(layer: &Layer, operation: &str, order: &Value, runs: &AtomicUsize) -> Run<Value> {
    let batch = dev_testing::events::sqs_batch(std::slice::from_ref(order), 0);
    let record = Record::new(
        order.clone(),
        batch.records[0].position.clone(),
        order.to_string().into_bytes(),
    )
    .with_deadline_ms(Some(epoch_millis() + 20_000));
    let keys = KeySource::pointer("/orderId").expect("pointer");
    layer
        .run_record(operation, &keys, &record, || async {
            let n = runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(
                json!({"chargeId": format!("{operation}-{n}"), "amount": order["amount"]}),
            )
        })
        .await
        .unwrap_or_else(|e| panic!("{operation}: {e:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_layouts_share_one_table_without_a_collision() {
    let ddb = client();
    let table = crate::common::string_key_table(&ddb, "FourLayouts", "id", None).await;
    let builder = || DynamoDbPersistence::builder(client(), &table);
    let layers = [
        ("native", layer(builder().key_attr("id"), "orders-rust")),
        ("python", layer(builder().powertools(), "orders-py")),
        (
            "typescript",
            layer(builder().powertools_typescript(), "orders-ts"),
        ),
        ("java", layer(builder().powertools_java(), "orders-java")),
    ];
    let order = json!({"orderId": "o-1", "amount": 42});
    let runs: Vec<AtomicUsize> = layers.iter().map(|_| AtomicUsize::new(0)).collect();

    // Each layout runs the order once, whichever order they come in,
    let mut first = Vec::new();
    for ((operation, layer), runs) in layers.iter().zip(&runs) {
        match charge(layer, operation, &order, runs).await {
            Run::Ran(value) => first.push(value),
            other => {
                panic!("{operation}: another layout's record was taken for its own: {other:?}")
            }
        }
    }
    // and a redelivery to each replays its own result, not another's.
    for (((operation, layer), runs), value) in layers.iter().zip(&runs).zip(&first) {
        match charge(layer, operation, &order, runs).await {
            Run::Replayed(replayed) => assert_eq!(&replayed, value, "{operation} replays its own"),
            other => panic!("{operation}: expected its own replay, got {other:?}"),
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{operation} ran once");
    }

    // The table holds four records under four distinct keys.
    let items = ddb
        .scan()
        .table_name(&table)
        .send()
        .await
        .expect("scan")
        .items
        .unwrap_or_default();
    let keys: BTreeSet<String> = items
        .iter()
        .filter_map(|item| item.get("id")?.as_s().ok().cloned())
        .collect();
    assert_eq!(items.len(), 4, "one record per layout: {keys:?}");
    assert_eq!(keys.len(), 4, "four distinct keys: {keys:?}");
}
