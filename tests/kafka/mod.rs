//! Kafka batches (Amazon MSK, self-managed) through the batch processor: order and failure per
//! topic-partition (a failure holds back the later offsets of its own partition only), poison
//! records kept as dead letters without blocking their partition, the partial batch response
//! by partition and offset, the deadline. The ready functions' Kafka tests are in
//! `kafka_writers.rs`.

use crate::processor::{dead_letters, invocation, order, processor, run, Calls};

use std::time::{Duration, Instant};

use dev_testing::events::kafka_event;
use dynamodb_exactly_once_lambda::processor::StreamOrder;
use serde_json::{json, Value};

#[tokio::test]
async fn kafka_a_failed_record_holds_back_the_later_offsets_of_its_partition_only() {
    // Given two partitions, the second record of orders-0 failing transiently
    let calls = Calls::default();
    let p = processor(&calls, dead_letters().await, StreamOrder::default());
    let event = kafka_event(&[
        (
            "orders",
            0,
            &[
                (40, order("ok-a1", 1)),
                (41, order("retry-a2", 1)),
                (42, order("ok-a3", 1)),
            ],
        ),
        (
            "orders",
            1,
            &[(7, order("ok-b1", 1)), (8, order("ok-b2", 1))],
        ),
    ]);

    // When it is processed
    let response = p.handle(invocation(event, 60_000)).await.expect("handled");

    // Then orders-0 stops at the failure (41 and 42 reported, 42 never run) and orders-1 runs
    // whole; the response names partition and offset, as Lambda's Kafka mappings read it
    assert_eq!(response.failed_ids(), ["orders-0:41", "orders-0:42"]);
    assert_eq!(
        serde_json::to_value(&response).expect("json"),
        json!({"batchItemFailures": [
            {"itemIdentifier": {"partition": "orders-0", "offset": 41}},
            {"itemIdentifier": {"partition": "orders-0", "offset": 42}}]})
    );
    let mut seen = calls.seen();
    seen.sort();
    assert_eq!(seen, ["ok-a1", "ok-b1", "ok-b2", "retry-a2"]);
}

#[tokio::test]
async fn kafka_a_poison_value_at_any_position_is_a_dead_letter_and_its_partition_goes_on() {
    for poison_at in 0..3_i64 {
        // Given a partition whose record at `poison_at` is not JSON, and a record whose value
        // is not even base64 in the other partition
        let calls = Calls::default();
        let letters = dead_letters().await;
        let p = processor(&calls, letters.clone(), StreamOrder::default());
        let values: Vec<(i64, Value)> = (0..3)
            .map(|i| {
                let v = if i == poison_at {
                    json!("{not json")
                } else {
                    order(&format!("ok-{i}"), 1)
                };
                (i, v)
            })
            .collect();
        let mut event = kafka_event(&[
            ("orders", 0, &values),
            ("orders", 1, &[(5, order("ok-b", 1)), (6, order("ok-c", 1))]),
        ]);
        event["records"]["orders-1"][0]["value"] = json!("%%% not base64");

        // When it is processed
        let failed = run(&p, event).await;

        // Then nothing is reported, every other record ran, both are kept with their reason
        assert!(failed.is_empty(), "poison at {poison_at}: {failed:?}");
        let mut seen = calls.seen();
        seen.sort();
        let mut expected: Vec<String> = (0..3)
            .filter(|i| *i != poison_at)
            .map(|i| format!("ok-{i}"))
            .collect();
        expected.push("ok-c".into());
        assert_eq!(seen, expected, "poison at {poison_at}");
        let kept = letters.list().await.expect("dead letters");
        let reasons: Vec<(&str, &str)> = kept
            .iter()
            .map(|l| (l.position.id.as_str(), l.reason.code.as_str()))
            .collect();
        let poison_id = format!("orders-0:{poison_at}");
        assert_eq!(
            reasons,
            [
                (poison_id.as_str(), "invalid_body"),
                ("orders-1:5", "bad_kafka_record")
            ]
        );
        assert_eq!(kept[0].payload, b"{not json", "kept byte for byte");
        let position = kept[0].position.kafka.as_ref().expect("kafka position");
        assert_eq!(
            (position.topic.as_str(), position.offset),
            ("orders", poison_at)
        );
        assert_eq!(position.header("source"), Some(&b"test"[..]));
    }
}

#[tokio::test]
async fn kafka_a_cut_off_record_reports_itself_and_the_rest_of_its_partition_only() {
    // Given a 3 s invocation: orders-0 holds a quick record, a sleeper and a quick one;
    // orders-1 a quick record
    let calls = Calls::default();
    let p = processor(&calls, dead_letters().await, StreamOrder::default());
    let event = kafka_event(&[
        (
            "orders",
            0,
            &[
                (1, order("ok-a1", 1)),
                (2, order("sleep-a2", 1)),
                (3, order("ok-a3", 1)),
            ],
        ),
        ("orders", 3, &[(9, order("ok-b", 1))]),
    ]);

    // When it is processed
    let started = Instant::now();
    let response = p.handle(invocation(event, 3000)).await.expect("handled");

    // Then the answer comes in time: the sleeper and the record after it are reported, the
    // rest keep their results
    assert!(started.elapsed() < Duration::from_millis(3000));
    assert_eq!(response.failed_ids(), ["orders-0:2", "orders-0:3"]);
    let mut seen = calls.seen();
    seen.sort();
    assert_eq!(seen, ["ok-a1", "ok-b", "sleep-a2"]);
}

#[tokio::test]
async fn kafka_a_handler_reads_the_records_topic_offset_key_and_headers() {
    // Given a handler that keeps each record's Kafka position
    let letters = dead_letters().await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = seen.clone();
    let p = dynamodb_exactly_once_lambda::processor::Processor::builder(
        "orders",
        move |r: dynamodb_exactly_once_lambda::processor::Record<Value>| {
            let keep = keep.clone();
            async move {
                let k = r.kafka().expect("a Kafka record");
                let header = k
                    .header("source")
                    .map(|h| String::from_utf8_lossy(h).into_owned());
                let key = k
                    .key
                    .clone()
                    .map(|b| String::from_utf8_lossy(&b).into_owned());
                if let Ok(mut seen) = keep.lock() {
                    seen.push((k.record_id(), key, header));
                }
                Ok::<(), dynamodb_exactly_once_lambda::processor::RecordError>(())
            }
        },
    )
    .dead_letters(letters)
    .build()
    .expect("processor");

    // When it runs a batch
    let failed = run_value(&p, kafka_event(&[("orders", 2, &[(30, order("a", 1))])])).await;

    // Then it saw them
    assert!(failed.is_empty());
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(
        seen,
        [(
            "orders-2:30".to_string(),
            Some("k30".to_string()),
            Some("test".to_string())
        )]
    );
}

async fn run_value(
    p: &dynamodb_exactly_once_lambda::processor::Processor<Value>,
    event: Value,
) -> Vec<String> {
    p.handle(invocation(event, 60_000))
        .await
        .expect("handled")
        .failed_ids()
}

pub(crate) mod values;
pub(crate) mod writers;
