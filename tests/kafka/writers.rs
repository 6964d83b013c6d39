//! The ready functions on Kafka batches (Amazon MSK events as Lambda delivers them), against
//! DynamoDB Local: a whole batch delivered again after a failure, overlapping batches, a
//! poison value at each position, and order per topic-partition for the transaction
//! coordinator and the document writer (not idempotent under redelivery). Each asserts the
//! table: nothing lost, nothing applied twice.

use crate::common::*;
use crate::counter::{counters, writer_on as counter_writer_on, TABLES as COUNTER_TABLES};
use crate::sources::{balances, coordinator_on, refuse_tx, transfer, tx_tables};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dev_testing::events::{kafka_batch, kafka_event};
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::document::{Document, DocumentConfig};
use dynamodb_exactly_once::txn::TxOutcome;
use dynamodb_exactly_once::{Deadline, RecordResult};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::mapping::RecordMapping;
use dynamodb_exactly_once_lambda::Writer;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};

/// Requests naming `needle` refused until `healed` is set.
fn refuse_until_healed(needle: &'static str, healed: Arc<AtomicBool>) -> FaultInjector {
    FaultInjector::by_request(move |_, body| {
        if !healed.load(Ordering::SeqCst) && body.contains(needle) {
            Fault::Refuse
        } else {
            Fault::None
        }
    })
}

fn rating(user: &str, ts: i64, rating: i64) -> Value {
    put(user, "Movie#A", ts, json!({"Rating": rating}))
}

#[tokio::test]
async fn kafka_ratchet_a_batch_delivered_again_and_overlapping_batches_keep_the_latest() {
    // Given two partitions (a user's ratings in one), DynamoDB refusing User#2 at first
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
    let healed = Arc::new(AtomicBool::new(false));
    let faulty = client_with(Some(refuse_until_healed("User#2", healed.clone())), 1);
    let writer = ratchet_writer_on(faulty, &tables);
    let p0 = [
        (10, rating("User#1", 1000, 1)),
        (11, rating("User#1", 2000, 2)),
    ];
    let p1 = [
        (4, rating("User#2", 1000, 7)),
        (5, rating("User#2", 3000, 8)),
    ];
    let batch = kafka_batch(&[("ratings", 0, &p0), ("ratings", 1, &p1)]);

    // When it is handled: User#2's records are reported, User#1's applied
    let first = writer.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(first.response.failed_ids(), ["ratings-1:4", "ratings-1:5"]);

    // When the whole batch comes again, then an overlapping one with newer offsets
    healed.store(true, Ordering::SeqCst);
    let again = writer.handle_batch(&batch, Deadline::none()).await;
    assert!(again.response.failed_ids().is_empty());
    let p0 = [
        (11, rating("User#1", 2000, 2)),
        (12, rating("User#1", 1500, 9)),
    ];
    let p1 = [
        (5, rating("User#2", 3000, 8)),
        (6, rating("User#2", 4000, 3)),
    ];
    let overlap = kafka_batch(&[("ratings", 0, &p0), ("ratings", 1, &p1)]);
    let last = writer.handle_batch(&overlap, Deadline::none()).await;
    assert!(last.response.failed_ids().is_empty());

    // Then each item holds its greatest timestamp's value, and nothing was dead-lettered
    let items = scan(&setup, &tables["RatchetTable"]).await;
    assert_eq!(items["User#1|Movie#A"]["Rating"], json!(2));
    assert_eq!(items["User#2|Movie#A"]["Rating"], json!(3));
    assert!(scan(&setup, &tables["DeadLetterTable"]).await.is_empty());
}

