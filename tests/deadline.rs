//! The invocation deadline holds even when DynamoDB stops answering: a response stalled (by a
//! loopback proxy) past the deadline is cut off, the unfinished records are reported for
//! redelivery, the partial batch response is sent in time, and nothing is lost. What finished
//! before the cut-off keeps its result, and a malformed record is kept however long the
//! writes take.

use crate::common;

use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use common::*;
use dev_testing::{client, client_for, proxy, template_tables};
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::document::{Document, DocumentConfig};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::{BatchResponse, Writer};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};

/// How long the proxy holds every response: far past the invocation's deadline.
const STALL: Duration = Duration::from_secs(30);
/// The invocation's time budget.
const BUDGET_MS: u64 = 3000;

fn sqs_event(bodies: &[Value]) -> Value {
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| json!({"eventSource":"aws:sqs","messageId":format!("m{i}"),"body":b.to_string()}))
        .collect();
    json!({ "Records": records })
}

fn invocation(event: Value) -> LambdaEvent<Value> {
    let mut context = Context::default();
    context.deadline = epoch_millis() + BUDGET_MS;
    LambdaEvent::new(event, context)
}

/// A ratchet writer whose table writes (`stalled_writes`) and/or dead letters go through a
/// proxy that stalls every response, without SDK retries.
async fn writer(stalled_writes: bool, stalled_letters: bool) -> (Writer<Ratchet>, String) {
    let direct = client();
    let tables = tables_described(&direct, &["RatchetTable", "DeadLetterTable"]).await;
    let stalled = client_for(&proxy::delaying(STALL).await.expect("proxy"), None, 1);
    let pick = |s: bool| if s { stalled.clone() } else { direct.clone() };
    let w = Writer::builder(
        "ratchet-writer",
        Ratchet::new(
            pick(stalled_writes),
            RatchetConfig::builder(&tables["RatchetTable"])
                .build()
                .expect("valid configuration"),
        ),
    )
    .dead_letters(DeadLetters::new(
        pick(stalled_letters),
        &tables["DeadLetterTable"],
        "ratchet-writer",
    ))
    .deadline_margin(Duration::from_secs(1))
    .build()
    .expect("valid writer");
    (w, tables["RatchetTable"].clone())
}

/// Fresh template tables whose key schemas this process has described already: a writer
/// describes its table once per process before its first write, which the slowed clients
/// below would otherwise spend the invocation's time on.
async fn tables_described(
    client: &aws_sdk_dynamodb::Client,
    names: &[&str],
) -> std::collections::BTreeMap<String, String> {
    let tables = template_tables(client, names).await;
    for table in tables.values() {
        dynamodb_exactly_once::__private::key_schema(client, table)
            .await
            .expect("schema");
    }
    tables
}

#[tokio::test]
async fn a_stalled_write_is_cut_off_at_the_deadline_and_redelivered_without_loss() {
    let (w, table) = writer(true, false).await;
    let bodies = [
        put("u", "a", 1, json!({"v":1})),
        put("u", "b", 1, json!({"v":2})),
    ];

    let response = answered_in_time(&w, &bodies).await;
    assert_eq!(
        response.failed_ids(),
        ["m0", "m1"],
        "unfinished records are reported"
    );
    // Lambda delivers them again (to a healthy connection this time): nothing is lost.
    let healthy = ratchet_writer_on(client(), &template_names(&w, &table));
    let again = healthy
        .handle(invocation(sqs_event(&bodies)))
        .await
        .expect("handled");
    assert!(again.failed_ids().is_empty());
    let items = scan(&client(), &table).await;
    assert_eq!(items["u|a"]["v"], json!(1));
    assert_eq!(items["u|b"]["v"], json!(2));
}

