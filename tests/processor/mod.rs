//! The batch processor: your own handler behind the pipeline, against DynamoDB Local (the
//! dead-letter table). Partial batch responses per source, rejects kept or reported, retries,
//! ordering (Kinesis by shard and by partition key, SQS FIFO by group), the deadline.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use common::fixture;
use dev_testing::{client, template_tables};
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once_lambda::dead_letter::{DeadLetterSink, DeadLetters, ReportOnly};
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError, StreamOrder};
use lambda_runtime::{Context, LambdaEvent};
use serde::Deserialize;
use serde_json::{json, Value};

// ------------------------------------------------------------------- the handler

/// The test's record: an order.
#[derive(Debug, Deserialize)]
pub(crate) struct Order {
    pub(crate) id: String,
    pub(crate) amount: i64,
}

/// The ids the handler was called with, in call order.
#[derive(Clone, Default)]
pub(crate) struct Calls(Arc<Mutex<Vec<String>>>);

impl Calls {
    pub(crate) fn seen(&self) -> Vec<String> {
        self.0.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

/// Ids `retry*` fail transiently, `sleep*` take 10 s, `panic*` panic; a negative amount is
/// rejected; anything else succeeds.
pub(crate) async fn handle(calls: Calls, record: Record<Order>) -> Result<(), RecordError> {
    let order = &record.body;
    if let Ok(mut seen) = calls.0.lock() {
        seen.push(order.id.clone());
    }
    if order.id.starts_with("retry") {
        return Err(RecordError::retry("payment API unavailable"));
    }
    if order.id.starts_with("sleep") {
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    assert!(!order.id.starts_with("panic"), "handler bug");
    if order.amount < 0 {
        return Err(RecordError::reject("amount must not be negative"));
    }
    Ok(())
}

pub(crate) fn processor(
    calls: &Calls,
    sink: impl DeadLetterSink + 'static,
    order: StreamOrder,
) -> Processor<Order> {
    let calls = calls.clone();
    Processor::builder("orders", move |r| handle(calls.clone(), r))
        .dead_letters(sink)
        .stream_order(order)
        .concurrency(4)
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid processor")
}

/// A dead-letter table of its own.
pub(crate) async fn dead_letters() -> DeadLetters {
    let client = client();
    let tables = template_tables(&client, &["DeadLetterTable"]).await;
    DeadLetters::new(client, &tables["DeadLetterTable"], "orders")
}

pub(crate) fn order(id: &str, amount: i64) -> Value {
    json!({"id": id, "amount": amount})
}

// ------------------------------------------------------------------- events

pub(crate) fn invocation(event: Value, budget_ms: u64) -> LambdaEvent<Value> {
    let mut context = Context::default();
    context.deadline = epoch_millis() + budget_ms;
    LambdaEvent::new(event, context)
}

pub(crate) async fn run(p: &Processor<Order>, event: Value) -> Vec<String> {
    p.handle(invocation(event, 60_000))
        .await
        .expect("handled")
        .failed_ids()
}

/// An SQS event; `group` makes it a FIFO queue's batch.
pub(crate) fn sqs_event(bodies: &[Value], groups: Option<&[&str]>) -> Value {
    let arn = if groups.is_some() {
        "arn:aws:sqs:us-east-1:1:orders.fifo"
    } else {
        "arn:aws:sqs:us-east-1:1:orders"
    };
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut attributes = json!({"SentTimestamp": epoch_millis().to_string()});
            if let Some(groups) = groups {
                attributes["MessageGroupId"] = json!(groups[i]);
                attributes["SequenceNumber"] = json!(format!("{i:020}"));
            }
            json!({"eventSource": "aws:sqs", "messageId": format!("m{i}"), "body": b.to_string(),
                "eventSourceARN": arn, "attributes": attributes})
        })
        .collect();
    json!({ "Records": records })
}

/// A Kinesis event of one shard: raw bodies with their partition keys, sequence numbers
/// `0…0`, `0…1`, ...
pub(crate) fn kinesis_event(records: &[(&str, String)]) -> Value {
    #[allow(clippy::cast_precision_loss)]
    let now = epoch_millis() as f64 / 1000.0;
    let records: Vec<Value> = records
        .iter()
        .enumerate()
        .map(|(i, (key, body))| {
            json!({"eventSource": "aws:kinesis", "eventID": format!("shardId-000000000000:{i:020}"),
                "eventSourceARN": "arn:aws:kinesis:us-east-1:1:stream/orders",
                "kinesis": {"data": BASE64.encode(body), "partitionKey": key,
                    "sequenceNumber": format!("{i:020}"), "approximateArrivalTimestamp": now,
                    "kinesisSchemaVersion": "1.0"}})
        })
        .collect();
    json!({ "Records": records })
}

pub(crate) fn kinesis_orders(orders: &[(&str, Value)]) -> Value {
    let records: Vec<(&str, String)> = orders.iter().map(|(k, b)| (*k, b.to_string())).collect();
    kinesis_event(&records)
}

fn seq(i: usize) -> String {
    format!("{i:020}")
}

// ------------------------------------------------------------------- SQS

#[tokio::test]
async fn sqs_reports_only_the_retried_message_and_keeps_the_rejected_ones_as_dead_letters() {
    // Given a standard queue's batch: a good order, one failing transiently, one invalid and
    // one whose body is not an order
    let calls = Calls::default();
    let letters = dead_letters().await;
    let p = processor(&calls, letters.clone(), StreamOrder::default());
    let bodies = [
        order("ok-1", 5),
        order("retry-1", 5),
        order("neg-1", -3),
        json!({"id": 7}),
    ];

    // When it is processed
    let failed = run(&p, sqs_event(&bodies, None)).await;

    // Then only the transient failure is reported; the two rejected are kept and acknowledged
    assert_eq!(failed, ["m1"]);
    let mut seen = calls.seen();
    seen.sort();
    assert_eq!(
        seen,
        ["neg-1", "ok-1", "retry-1"],
        "the bad body never reaches the handler"
    );
    // (A standard queue's letters list by rejection time: ordered here by message id.)
    let mut kept = letters.list().await.expect("dead letters");
    kept.sort_by(|a, b| a.position.id.cmp(&b.position.id));
    let reasons: Vec<(&str, &str)> = kept
        .iter()
        .map(|l| (l.position.id.as_str(), l.reason.code.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [("m2", "rejected_by_handler"), ("m3", "invalid_body")]
    );
    assert_eq!(kept[1].payload, br#"{"id":7}"#, "kept byte for byte");
    assert!(kept[0]
        .reason
        .message
        .contains("amount must not be negative"));
}

#[tokio::test]
async fn a_body_that_does_not_deserialize_is_dead_lettered_and_never_blocks_the_shard() {
    // Given a Kinesis shard whose first record is not JSON
    let calls = Calls::default();
    let letters = dead_letters().await;
    let p = processor(&calls, letters.clone(), StreamOrder::Shard);
    let event = kinesis_event(&[
        ("a", "{not json".into()),
        ("a", order("ok-1", 1).to_string()),
    ]);

    // When it is processed in shard order
    let failed = run(&p, event).await;

    // Then it is kept as a dead letter and the shard goes on
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(calls.seen(), ["ok-1"]);
    let kept = letters.list().await.expect("dead letters");
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].reason.code, "invalid_body");
    assert_eq!(kept[0].payload, b"{not json");
    assert_eq!(
        kept[0].position.shard_id.as_deref(),
        Some("shardId-000000000000")
    );
}

// ------------------------------------------------------------------- Kinesis order

#[tokio::test]
async fn kinesis_by_shard_reports_a_retry_and_every_later_record_and_runs_none_of_them() {
    // Given one shard's batch whose second record fails transiently
    let calls = Calls::default();
    let p = processor(&calls, dead_letters().await, StreamOrder::Shard);
    let event = kinesis_orders(&[
        ("a", order("ok-1", 1)),
        ("b", order("retry-1", 1)),
        ("c", order("ok-2", 1)),
        ("a", order("ok-3", 1)),
    ]);

    // When it is processed
    let failed = run(&p, event).await;

    // Then it and everything after it are reported, and nothing after it ran
    assert_eq!(failed, [seq(1), seq(2), seq(3)]);
    assert_eq!(calls.seen(), ["ok-1", "retry-1"]);
}

#[tokio::test]
async fn kinesis_by_partition_key_holds_back_only_the_failed_key() {
    // Given keys a and b interleaved, a's first record failing transiently
    let calls = Calls::default();
    let p = processor(&calls, dead_letters().await, StreamOrder::PartitionKey);
    let event = kinesis_orders(&[
        ("a", order("retry-a", 1)),
        ("b", order("ok-b1", 1)),
        ("a", order("ok-a2", 1)),
        ("b", order("ok-b2", 1)),
    ]);

    // When it is processed
    let failed = run(&p, event).await;

    // Then a's records are reported (the second one never ran); b's ran in order
    assert_eq!(failed, [seq(0), seq(2)]);
    let seen = calls.seen();
    assert!(!seen.contains(&"ok-a2".to_string()), "{seen:?}");
    let b: Vec<&String> = seen.iter().filter(|id| id.contains("-b")).collect();
    assert_eq!(b, ["ok-b1", "ok-b2"]);
}

#[tokio::test]
async fn kinesis_kpl_user_records_each_reach_the_handler_with_their_own_delivery_id() {
    // Given a KPL-aggregated Kinesis batch (the ratchet fixture), read as plain JSON
    let ids = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&ids);
    let p = Processor::builder("kpl", move |r: Record<Value>| {
        let seen = Arc::clone(&seen);
        async move {
            if let Ok(mut ids) = seen.lock() {
                ids.push((
                    r.delivery_id(),
                    r.sub_sequence_number(),
                    r.partition_key().map(str::to_string),
                ));
            }
            Ok(())
        }
    })
    .dead_letters(ReportOnly)
    .build()
    .expect("valid processor");