#[tokio::test]
async fn kafka_ratchet_a_poison_value_at_each_position_is_kept_and_the_rest_applied() {
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
    let writer = ratchet_writer_on(setup.clone(), &tables);
    for poison_at in 0..3_i64 {
        // Given a partition of three records whose record at `poison_at` is not JSON
        let user = format!("User#p{poison_at}");
        let records: Vec<(i64, Value)> = (0..3)
            .map(|i| match i == poison_at {
                true => (i, json!("{not json")),
                false => (i, rating(&user, 1000 + i, i)),
            })
            .collect();
        let event = kafka_event(&[("ratings", 0, &records)]);

        // When the ready function's handler gets it
        let response = writer
            .handle(LambdaEvent::new(event, Context::default()))
            .await
            .expect("handled");

        // Then nothing is reported, the poison is a dead letter, the latest good one stored
        assert!(response.failed_ids().is_empty(), "poison at {poison_at}");
        let latest = if poison_at == 2 { 1 } else { 2 };
        let items = scan(&setup, &tables["RatchetTable"]).await;
        assert_eq!(items[&format!("{user}|Movie#A")]["Rating"], json!(latest));
    }
    let letters = DeadLetters::new(setup, &tables["DeadLetterTable"], "ratchet-writer");
    let kept: Vec<(String, String)> = letters
        .list()
        .await
        .expect("letters")
        .into_iter()
        .map(|l| (l.position.id, l.reason.code.as_str().to_string()))
        .collect();
    // (One partition and offsets 0–2 for each round: each poison keeps its own letter.)
    assert_eq!(kept.len(), 3, "{kept:?}");
    assert!(kept.iter().all(|(_, code)| code == "bad_json"), "{kept:?}");
}

#[tokio::test]
async fn kafka_counter_keyed_by_partition_and_offset_counts_each_record_once() {
    // Given a counter whose idempotency key is the record's Kafka position (a mapping)
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &COUNTER_TABLES).await;
    let mapping = RecordMapping::new(
        "COUNTER_RECORD_MAPPING",
        r#"{"key":{"PK":"/account","SK":"=totals"},"add":{"amount":"/amount"},
            "idempotencyKey":"={$topic}-{$partition}-{$offset}"}"#,
    )
    .expect("template");
    let healed = Arc::new(AtomicBool::new(false));
    let faulty = client_with(Some(refuse_until_healed("acct-b", healed.clone())), 1);
    let plain = counter_writer_on(faulty, &tables, |c| c, None);
    let writer = Writer::builder("counter-writer", plain.protocol().clone())
        .dead_letters(DeadLetters::new(
            setup.clone(),
            &tables["DeadLetterTable"],
            "counter-writer",
        ))
        .mapping(mapping)
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("writer");
    let pay = |account: &str, amount: i64| json!({"account": account, "amount": amount});
    let p0 = [
        (0, pay("acct-a", 5)),
        (1, pay("acct-a", 7)),
        (2, pay("acct-a", 1)),
    ];
    let p1 = [(0, pay("acct-b", 10)), (1, pay("acct-b", 20))];
    let batch = kafka_batch(&[("payments", 0, &p0), ("payments", 1, &p1)]);

    // When a delivery fails for acct-b, the whole batch comes again, then an overlapping one
    let first = writer.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(
        first.response.failed_ids(),
        ["payments-1:0", "payments-1:1"]
    );
    healed.store(true, Ordering::SeqCst);
    let again = writer.handle_batch(&batch, Deadline::none()).await;
    assert!(again.response.failed_ids().is_empty());
    let p0 = [(2, pay("acct-a", 1)), (3, pay("acct-a", 100))];
    let p1 = [(1, pay("acct-b", 20)), (2, pay("acct-b", 1))];
    let overlap = kafka_batch(&[("payments", 0, &p0), ("payments", 1, &p1)]);
    assert!(writer
        .handle_batch(&overlap, Deadline::none())
        .await
        .response
        .failed_ids()
        .is_empty());

    // Then each offset counted once
    let sums = counters(&setup, &tables["CounterTable"]).await;
    assert_eq!(sums["acct-a|totals"]["amount"], 113);
    assert_eq!(sums["acct-b|totals"]["amount"], 31);
}

