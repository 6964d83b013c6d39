//! The batch processor at its edges: an ordered stream batch with no sink chosen (run, with an
//! ERROR), raw bodies and record metadata, the Lambda context,
//! a budget below the deadline margin.

use std::time::Duration;

use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::__private::json_subscriber;
use dynamodb_exactly_once_lambda::dead_letter::ReportOnly;
use dynamodb_exactly_once_lambda::processor::{Processor, StreamOrder};
use dynamodb_exactly_once_lambda::Batch;
use serde_json::json;
use tracing_subscriber::EnvFilter;

use crate::common::LogCapture;

use crate::processor::{
    dead_letters, handle, invocation, kinesis_event, kinesis_orders, order, Calls, Order,
};

fn defaults(calls: &Calls) -> Processor<Order> {
    let calls = calls.clone();
    Processor::builder("orders", move |r| handle(calls.clone(), r))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid processor")
}

#[tokio::test]
async fn an_ordered_stream_batch_without_a_chosen_sink_runs_under_report_only_with_an_error() {
    // Given the processor's defaults (no dead-letter sink chosen, shard order)
    let calls = Calls::default();
    let p = defaults(&calls);
    let capture = LogCapture::default();
    let _guard =
        tracing::subscriber::set_default(json_subscriber(EnvFilter::new("info"), capture.clone()));

    // When a valid Kinesis batch is delivered
    let valid: Vec<_> = (1..4)
        .map(|i| ("k", order(&format!("ok-{i}"), 1).to_string()))
        .collect();
    let answered = p.handle(invocation(kinesis_event(&valid), 60_000)).await;

    // Then it runs (no invocation error: a mapping's retries would discard it unrun), and
    // an ERROR line names the choice to make
    let answered = answered.expect("no invocation error");
    assert!(answered.failed_ids().is_empty());
    assert_eq!(calls.seen(), ["ok-1", "ok-2", "ok-3"]);
    let logs = capture.text();
    assert!(
        logs.contains("\"level\":\"ERROR\"") && logs.contains(".dead_letters("),
        "{logs}"
    );

    // And a poison head is reported with its held-back records, as under `ReportOnly`
    let mut records = vec![("k", "not JSON".to_string())];
    records.extend((4..6).map(|i| ("k", order(&format!("ok-{i}"), 1).to_string())));
    let batch = Batch::from_event(kinesis_event(&records)).expect("batch");
    let report = p.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(report.response.failed_ids().len(), 3);
    assert_eq!(calls.seen().len(), 3, "{:?}", calls.seen());

    // And an SQS batch is not affected
    let sqs = crate::processor::sqs_event(&[order("ok-9", 1)], None);
    assert!(p
        .handle(invocation(sqs, 60_000))
        .await
        .expect("sqs")
        .failed_ids()
        .is_empty());
}

#[tokio::test]
async fn report_only_chosen_explicitly_or_a_keeping_sink_runs_the_stream_batch() {
    let batch = |_: ()| {
        Batch::from_event(kinesis_orders(&[
            ("k", json!("not an order")),
            ("k", order("ok-1", 1)),
        ]))
        .expect("batch")
    };
    // ReportOnly chosen: the head is reported and the rest held back (they share its fate)
    let calls = Calls::default();
    let c = calls.clone();
    let p = Processor::builder("orders", move |r| handle(c.clone(), r))
        .dead_letters(ReportOnly)
        .build()
        .expect("processor");
    let report = p.handle_batch(&batch(()), Deadline::none()).await;
    assert_eq!(report.response.failed_ids().len(), 2);
    assert!(calls.seen().is_empty());
    // A keeping sink: the head is kept, the rest runs
    let calls = Calls::default();
    let c = calls.clone();
    let p = Processor::builder("orders", move |r| handle(c.clone(), r))
        .dead_letters(dead_letters().await)
        .stream_order(StreamOrder::Shard)
        .build()
        .expect("processor");
    let report = p.handle_batch(&batch(()), Deadline::none()).await;
    assert!(report.response.failed_ids().is_empty());
    assert_eq!(calls.seen(), ["ok-1"]);
}

#[tokio::test]
async fn an_invocation_budget_below_the_deadline_margin_still_runs_its_records() {
    // Given the default 2 s margin and a function whose timeout leaves 1.5 s
    let calls = Calls::default();
    let c = calls.clone();
    let p = Processor::builder("orders", move |r| handle(c.clone(), r))
        .build()
        .expect("processor");
    let sqs = crate::processor::sqs_event(&[order("ok-1", 1), order("ok-2", 1)], None);

    // When it is invoked
    let failed = p
        .handle(invocation(sqs, 1_500))
        .await
        .expect("answered")
        .failed_ids();

    // Then the invocation runs with a reduced margin (an ERROR names the timeout) instead of
    // deferring every record on every invocation
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(calls.seen().len(), 2);
}

// ------------------------------------------------------------------- N8: bodies, metadata

