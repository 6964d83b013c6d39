//! The idempotency layer on DynamoDB Local: a duplicate gets the first result without running
//! the function (no call at all from a warm cache), a lost response on the claim or on the
//! completion is recognised, concurrent duplicates run the function once, and through the
//! batch processor a redelivered SQS batch runs nothing again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use dev_testing::events::sqs_batch;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::idempotency::{
    DynamoDbPersistence, Idempotency, IdempotencyConfig, IdempotencyError, Run,
};
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError};
use serde_json::{json, Value};

/// A fresh idempotency table (key `Id`).
pub(crate) async fn table(client: &Client) -> String {
    let name = format!("{}Idempotency", dev_testing::unique_prefix());
    client
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("Id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("definition"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("Id")
                .key_type(KeyType::Hash)
                .build()
                .expect("key"),
        )
        .send()
        .await
        .expect("create table");
    name
}

fn layer(client: Client, table: &str, cache_keys: usize) -> Idempotency<DynamoDbPersistence> {
    let config = IdempotencyConfig::builder("payments")
        .cache_keys(cache_keys)
        .build()
        .expect("config");
    Idempotency::new(DynamoDbPersistence::new(client, table), config)
}

/// A client counting its requests, with `fault` on the `n`-th request of operation `op`.
fn faulty(op: &'static str, n: usize, fault: Fault) -> (Client, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let of_op = Arc::new(AtomicUsize::new(0));
    let injector = FaultInjector::new(move |_, o| {
        seen.fetch_add(1, Ordering::SeqCst);
        if o == op && of_op.fetch_add(1, Ordering::SeqCst) == n {
            fault
        } else {
            Fault::None
        }
    });
    (client_with(Some(injector), 3), calls)
}

async fn charge(
    idem: &Idempotency<DynamoDbPersistence>,
    charges: &AtomicUsize,
    order: &str,
) -> Result<Run<String>, IdempotencyError<String>> {
    idem.call("charge", order)
        .payload(&json!({"order": order, "cents": 250}))
        .run(|| async {
            charges.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(format!("receipt-{order}"))
        })
        .await
}