#[tokio::test]
async fn a_stalled_dead_letter_is_cut_off_and_the_record_reported() {
    let (w, _) = writer(false, true).await;
    let bodies = [json!("not a record"), put("u", "c", 1, json!({}))];

    let response = answered_in_time(&w, &bodies).await;
    // The malformed record is not acknowledged before it is kept; the good one is applied.
    assert_eq!(response.failed_ids(), ["m0"]);
}

/// A Kinesis event of raw record bodies, sequence numbers `0…0`, `0…1`, ...
fn kinesis_event(bodies: &[&str]) -> Value {
    let now = epoch_millis() as f64 / 1000.0;
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            json!({"eventSource": "aws:kinesis", "eventID": format!("shardId-000000000000:{i:020}"),
                "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/s",
                "kinesis": {"data": BASE64.encode(b), "partitionKey": "p",
                    "sequenceNumber": format!("{i:020}"), "approximateArrivalTimestamp": now,
                    "kinesisSchemaVersion": "1.0"}})
        })
        .collect();
    json!({ "Records": records })
}

#[tokio::test]
async fn a_malformed_head_record_is_kept_although_the_writes_use_up_the_time() {
    // Given a Kinesis batch whose first record is malformed, and writes that stall
    let (w, _) = writer(true, false).await;
    let good = put("u", "d", 1, json!({})).to_string();
    let event = kinesis_event(&["{not json", &good]);

    // When the writes use up the invocation's time
    let response = answered_event_in_time(&w, event).await;

    // Then the malformed record is kept, not reported: the checkpoint can move past it
    assert_eq!(
        response.failed_ids(),
        [format!("{:020}", 1)],
        "only the stalled write is reported"
    );
    let letters = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].payload, b"{not json");
}

#[tokio::test]
async fn a_cut_off_batch_keeps_the_results_of_the_records_that_finished() {
    // Given a document writer whose every response takes 1.6 s, one item at a time, and a
    // 3 s invocation that stops starting writes at 2 s and cuts off at 2.75 s
    let direct = client();
    let tables = tables_described(&direct, &["DocumentTable", "DeadLetterTable"]).await;
    let slow = client_for(
        &proxy::delaying(Duration::from_millis(1600))
            .await
            .expect("proxy"),
        None,
        1,
    );
    let document = |client| {
        let config = DocumentConfig::builder(&tables["DocumentTable"])
            .concurrency(1)
            .build()
            .expect("valid configuration");
        Writer::builder("document-writer", Document::new(client, config))
            .dead_letters(DeadLetters::new(
                direct.clone(),
                &tables["DeadLetterTable"],
                "document-writer",
            ))
            .deadline_margin(Duration::from_secs(1))
            .build()
            .expect("valid writer")
    };
    let append = |pk: &str| json!({"op": "list_append", "key": {"PK": pk, "SK": "d"}, "path": "l", "values": [pk]});
    let bodies = [append("a"), append("b"), append("c")];

    // When `a` finished, `b` is cut off in flight and `c` was never started
    let response = document(slow)
        .handle(invocation(sqs_event(&bodies)))
        .await
        .expect("handled");

    // Then only `b` and `c` are reported: `a`'s append is acknowledged
    assert_eq!(
        response.failed_ids(),
        ["m1", "m2"],
        "a record that finished before the cut-off keeps its result"
    );
    // And SQS delivering the reported records again leaves `a`'s list with its value once
    let again: Vec<Value> = bodies[1..].to_vec();
    let healthy = document(direct.clone());
    let event = sqs_event(&again);
    let _ = healthy.handle(invocation(event)).await.expect("handled");
    let items = scan(&direct, &tables["DocumentTable"]).await;
    assert_eq!(items["a|d"]["l"], json!(["a"]));
    assert_eq!(items["c|d"]["l"], json!(["c"]));
}

/// Invoke `w` with `bodies` and check that it answered within the invocation's budget.
async fn answered_in_time(w: &Writer<Ratchet>, bodies: &[Value]) -> BatchResponse {
    answered_event_in_time(w, sqs_event(bodies)).await
}

