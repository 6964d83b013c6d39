//! The ratchet's warm-redelivery cache: a batch delivered again to a warm function is answered
//! with no DynamoDB call, and the cache never skips a write another writer made necessary.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig, RatchetOutcome};
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::Writer;
use serde_json::json;

use crate::common::{put, sqs_batch};

/// A client that counts the requests it sends.
fn counting() -> (aws_sdk_dynamodb::Client, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let injector = FaultInjector::new(move |_, _| {
        seen.fetch_add(1, Ordering::SeqCst);
        Fault::None
    });
    (client_with(Some(injector), 1), calls)
}

#[tokio::test]
async fn a_warm_redelivery_costs_no_call_and_a_newer_record_still_writes() {
    let direct = client();
    let tables = dev_testing::template_tables(&direct, &["RatchetTable", "DeadLetterTable"]).await;
    let (counted, calls) = counting();
    // The table's key schema, described once per process, is known already (not counted).
    dynamodb_exactly_once::__private::key_schema(&direct, &tables["RatchetTable"])
        .await
        .expect("schema");
    let config = RatchetConfig::builder(&tables["RatchetTable"])
        .build()
        .expect("valid configuration");
    let writer = Writer::builder("ratchet-writer", Ratchet::new(counted, config.clone()))
        .dead_letters(DeadLetters::new(
            direct.clone(),
            &tables["DeadLetterTable"],
            "ratchet-writer",
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer");
    // Given a batch applied once (two keys, one of them twice)
    let batch = sqs_batch(
        &[
            put("u", "a", 10, json!({"v": 1})),
            put("u", "b", 10, json!({"v": 1})),
            put("u", "b", 9, json!({"v": 0})),
        ],
        0,
    );
    let first = writer.handle_batch(&batch, Deadline::none()).await;
    assert!(first.response.failed_ids().is_empty());
    let after_first = calls.load(Ordering::SeqCst);
    assert_eq!(after_first, 2, "one write per key");

    // When the same batch is delivered again to the same (warm) process
    let again = writer.handle_batch(&batch, Deadline::none()).await;
    // Then it is answered from the cache: duplicates and stale, no DynamoDB call
    assert!(again.response.failed_ids().is_empty());
    assert_eq!(calls.load(Ordering::SeqCst), after_first);
    let labels: Vec<&str> = again.results.iter().map(|r| r.label()).collect();
    assert_eq!(labels, ["duplicate", "duplicate", "superseded"]);

    // And when another writer stored a newer version meanwhile, a record between the two is
    // not answered from the cache: DynamoDB says stale; one above both is written.
    let other = Ratchet::new(direct.clone(), config);
    let newer = other
        .parse_record(put("u", "a", 20, json!({"v": 2})).to_string().as_bytes())
        .expect("record");
    assert_eq!(
        other.write(&newer).await.expect("write"),
        RatchetOutcome::Applied
    );
    let between = sqs_batch(&[put("u", "a", 15, json!({"v": 15}))], 3);
    let report = writer.handle_batch(&between, Deadline::none()).await;
    assert_eq!(report.results[0].label(), "stale");
    assert_eq!(calls.load(Ordering::SeqCst), after_first + 1);
    let above = sqs_batch(&[put("u", "a", 30, json!({"v": 30}))], 4);
    let report = writer.handle_batch(&above, Deadline::none()).await;
    assert_eq!(report.results[0].label(), "applied");
    // The stale answer taught the cache the newer stored version: a redelivery of it is free.
    let before = calls.load(Ordering::SeqCst);
    let report = writer.handle_batch(&between, Deadline::none()).await;
    assert_eq!(report.results[0].label(), "stale");
    assert_eq!(calls.load(Ordering::SeqCst), before);
}
