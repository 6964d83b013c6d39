//! The SQS dead-letter sink behind the batch processor: a rejected record is acknowledged only
//! once SQS accepted its letter; a refused, failed or unanswered send reports it in
//! `batchItemFailures`; a FIFO queue's letters carry the record's group and a de-duplication
//! id that is the same on every redelivery.
//!
//! Against [`FakeSqs`] (our request and our handling of SQS's answers, not SQS) and, when
//! `moto_server` is installed, against moto (the message size limit and FIFO de-duplication
//! enforced by an emulator); the moto test passes with a printed reason when it is not.

use crate::sqs_support::{sqs_client, Answer, FakeSqs, Moto, Request};

use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once_lambda::dead_letter::{letter_id, SqsDeadLetters, SqsLetter};
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError};
use lambda_runtime::{Context, LambdaEvent};
use serde::Deserialize;
use serde_json::{json, Value};

const FUNCTION: &str = "orders";

#[derive(Debug, Deserialize)]
struct Order {
    amount: i64,
}

/// A negative amount is rejected; anything else succeeds.
async fn handle(record: Record<Order>) -> Result<(), RecordError> {
    if record.body.amount < 0 {
        return Err(RecordError::reject("amount must not be negative"));
    }
    Ok(())
}

fn processor(letters: SqsDeadLetters) -> Processor<Order> {
    Processor::builder(FUNCTION, handle)
        .dead_letters(letters)
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid processor")
}

/// An SQS event of `bodies` (message ids `m0`, `m1`, …); `fifo`: of a FIFO queue, the
/// messages in groups `customer-0` and `customer-1` alternately.
fn sqs_event(bodies: &[Value], fifo: bool) -> Value {
    let arn = if fifo {
        "arn:aws:sqs:us-east-1:1:orders.fifo"
    } else {
        "arn:aws:sqs:us-east-1:1:orders"
    };
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            let mut attributes = json!({"SentTimestamp": epoch_millis().to_string()});
            if fifo {
                attributes["MessageGroupId"] = json!(format!("customer-{}", i % 2));
                attributes["SequenceNumber"] = json!(format!("{i:020}"));
            }
            json!({"eventSource": "aws:sqs", "messageId": format!("m{i}"), "body": body.to_string(),
                "eventSourceARN": arn, "attributes": attributes})
        })
        .collect();
    json!({ "Records": records })
}

/// A Kinesis event of one record with raw `data`.
fn kinesis_event(data: &[u8]) -> Value {
    json!({"Records": [{"eventSource": "aws:kinesis",
        "eventID": format!("shardId-000000000000:{:020}", 7),
        "eventSourceARN": "arn:aws:kinesis:us-east-1:1:stream/orders",
        "kinesis": {"data": BASE64.encode(data), "partitionKey": "device-9",
            "sequenceNumber": format!("{:020}", 7), "kinesisSchemaVersion": "1.0",
            "approximateArrivalTimestamp": 1_764_000_000.0}}]})
}

/// The partial batch response of one invocation with `budget_ms` to run, as Lambda reads it.
async fn invoke(p: &Processor<Order>, event: Value, budget_ms: u64) -> Value {
    let mut context = Context::default();
    context.deadline = epoch_millis() + budget_ms;
    let response = p
        .handle(LambdaEvent::new(event, context))
        .await
        .expect("handled");
    serde_json::to_value(response).expect("serializes")
}