    // When it is processed
    let response = p
        .handle(invocation(
            fixture("ratchet-kinesis-aggregated.json"),
            60_000,
        ))
        .await;

    // Then every user record ran once, each with a distinct delivery id
    assert!(response.expect("handled").failed_ids().is_empty());
    let ids = ids.lock().map(|i| i.clone()).unwrap_or_default();
    assert!(ids.len() > 1, "{ids:?}");
    let mut distinct: Vec<&String> = ids.iter().map(|(d, _, _)| d).collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), ids.len(), "{ids:?}");
    assert!(
        ids.iter().any(|(_, sub, _)| sub.is_some()),
        "user records carry sub-sequence numbers"
    );
}

// ------------------------------------------------------------------- SQS FIFO

#[tokio::test]
async fn fifo_a_retry_holds_back_its_group_and_a_reject_lets_its_group_go_on() {
    // Given a FIFO batch: g1 fails at its head; g2 has a rejected order before a good one
    let calls = Calls::default();
    let letters = dead_letters().await;
    let p = processor(&calls, letters.clone(), StreamOrder::default());
    let bodies = [
        order("retry-g1", 1),
        order("neg-g2", -1),
        order("ok-g1", 1),
        order("ok-g2", 1),
    ];
    let groups = ["g1", "g2", "g1", "g2"];

    // When it is processed
    let failed = run(&p, sqs_event(&bodies, Some(&groups))).await;

    // Then g1's later message is held back (never ran); g2's rejected one is kept, g2 goes on
    assert_eq!(failed, ["m0", "m2"]);
    let seen = calls.seen();
    assert!(!seen.contains(&"ok-g1".to_string()), "{seen:?}");
    let g2: Vec<&String> = seen.iter().filter(|id| id.ends_with("g2")).collect();
    assert_eq!(g2, ["neg-g2", "ok-g2"]);
    assert_eq!(letters.list().await.expect("dead letters").len(), 1);
}

