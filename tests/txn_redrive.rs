//! Review finding 3: a dead-letter redrive gives an SQS message a new `SentTimestamp`, so a
//! transaction's age measured from the envelope restarts. With the producer's event time in
//! the body (`TX_EVENT_TIME_POINTER`), the coordinator measures from the transaction itself:
//! a redriven copy older than the record's retention is a `too_old` dead letter, never a
//! second application after its record expired.

use crate::common;
use crate::txn_env;

use std::time::Duration;

use common::*;
use dynamo_testing::client;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::event_time::EventTime;
use dynamodb_exactly_once_lambda::Writer;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};
use txn_env::*;

/// The transfer fixture as a redrive delivers it: sent now, its body stamped by the producer
/// `age` ago under `issuedAt`.
fn redriven_transfer(env: &Env, age: Duration) -> Value {
    let text = fixture("tx-transfer.json")
        .to_string()
        .replace("AccountsTable", env.accounts());
    let mut event: Value = serde_json::from_str(&text).expect("json");
    let now_ms = dynamodb_exactly_once::ddb::clock::epoch_millis();
    let issued = now_ms - u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
    let record = &mut event["Records"][0];
    let mut body: Value =
        serde_json::from_str(record["body"].as_str().expect("body")).expect("json");
    body["issuedAt"] = json!(issued);
    record["body"] = Value::String(body.to_string());
    event
}

fn writer(
    env: &Env,
    event_time: Option<EventTime>,
) -> Writer<dynamodb_exactly_once::txn::Coordinator> {
    Writer {
        function: "tx-coordinator".into(),
        protocol: env.coordinator(client()),
        dead_letters: DeadLetters::new(client(), &env.tables["DeadLetterTable"], "tx-coordinator"),
        deadline_margin: Duration::from_secs(1),
        event_time,
        mapping: None,
    }
}

#[tokio::test]
async fn a_redriven_transaction_older_than_its_record_is_too_old_by_its_event_time() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 20).await;
    let retain = env.config().retain;
    let old = redriven_transfer(&env, retain + Duration::from_secs(86_400));
    // Measured from the event time in the body: refused, kept as a dead letter.
    let guarded = writer(
        &env,
        Some(EventTime::new("TX_EVENT_TIME_POINTER", "/issuedAt").expect("pointer")),
    );
    let answer = guarded
        .handle(LambdaEvent::new(old.clone(), Context::default()))
        .await
        .expect("handler");
    assert_eq!(
        serde_json::to_value(answer).expect("json"),
        json!({"batchItemFailures":[]})
    );
    let letters = guarded.dead_letters.list().await.expect("dead letters");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason.code, "too_old");
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(100), Some(20))
    );
    // Measured from the envelope alone (no pointer), the same copy would apply: the redrive
    // restarted its age. (Here its record never existed; after its record's expiry it would
    // be a second application.)
    let envelope = writer(&env, None);
    envelope
        .handle(LambdaEvent::new(old, Context::default()))
        .await
        .expect("handler");
    let after = items(&base, &table).await;
    assert_eq!(
        (balance(&after, "alice"), balance(&after, "bob")),
        (Some(70), Some(50))
    );
}