fn failures(response: &Value) -> Vec<String> {
    response["batchItemFailures"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn letter_of(request: &Request) -> SqsLetter {
    let body = request.body["MessageBody"]
        .as_str()
        .expect("a message body");
    serde_json::from_str(body).expect("an SqsLetter")
}

#[tokio::test]
async fn a_rejected_record_is_acknowledged_only_after_sqs_accepted_its_letter() {
    // Given a standard queue whose answers wait for the test
    let sqs = FakeSqs::start(Answer::Accept, true).await;
    let url = sqs.queue_url("dead-letters");
    let p = processor(SqsDeadLetters::new(
        sqs_client(&sqs.endpoint(), false),
        &url,
        FUNCTION,
    ));
    let bad = json!({"amount": -5});

    // When a batch with a rejected order runs
    let event = sqs_event(&[json!({"amount": 3}), bad.clone()], false);
    let run = tokio::spawn(async move { invoke(&p, event, 60_000).await });
    sqs.wait_for(1).await;

    // Then the invocation does not answer while SQS has not
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !run.is_finished(),
        "answered before SQS accepted the letter"
    );
    sqs.release(1);
    let response = run.await.expect("the invocation");
    assert_eq!(failures(&response), Vec::<String>::new(), "{response}");

    // And the one request is a SendMessage of the letter, without FIFO ids
    let requests = sqs.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.target, "AmazonSQS.SendMessage");
    assert_eq!(request.content_type, "application/x-amz-json-1.0");
    assert_eq!(request.body["QueueUrl"], url.as_str());
    assert!(request.body.get("MessageGroupId").is_none());
    assert!(request.body.get("MessageDeduplicationId").is_none());
    let letter = letter_of(request);
    assert_eq!(letter.position.id, "m1");
    assert_eq!(letter.id, letter_id(FUNCTION, None, &letter.position));
    assert_eq!(
        letter.position.source_arn.as_deref(),
        Some("arn:aws:sqs:us-east-1:1:orders")
    );
    assert!(letter.position.arrived_at_ms.is_some());
    assert_eq!(letter.reason.code.as_str(), "rejected_by_handler");
    assert!(letter.reason.message.contains("must not be negative"));
    assert_eq!(letter.body.as_deref(), Some(bad.to_string().as_str()));
    assert!(!letter.body_truncated);
}

#[tokio::test]
async fn a_refused_send_reports_the_record_in_batch_item_failures() {
    // Given a queue SQS says does not exist
    let sqs = FakeSqs::start(Answer::Refuse, false).await;
    let p = processor(SqsDeadLetters::new(
        sqs_client(&sqs.endpoint(), false),
        sqs.queue_url("deleted"),
        FUNCTION,
    ));

    // When a batch with a rejected order runs
    let event = sqs_event(&[json!({"amount": 3}), json!({"amount": -5})], false);
    let response = invoke(&p, event, 60_000).await;

    // Then the rejected order is reported for redelivery, the good one is not
    assert_eq!(failures(&response), ["m1"], "{response}");
    assert_eq!(sqs.requests().len(), 1);
}

#[tokio::test]
async fn a_send_that_never_answers_is_cut_off_at_the_deadline_and_reported() {
    // Given a queue that never answers
    let sqs = FakeSqs::start(Answer::Accept, true).await;
    let p = processor(SqsDeadLetters::new(
        sqs_client(&sqs.endpoint(), false),
        sqs.queue_url("stalled"),
        FUNCTION,
    ));

    // When a rejected order runs with 2.5 s left
    let start = Instant::now();
    let response = invoke(&p, sqs_event(&[json!({"amount": -5})], false), 2500).await;

    // Then the invocation answers before its deadline, the record reported
    assert!(start.elapsed() < Duration::from_millis(2500));
    assert_eq!(failures(&response), ["m0"], "{response}");
}