/// Invoke `w` with `event` and check that it answered within the invocation's budget.
async fn answered_event_in_time(w: &Writer<Ratchet>, event: Value) -> BatchResponse {
    let started = Instant::now();
    let response = w.handle(invocation(event)).await.expect("handled");
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(BUDGET_MS),
        "answered after {took:?}"
    );
    response
}

/// The table names of `w`, keyed by logical id, for a second writer on the same tables.
fn template_names(w: &Writer<Ratchet>, table: &str) -> std::collections::BTreeMap<String, String> {
    std::collections::BTreeMap::from([
        ("RatchetTable".to_string(), table.to_string()),
        (
            "DeadLetterTable".to_string(),
            w.dead_letter_table()
                .expect("a dead-letter table")
                .table()
                .to_string(),
        ),
    ])
}

/// An idempotent writer at a cut-off: the items written before it keep their results (they
/// are acknowledged, not reported and re-billed), the ones in flight or never started are
/// reported (acknowledged only if written: the other tests of this file check that).
async fn idempotent_cut_off_keeps_finished_items<P: dynamodb_exactly_once::Protocol>(
    writer: impl Fn(aws_sdk_dynamodb::Client) -> Writer<P>,
    bodies: [Value; 3],
) {
    // Every response takes 1.6 s; one item at a time; the invocation stops starting writes
    // at 2 s and cuts off at 2.75 s: `a` finishes, `b` is in flight, `c` never starts.
    let slow = client_for(
        &proxy::delaying(Duration::from_millis(1600))
            .await
            .expect("proxy"),
        None,
        1,
    );
    let response = writer(slow)
        .handle(invocation(sqs_event(&bodies)))
        .await
        .expect("handled");
    let failed = response.failed_ids();
    assert!(
        !failed.contains(&"m0".to_string()),
        "the item that finished before the cut-off keeps its result: {failed:?}"
    );
    assert!(
        failed.contains(&"m2".to_string()),
        "`c` was cut off or never started: {failed:?}"
    );
}

#[tokio::test]
async fn a_cut_off_counter_batch_keeps_the_items_that_finished() {
    let direct = client();
    let tables = tables_described(&direct, &["CounterTable", "DeadLetterTable"]).await;
    let add =
        |pk: &str| json!({"key": {"PK": pk, "SK": "d"}, "add": {"n": 1}, "idempotencyKey": pk});
    idempotent_cut_off_keeps_finished_items(
        |client| {
            let config = CounterConfig::builder(&tables["CounterTable"])
                .concurrency(1)
                .build()
                .expect("valid configuration");
            Writer::builder("counter-writer", Counter::new(client, config))
                .dead_letters(DeadLetters::new(
                    direct.clone(),
                    &tables["DeadLetterTable"],
                    "counter-writer",
                ))
                .deadline_margin(Duration::from_secs(1))
                .build()
                .expect("valid writer")
        },
        [add("a"), add("b"), add("c")],
    )
    .await;
}

#[tokio::test]
async fn a_cut_off_ratchet_batch_keeps_the_items_that_finished() {
    let direct = client();
    let tables = tables_described(&direct, &["RatchetTable", "DeadLetterTable"]).await;
    idempotent_cut_off_keeps_finished_items(
        |client| {
            let config = RatchetConfig::builder(&tables["RatchetTable"])
                .concurrency(1)
                .build()
                .expect("valid configuration");
            Writer::builder("ratchet-writer", Ratchet::new(client, config))
                .dead_letters(DeadLetters::new(
                    direct.clone(),
                    &tables["DeadLetterTable"],
                    "ratchet-writer",
                ))
                .deadline_margin(Duration::from_secs(1))
                .build()
                .expect("valid writer")
        },
        [
            put("a", "s", 1, json!({})),
            put("b", "s", 1, json!({})),
            put("c", "s", 1, json!({})),
        ],
    )
    .await;
}
