//! Operation tokens kept by time: a write whose response was lost is recognised by its SDK
//! retry however many other writes of the item landed in between (within a token epoch), and
//! the item keeps the tokens of its last two token epochs only.

use super::stored_document as stored;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::{client, At, Fault, FaultInjector, Interleaving};
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once::document::{Document, DocumentConfig, DocumentOutcome, TOKEN_EPOCH};
use dynamodb_exactly_once::Clock;
use serde_json::{json, Value};

async fn document_table(client: &Client) -> String {
    dev_testing::template_tables(client, &["DocumentTable"]).await["DocumentTable"].clone()
}

fn docs(client: Client, table: &str) -> Document {
    Document::new(
        client,
        DocumentConfig::builder(table)
            .build()
            .expect("valid configuration"),
    )
}

fn rec(op: &str, pk: &str, fields: Value) -> Value {
    let mut body = json!({"op": op, "key": {"PK": pk, "SK": "d"}});
    if let (Some(b), Value::Object(f)) = (body.as_object_mut(), fields) {
        b.extend(f);
    }
    body
}

fn append(v: &str) -> Value {
    rec("list_append", "u", json!({"path": "l", "values": [v]}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_append_retried_after_many_other_writes_landed_is_applied_once() {
    // Given writer A's append, applied with its response lost, and the SDK's retry held until
    // twelve other writes of the item have landed (more than any fixed handful of slots)
    lost_append_retried_after_twelve_writes(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_append_retried_after_other_writers_moved_to_the_next_token_epoch_is_applied_once() {
    // The same, the twelve other writes made by writers whose clock is one token epoch on
    // (they roll the item's token sets: A's token is in the previous set)
    lost_append_retried_after_twelve_writes(TOKEN_EPOCH.as_millis() as u64).await;
}

async fn lost_append_retried_after_twelve_writes(others_ahead_ms: u64) {
    let setup = client();
    let table = document_table(&setup).await;
    let other = docs(setup.clone(), &table)
        .with_clock(Clock::from_fn(move || epoch_millis() + others_ahead_ms));
    let il = Interleaving::new();
    il.lose_response("A", At::op("UpdateItem").attempt(1));
    il.pause_before("A", At::op("UpdateItem").attempt(2));
    let a = docs(il.client("A", 3), &table);
    let record = a
        .parse_record(append("a").to_string().as_bytes())
        .expect("valid");
    let task = tokio::spawn(async move { a.write(&record).await });
    il.wait_paused("A").await.expect("A's retry is held");
    let others: Vec<String> = (0..12).map(|i| format!("o{i}")).collect();
    for v in &others {
        let body = match v.as_str() {
            "o5" => rec("set_add", "u", json!({"path": "s", "values": ["x"]})),
            _ => append(v),
        };
        let r = other
            .parse_record(body.to_string().as_bytes())
            .expect("valid");
        assert_eq!(
            other.write(&r).await.expect("write"),
            DocumentOutcome::Applied
        );
    }

    // When the retry goes out
    il.release("A");
    let outcome = task.await.expect("task").expect("write");

    // Then A's append was applied once, and A knows it
    assert_eq!(outcome, DocumentOutcome::Applied);
    let mut expected = vec![json!("a")];
    expected.extend(others.iter().filter(|v| *v != "o5").map(|v| json!(v)));
    assert_eq!(stored(&other, "u").await["l"], Value::Array(expected));
}

#[tokio::test]
async fn the_token_sets_keep_the_tokens_of_the_last_two_token_epochs_only() {
    // Given an item written three times in one token epoch, then once in each of the next two
    let setup = client();
    let table = document_table(&setup).await;
    let epoch_ms = TOKEN_EPOCH.as_millis() as u64;
    let start = epoch_millis() / epoch_ms * epoch_ms;
    let at = |epochs: u64| {
        docs(setup.clone(), &table).with_clock(Clock::from_fn(move || start + epochs * epoch_ms))
    };
    for (epochs, v) in [(0, "a"), (0, "b"), (0, "c"), (1, "d"), (2, "e")] {
        let w = at(epochs);
        let r = w
            .parse_record(append(v).to_string().as_bytes())
            .expect("valid");
        assert_eq!(w.write(&r).await.expect("write"), DocumentOutcome::Applied);
    }

    // Then the item holds one token in each set: the first epoch's three are gone
    let item = setup
        .get_item()
        .table_name(&table)
        .key("PK", AttributeValue::S("u".into()))
        .key("SK", AttributeValue::S("d".into()))
        .send()
        .await
        .expect("get")
        .item
        .expect("item");
    let tokens = |name: &str| item.get(name).and_then(|v| v.as_bs().ok()).map(Vec::len);
    assert_eq!(tokens("doc_tok"), Some(1));
    assert_eq!(tokens("doc_tokp"), Some(1));
    assert_eq!(
        item["doc_toke"],
        AttributeValue::N(((start / epoch_ms) + 2).to_string())
    );
    assert_eq!(
        stored(&at(2), "u").await["l"],
        json!(["a", "b", "c", "d", "e"])
    );
}

// ------------------------------------------------------- measured: a throttled hot item

/// The writers' real client: the SDK's standard retry mode as `aws_config` loads it (3
/// attempts, 1 s initial backoff, jittered) and the Lambda client's timeouts.
fn writers_client(injector: FaultInjector) -> Client {
    let timeouts = dynamodb_exactly_once_lambda::__private::timeouts_from_env().expect("timeouts");
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "local", "local", None, None, "tests",
        ))
        .endpoint_url(dev_testing::endpoint())
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::standard())
        .timeout_config(timeouts)
        .interceptor(injector)
        .build();
    Client::from_conf(config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_throttled_hot_item_a_lost_append_is_applied_once_under_the_writers_retry_policy() {
    // Given a hot item that four writers append to without pause, and writer A (the writers'
    // real retry policy) whose append lands with its response lost, whose first retry is
    // throttled, and whose last retry goes through
    let setup = client();
    let table = document_table(&setup).await;
    let landed = Arc::new(AtomicUsize::new(0));
    let marks = Arc::new(Mutex::new(Vec::<(usize, Instant)>::new()));
    let injector = {
        let (landed, marks) = (Arc::clone(&landed), Arc::clone(&marks));
        FaultInjector::new(move |_, operation| {
            if operation != "UpdateItem" {
                return Fault::None;
            }
            let Ok(mut m) = marks.lock() else {
                return Fault::None;
            };
            m.push((landed.load(Ordering::SeqCst), Instant::now()));
            // Update 0 warms A up; update 1 is the append's first attempt.
            match m.len() - 1 {
                1 => Fault::LoseResponse,
                2 => Fault::Throttle,
                _ => Fault::None,
            }
        })
    };
    let a = docs(writers_client(injector), &table);
    let warm = a
        .parse_record(append("warm").to_string().as_bytes())
        .expect("valid");
    assert_eq!(
        a.write(&warm).await.expect("write"),
        DocumentOutcome::Applied
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (other, stop, landed) = (docs(setup.clone(), &table), stop.clone(), landed.clone());
            tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let r = other.parse_record(append(&format!("o{w}-{n}")).to_string().as_bytes());
                    let _ = other.write(&r.expect("valid")).await.expect("other write");
                    landed.fetch_add(1, Ordering::SeqCst);
                    n += 1;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;

    // When A appends
    let record = a
        .parse_record(append("A").to_string().as_bytes())
        .expect("valid");
    let outcome = a.write(&record).await.expect("write");
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.await.expect("writer");
    }

    // Then it was applied once, and A knows it
    assert_eq!(outcome, DocumentOutcome::Applied);
    let list = stored(&a, "u").await["l"].clone();
    let count = list
        .as_array()
        .map_or(0, |l| l.iter().filter(|v| *v == "A").count());
    assert_eq!(count, 1, "A appended once");
    let marks = marks.lock().expect("marks").clone();
    let (lost, retried) = (marks[1], marks[marks.len() - 1]);
    println!(
        "between the lost response and the retry that decided it: {} other writes landed in {} ms \
         ({} attempts of A's append)",
        retried.0 - lost.0,
        retried.1.duration_since(lost.1).as_millis(),
        marks.len() - 1,
    );
    let item = raw_item(&setup, &table).await;
    let tokens: usize = ["doc_tok", "doc_tokp"]
        .iter()
        .filter_map(|n| item.get(*n).and_then(|v| v.as_bs().ok()))
        .map(Vec::len)
        .sum();
    println!(
        "the hot item holds {tokens} tokens ({} bytes) after {} writes; the item is {} bytes",
        tokens * 16,
        landed.load(Ordering::SeqCst) + 2,
        dynamodb_exactly_once::__private::item_size(&item),
    );
}

async fn raw_item(
    client: &Client,
    table: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    client
        .get_item()
        .table_name(table)
        .key("PK", AttributeValue::S("u".into()))
        .key("SK", AttributeValue::S("d".into()))
        .send()
        .await
        .expect("get")
        .item
        .expect("item")
}