#[tokio::test]
async fn a_fifo_letter_keeps_its_group_and_the_same_deduplication_id_on_a_redelivery() {
    // Given a FIFO queue
    let sqs = FakeSqs::start(Answer::Accept, false).await;
    let p = processor(SqsDeadLetters::new(
        sqs_client(&sqs.endpoint(), false),
        sqs.queue_url("dead-letters.fifo"),
        FUNCTION,
    ));
    let bodies = [json!({"amount": -1}), json!({"amount": -2})];

    // When the same FIFO batch of two rejected orders is delivered twice
    for _ in 0..2 {
        let response = invoke(&p, sqs_event(&bodies, true), 60_000).await;
        assert_eq!(failures(&response), Vec::<String>::new(), "{response}");
    }

    // Then each letter carries its record's group, and a redelivered record's letter the
    // same de-duplication id (SQS drops the copy within 5 minutes)
    let mut sent: Vec<(String, String, String)> = sqs
        .requests()
        .iter()
        .map(|r| {
            let field = |name: &str| r.body[name].as_str().unwrap_or_default().to_string();
            (
                letter_of(r).position.id,
                field("MessageGroupId"),
                field("MessageDeduplicationId"),
            )
        })
        .collect();
    sent.sort();
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[0], sent[1], "m0 twice, the same ids");
    assert_eq!(sent[2], sent[3], "m1 twice, the same ids");
    assert_eq!(
        (sent[0].1.as_str(), sent[2].1.as_str()),
        ("customer-0", "customer-1")
    );
    assert_ne!(sent[0].2, sent[2].2, "one de-duplication id per record");
    assert_eq!(sent[0].2.len(), 64);
}

#[tokio::test]
async fn moto_keeps_every_letter_cuts_a_large_body_and_drops_a_fifo_copy() {
    let moto = match Moto::start() {
        Ok(moto) => moto,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    // Given a standard and a FIFO queue of at most 256 KiB per message
    let client = sqs_client(&moto.endpoint, true);
    let standard = create_queue(&client, "dead-letters", false).await;
    let fifo = create_queue(&client, "dead-letters.fifo", true).await;
    let to = |url: &str| processor(SqsDeadLetters::new(client.clone(), url, FUNCTION));

    // When a rejected record is delivered twice to each, and a 1 MiB binary record once
    for url in [&standard, &fifo] {
        for _ in 0..2 {
            let event = sqs_event(&[json!({"amount": -5})], true);
            let response = invoke(&to(url), event, 60_000).await;
            assert_eq!(failures(&response), Vec::<String>::new(), "{response}");
        }
    }
    let large = vec![0xffu8; 1024 * 1024];
    let response = invoke(&to(&standard), kinesis_event(&large), 60_000).await;
    assert_eq!(failures(&response), Vec::<String>::new(), "{response}");

    // Then the standard queue holds both copies (one id) and the cut letter; the FIFO one copy
    let letters = receive_all(&client, &standard).await;
    assert_eq!(letters.len(), 3, "{letters:?}");
    let copies: Vec<&SqsLetter> = letters.iter().filter(|l| l.position.id == "m0").collect();
    assert_eq!(copies.len(), 2);
    assert_eq!(copies[0].id, copies[1].id, "de-duplicate by the letter id");
    let cut = letters
        .iter()
        .find(|l| l.body_truncated)
        .expect("the large letter");
    assert_eq!(cut.body_bytes, large.len());
    assert!(large.starts_with(&cut.payload().expect("base64")));
    assert_eq!(cut.position.partition_key.as_deref(), Some("device-9"));
    assert_eq!(receive_all(&client, &fifo).await.len(), 1);
}

async fn create_queue(client: &aws_sdk_sqs::Client, name: &str, fifo: bool) -> String {
    // 256 KiB: the sink's default limit, and what moto then enforces.
    let mut request = client.create_queue().queue_name(name).attributes(
        aws_sdk_sqs::types::QueueAttributeName::MaximumMessageSize,
        "262144",
    );
    if fifo {
        request = request.attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true");
    }
    let created = request.send().await.expect("CreateQueue");
    created.queue_url().expect("a queue URL").to_string()
}

/// Every letter on the queue (received until it answers none).
async fn receive_all(client: &aws_sdk_sqs::Client, url: &str) -> Vec<SqsLetter> {
    let mut letters = Vec::new();
    loop {
        let received = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(60)
            .send()
            .await
            .expect("ReceiveMessage");
        let messages = received.messages();
        if messages.is_empty() {
            return letters;
        }
        for message in messages {
            let body = message.body().expect("a body");
            letters.push(serde_json::from_str(body).expect("an SqsLetter"));
        }
    }
}