#[tokio::test]
async fn raw_and_text_bodies_reach_their_handlers_as_delivered() {
    use std::sync::{Arc, Mutex};
    // Given a Kinesis record that is not JSON (a protobuf message, say) and one in plain text
    let bytes: Vec<u8> = vec![0x08, 0x96, 0x01, 0xff];
    let seen = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let s = Arc::clone(&seen);
    let raw = Processor::raw_builder(
        "raw",
        move |r: dynamodb_exactly_once_lambda::Record<Vec<u8>>| {
            let s = Arc::clone(&s);
            async move {
                if let Ok(mut v) = s.lock() {
                    v.push(r.body);
                }
                Ok(())
            }
        },
    )
    .dead_letters(ReportOnly)
    .build()
    .expect("raw processor");
    let mut event = kinesis_event(&[("k", "placeholder".into())]);
    event["Records"][0]["kinesis"]["data"] = json!(base64_of(&bytes));
    let failed = raw
        .handle(invocation(event, 60_000))
        .await
        .expect("raw")
        .failed_ids();
    assert!(failed.is_empty());
    assert_eq!(
        seen.lock().map(|v| v.clone()).unwrap_or_default(),
        vec![bytes.clone()]
    );

    // A text processor takes UTF-8 and rejects the rest as `invalid_body`
    let text = Processor::text_builder(
        "text",
        |r: dynamodb_exactly_once_lambda::Record<String>| async move {
            assert_eq!(r.body, "plain text, no JSON");
            Ok(())
        },
    )
    .dead_letters(ReportOnly)
    .build()
    .expect("text processor");
    let report = text
        .handle_batch(
            &Batch::from_event(kinesis_event(&[("k", "plain text, no JSON".into())]))
                .expect("batch"),
            Deadline::none(),
        )
        .await;
    assert_eq!(report.summary.count("processed"), 1);
    let mut event = kinesis_event(&[("k", "x".into())]);
    event["Records"][0]["kinesis"]["data"] = json!(base64_of(&bytes));
    let report = text
        .handle_batch(&Batch::from_event(event).expect("batch"), Deadline::none())
        .await;
    assert_eq!(report.summary.count("rejected_reported"), 1);
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn the_handler_sees_sqs_attributes_message_attributes_and_the_lambda_context() {
    use std::sync::{Arc, Mutex};
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let p = Processor::builder(
        "meta",
        move |r: dynamodb_exactly_once_lambda::Record<serde_json::Value>| {
            let s = Arc::clone(&s);
            async move {
                let tenant = r
                    .message_attribute("tenant")
                    .and_then(|a| a.string_value.clone());
                let request = r.context().map(|c| c.request_id.clone());
                if let Ok(mut v) = s.lock() {
                    v.push((
                        r.receive_count(),
                        tenant,
                        r.attribute("SenderId").map(str::to_string),
                        request,
                    ));
                }
                Ok(())
            }
        },
    )
    .build()
    .expect("processor");
    let mut event = crate::processor::sqs_event(&[json!({"a": 1})], None);
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = json!("3");
    event["Records"][0]["attributes"]["SenderId"] = json!("AIDA123");
    event["Records"][0]["messageAttributes"] =
        json!({"tenant": {"stringValue": "t1", "dataType": "String"}});
    let mut invocation = invocation(event, 60_000);
    invocation.context.request_id = "req-42".into();
    let _ = p.handle(invocation).await.expect("handled");
    assert_eq!(
        seen.lock().map(|v| v.clone()).unwrap_or_default(),
        [(
            Some(3),
            Some("t1".to_string()),
            Some("AIDA123".to_string()),
            Some("req-42".to_string())
        )]
    );
}

#[tokio::test]
async fn dynamodb_stream_images_and_keys_arrive_typed() {
    use dynamodb_exactly_once_lambda::processor::DynamoDbChange;
    use std::sync::{Arc, Mutex};

    #[derive(Debug, Clone, PartialEq, serde::Deserialize)]
    struct User {
        #[serde(rename = "PK")]
        pk: String,
        visits: i64,
    }
    #[derive(Debug, Clone, PartialEq, serde::Deserialize)]
    struct Key {
        #[serde(rename = "PK")]
        pk: String,
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let p = Processor::builder(
        "users",
        move |r: dynamodb_exactly_once_lambda::Record<DynamoDbChange<User>>| {
            let s = Arc::clone(&s);
            async move {
                let change = r.body;
                if let Ok(mut v) = s.lock() {
                    v.push((
                        change.event_name.clone(),
                        change.keys_as::<Key>().map(|k| k.pk).unwrap_or_default(),
                        change.new_image.clone(),
                        change.old_image.clone(),
                    ));
                }
                Ok(())
            }
        },
    )
    .dead_letters(ReportOnly)
    .build()
    .expect("processor");
    let records = vec![
        dev_testing::events::stream_record(
            "e1",
            "INSERT",
            &format!("{:021}", 1),
            &json!({"PK": "u1"}),
            Some(&json!({"PK": "u1", "visits": 1})),
            None,
        ),
        dev_testing::events::stream_record(
            "e2",
            "MODIFY",
            &format!("{:021}", 2),
            &json!({"PK": "u1"}),
            Some(&json!({"PK": "u1", "visits": 2})),
            Some(&json!({"PK": "u1", "visits": 1})),
        ),
        dev_testing::events::stream_record(
            "e3",
            "REMOVE",
            &format!("{:021}", 3),
            &json!({"PK": "u1"}),
            None,
            Some(&json!({"PK": "u1", "visits": 2})),
        ),
    ];
    let event = json!({"Records": records});
    let failed = p
        .handle(invocation(event, 60_000))
        .await
        .expect("handled")
        .failed_ids();
    assert!(failed.is_empty(), "{failed:?}");
    let user = |visits| {
        Some(User {
            pk: "u1".into(),
            visits,
        })
    };
    assert_eq!(
        seen.lock().map(|v| v.clone()).unwrap_or_default(),
        [
            ("INSERT".to_string(), "u1".to_string(), user(1), None),
            ("MODIFY".to_string(), "u1".to_string(), user(2), user(1)),
            ("REMOVE".to_string(), "u1".to_string(), None, user(2)),
        ]
    );
}