#[tokio::test]
async fn a_duplicate_replays_the_result_with_one_failed_put_or_no_call_when_cached() {
    let t = table(&client()).await;
    let (counted, calls) = faulty("none", 0, Fault::None);
    let charges = AtomicUsize::new(0);
    for cache_keys in [0, 16] {
        let idem = layer(counted.clone(), &t, cache_keys);
        let order = format!("o-{cache_keys}");
        let first = charge(&idem, &charges, &order).await.expect("charged");
        assert_eq!(first, Run::Ran(format!("receipt-{order}")));
        let before = calls.load(Ordering::SeqCst);
        let again = charge(&idem, &charges, &order).await.expect("replayed");
        assert_eq!(again, Run::Replayed(format!("receipt-{order}")));
        // Cold: the failed conditional put returns the record; warm: no call.
        let want = if cache_keys == 0 { 1 } else { 0 };
        assert_eq!(
            calls.load(Ordering::SeqCst) - before,
            want,
            "cache {cache_keys}"
        );
    }
    assert_eq!(charges.load(Ordering::SeqCst), 2);
    // Another process (no cache) sees the stored result too.
    let other = layer(client(), &t, 0);
    let replayed = charge(&other, &charges, "o-16").await.expect("replayed");
    assert!(replayed.is_replayed());
    assert_eq!(charges.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn lost_responses_on_the_claim_and_on_the_completion_run_the_function_once() {
    let t = table(&client()).await;
    let charges = AtomicUsize::new(0);
    for (op, order) in [("PutItem", "lost-claim"), ("UpdateItem", "lost-completion")] {
        // The first request of `op` is applied but its answer lost: the SDK sends it again.
        let (flaky, _) = faulty(op, 0, Fault::LoseResponse);
        let idem = layer(flaky, &t, 0);
        let run = charge(&idem, &charges, order).await.expect(order);
        assert_eq!(run, Run::Ran(format!("receipt-{order}")), "{op}");
        let again = charge(&layer(client(), &t, 0), &charges, order).await;
        assert!(again.expect("replayed").is_replayed(), "{op}");
    }
    assert_eq!(charges.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_completion_refused_on_every_sdk_attempt_is_sent_again_and_a_duplicate_replays() {
    // Given a client whose first completion call is refused three times (every SDK attempt)
    let t = table(&client()).await;
    let refused = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&refused);
    let injector = FaultInjector::new(move |_, op| {
        if op == "UpdateItem" && counted.fetch_add(1, Ordering::SeqCst) < 3 {
            Fault::Refuse
        } else {
            Fault::None
        }
    });
    let idem = layer(client_with(Some(injector), 3), &t, 0);
    let charges = AtomicUsize::new(0);

    // When the function runs
    let run = charge(&idem, &charges, "refused-completion").await;

    // then its result is stored all the same: a duplicate from another process replays it
    // instead of finding the key in progress (and running the function again once the
    // claim expired).
    assert_eq!(
        run.expect("ran"),
        Run::Ran("receipt-refused-completion".into())
    );
    assert!(
        refused.load(Ordering::SeqCst) > 3,
        "the completion was sent again"
    );
    let again = charge(&layer(client(), &t, 0), &charges, "refused-completion").await;
    assert!(again.expect("replayed").is_replayed());
    assert_eq!(charges.load(Ordering::SeqCst), 1);
}

/// One run of a slow function on key `same`.
async fn slow(
    idem: &Idempotency<DynamoDbPersistence>,
    charges: &AtomicUsize,
) -> Result<Run<u32>, IdempotencyError<String>> {
    idem.call("charge", "same")
        .payload(&json!({"cents": 1}))
        .run(|| async {
            charges.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<_, String>(7)
        })
        .await
}

#[tokio::test]
async fn concurrent_duplicates_run_the_function_once_and_the_other_is_in_progress() {
    let t = table(&client()).await;
    let a = layer(client(), &t, 0);
    let b = layer(client(), &t, 0);
    let charges = AtomicUsize::new(0);
    let (x, y) = tokio::join!(slow(&a, &charges), slow(&b, &charges));
    let results = [x, y];
    assert_eq!(charges.load(Ordering::SeqCst), 1);
    assert_eq!(
        results
            .iter()
            .filter(|r| matches!(r, Ok(Run::Ran(7))))
            .count(),
        1
    );
    assert_eq!(
        results
            .iter()
            .filter(|r| matches!(r, Err(IdempotencyError::InProgress { .. })))
            .count(),
        1
    );
}

#[tokio::test]
async fn through_the_processor_a_redelivered_batch_charges_nothing_again() {
    let t = table(&client()).await;
    let idem = Arc::new(layer(client(), &t, 0));
    let charges = Arc::new(AtomicUsize::new(0));
    let processor = {
        let (idem, charges) = (Arc::clone(&idem), Arc::clone(&charges));
        Processor::builder("payments", move |record: Record<Value>| {
            let (idem, charges) = (Arc::clone(&idem), Arc::clone(&charges));
            async move {
                let key = record.delivery_id();
                let run = idem
                    .call("charge", &key)
                    .payload(&record.body)
                    .run(|| async {
                        charges.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, String>(())
                    })
                    .await;
                match run {
                    Ok(_) => Ok(()),
                    Err(IdempotencyError::PayloadMismatch { key }) => Err(RecordError::reject(
                        format!("{key} reused with another payload"),
                    )),
                    Err(e) => Err(RecordError::transient(e.to_string())),
                }
            }
        })
        .build()
        .expect("processor")
    };
    let batch = sqs_batch(&[json!({"cents": 1}), json!({"cents": 2})], 0);
    for _ in 0..2 {
        let report = processor.handle_batch(&batch, Deadline::none()).await;
        assert!(
            report.response.failed_ids().is_empty(),
            "{:?}",
            report.summary
        );
    }
    assert_eq!(charges.load(Ordering::SeqCst), 2);
}

pub(crate) mod boundaries;
pub(crate) mod check;
pub(crate) mod interleave;
pub(crate) mod large;
pub(crate) mod one_table;
pub(crate) mod powertools;
pub(crate) mod powertools_ts;