// ------------------------------------------------------------------- DynamoDB Streams

/// A DynamoDB stream record's body as the handler reads it.
#[derive(Debug, Deserialize)]
struct Change {
    #[serde(rename = "eventName")]
    event_name: String,
    dynamodb: Value,
}

#[tokio::test]
async fn dynamodb_streams_answer_by_sequence_number_and_stop_the_shard_at_a_retry() {
    // Given a stream batch whose second change fails transiently
    let calls = Calls::default();
    let seen = calls.clone();
    let p = Processor::builder("changes", move |r: Record<Change>| {
        let seen = seen.clone();
        async move {
            let key = r.body.dynamodb["Keys"]["PK"]["S"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            if let Ok(mut s) = seen.0.lock() {
                s.push(format!("{}:{key}", r.body.event_name));
            }
            if key == "b" {
                return Err(RecordError::retry("downstream busy"));
            }
            Ok(())
        }
    })
    .dead_letters(ReportOnly)
    .build()
    .expect("valid processor");
    let change = |n: usize, pk: &str| {
        dev_testing::events::stream_record(
            &format!("e{n}"),
            "INSERT",
            &format!("{n:021}"),
            &json!({"PK": pk}),
            Some(&json!({"PK": pk, "v": 1})),
            None,
        )
    };
    let event = json!({"Records": [change(1, "a"), change(2, "b"), change(3, "c")]});

    // When it is processed
    let response = p.handle(invocation(event, 60_000)).await.expect("handled");

    // Then the failed change and the later one are reported by sequence number
    let answer = serde_json::to_value(&response).expect("json");
    assert_eq!(
        answer,
        json!({"batchItemFailures": [{"itemIdentifier": format!("{:021}", 2)}, {"itemIdentifier": format!("{:021}", 3)}]})
    );
    assert_eq!(calls.seen(), ["INSERT:a", "INSERT:b"]);
}

// ------------------------------------------------------------------- deadline

#[tokio::test]
async fn a_handler_sleeping_past_the_deadline_is_cut_off_and_finished_records_keep_their_results() {
    // Given a 3 s invocation that stops starting records at 2 s and cuts off at 2.75 s, one
    // record at a time: two quick orders, one that sleeps 10 s, one more
    let calls = Calls::default();
    let letters = dead_letters().await;
    let seen = calls.clone();
    let p = Processor::builder("orders", move |r| handle(seen.clone(), r))
        .dead_letters(letters)
        .concurrency(1)
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid processor");
    let bodies = [
        order("ok-1", 1),
        order("ok-2", 1),
        order("sleep-1", 1),
        order("ok-3", 1),
    ];

    // When it is processed
    let started = Instant::now();
    let response = p.handle(invocation(sqs_event(&bodies, None), 3000)).await;
    let took = started.elapsed();

    // Then the answer comes in time, the sleeper and the record after it are reported, and
    // the records that finished are acknowledged
    assert!(
        took < Duration::from_millis(3000),
        "answered after {took:?}"
    );
    assert_eq!(response.expect("handled").failed_ids(), ["m2", "m3"]);
    assert_eq!(
        calls.seen(),
        ["ok-1", "ok-2", "sleep-1"],
        "nothing started after the margin"
    );
}

#[tokio::test]
async fn in_shard_order_a_cut_off_record_reports_itself_and_defers_the_rest() {
    // Given one shard: a quick record, a sleeper, a quick one; a 3 s invocation
    let calls = Calls::default();
    let p = processor(&calls, dead_letters().await, StreamOrder::Shard);
    let event = kinesis_orders(&[
        ("a", order("ok-1", 1)),
        ("a", order("sleep-1", 1)),
        ("a", order("ok-2", 1)),
    ]);

    // When it is processed
    let started = Instant::now();
    let response = p.handle(invocation(event, 3000)).await.expect("handled");

    // Then the first keeps its result; the sleeper and the one after it are reported
    assert!(started.elapsed() < Duration::from_millis(3000));
    assert_eq!(response.failed_ids(), [seq(1), seq(2)]);
    assert_eq!(calls.seen(), ["ok-1", "sleep-1"]);
}

// ------------------------------------------------------------------- report only, panics

#[tokio::test]
async fn report_only_reports_rejected_records_for_the_sources_own_dead_letter_queue() {
    // Given no dead-letter table: rejected records are left to the queue's redrive policy
    let calls = Calls::default();
    let p = processor(&calls, ReportOnly, StreamOrder::default());
    let bodies = [order("ok-1", 1), order("neg-1", -1), json!("not an order")];
    let batch = dynamodb_exactly_once_lambda::Batch::from_event(sqs_event(&bodies, None))
        .expect("sqs batch");

    // When it is processed
    let report = p
        .handle_batch(&batch, dynamodb_exactly_once::Deadline::none())
        .await;

    // Then both rejected records are reported, counted apart from transient failures
    assert_eq!(report.response.failed_ids(), ["m1", "m2"]);
    assert_eq!(report.summary.count("rejected_reported"), 2);
    assert_eq!(report.summary.count("processed"), 1);
    assert_eq!(report.summary.count("failed"), 0);
}

#[tokio::test]
async fn report_only_in_a_fifo_group_holds_the_group_back_behind_the_rejected_message() {
    // Given a FIFO group whose head is rejected, with no dead-letter table
    let calls = Calls::default();
    let p = processor(&calls, ReportOnly, StreamOrder::default());
    let bodies = [order("neg-1", -1), order("ok-1", 1)];

    // When it is processed
    let failed = run(&p, sqs_event(&bodies, Some(&["g", "g"]))).await;

    // Then the group waits for the queue's redrive to move its head away
    assert_eq!(failed, ["m0", "m1"]);
    assert_eq!(calls.seen(), ["neg-1"]);
}

#[tokio::test]
async fn a_panicking_handler_fails_only_its_record() {
    let calls = Calls::default();
    let p = processor(&calls, ReportOnly, StreamOrder::default());
    let bodies = [order("panic-1", 1), order("ok-1", 1)];
    let failed = run(&p, sqs_event(&bodies, None)).await;
    assert_eq!(failed, ["m0"]);
}

pub(crate) mod check;
pub(crate) mod edges;