#[tokio::test]
async fn kafka_a_failed_transfer_holds_back_later_offsets_of_its_partition_only() {
    // Given ann's transfers in partition 0 and dan's in partition 1, ann-1 refused
    let setup = client();
    let tables = tx_tables(&setup).await;
    let accounts = tables["AccountsTable"].clone();
    let t = |id, from, to, amount| transfer(&accounts, id, from, to, amount);
    let ann = [
        (0, t("ann-1", "ann", "ben", 60)),
        (1, t("ann-2", "ann", "cat", 50)),
        (2, t("ann-3", "ann", "ben", 10)),
    ];
    let dan = [
        (0, t("dan-1", "dan", "eve", 20)),
        (1, t("dan-2", "dan", "eve", 40)),
    ];
    let batch = kafka_batch(&[("transfers", 0, &ann), ("transfers", 1, &dan)]);
    let faulty = coordinator_on(client_with(Some(refuse_tx("ann-1")), 1), &tables);

    // When the batch is handled
    let report = faulty.handle_batch(&batch, Deadline::none()).await;

    // Then ann's partition stops at ann-1 (reported with what follows), dan's applies in order
    assert_eq!(
        report.response.failed_ids(),
        ["transfers-0:0", "transfers-0:1", "transfers-0:2"]
    );
    let now = balances(&setup, &accounts).await;
    assert_eq!(
        (now["ann"], now["dan"], now["eve"]),
        (100, 30, 20),
        "{now:?}"
    );

    // When the whole batch comes again
    let healthy = coordinator_on(setup.clone(), &tables);
    let report = healthy.handle_batch(&batch, Deadline::none()).await;

    // Then ann's transfers apply in offset order and dan's are duplicates
    assert!(report.response.failed_ids().is_empty());
    let outcomes: Vec<Option<TxOutcome>> = report
        .results
        .iter()
        .map(|r| match r {
            RecordResult::Done(o) => Some(o.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            Some(TxOutcome::Committed),
            Some(TxOutcome::RolledBack { request: 0 }),
            Some(TxOutcome::Committed),
            Some(TxOutcome::AlreadyCommitted),
            Some(TxOutcome::AlreadyRolledBack { request: 0 }),
        ]
    );
    let end = balances(&setup, &accounts).await;
    let want = [
        ("ann", 30),
        ("ben", 70),
        ("cat", 0),
        ("dan", 30),
        ("eve", 20),
    ];
    assert_eq!(end, want.map(|(k, v)| (k.to_string(), v)).into());
}

#[tokio::test]
async fn kafka_document_appends_apply_once_under_redelivery_and_a_failure_holds_back_its_partition()
{
    // Given the document writer (not idempotent under redelivery): appends to two lists, one
    // per partition, DynamoDB refusing the second append of list a at first
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["DocumentTable", "DeadLetterTable"]).await;
    let healed = Arc::new(AtomicBool::new(false));
    let faulty = client_with(Some(refuse_until_healed("\"a2\"", healed.clone())), 1);
    let docs = |c| {
        Document::new(
            c,
            DocumentConfig::builder(&tables["DocumentTable"])
                .build()
                .expect("config"),
        )
    };
    let writer = Writer::builder("document-writer", docs(faulty))
        .dead_letters(DeadLetters::new(
            setup.clone(),
            &tables["DeadLetterTable"],
            "document-writer",
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("writer");
    let append = |pk: &str, v: &str| json!({"op": "list_append", "key": {"PK": pk, "SK": "d"}, "path": "l", "values": [v]});
    let p0 = [
        (0, append("a", "a1")),
        (1, append("a", "a2")),
        (2, append("a", "a3")),
    ];
    let p1 = [(0, append("b", "b1")), (1, append("b", "b2"))];
    let batch = kafka_batch(&[("docs", 0, &p0), ("docs", 1, &p1)]);

    // When it is handled: a2 fails, a3 is held back, b's partition applies
    let first = writer.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(first.response.failed_ids(), ["docs-0:1", "docs-0:2"]);

    // When the whole batch comes again (what was applied included), twice
    healed.store(true, Ordering::SeqCst);
    for _ in 0..2 {
        let again = writer.handle_batch(&batch, Deadline::none()).await;
        assert!(again.response.failed_ids().is_empty());
    }

    // Then every value is in its list once, in offset order
    let items = scan(&setup, &tables["DocumentTable"]).await;
    assert_eq!(items["a|d"]["l"], json!(["a1", "a2", "a3"]));
    assert_eq!(items["b|d"]["l"], json!(["b1", "b2"]));
}
