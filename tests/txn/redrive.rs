//! Review finding 3: a dead-letter redrive gives an SQS message a new `SentTimestamp`, so a
//! transaction's age measured from the envelope restarts. A message's `issuedAt` (the
//! producer's time, part of the recorded transaction) is measured by the coordinator itself:
//! a copy issued longer ago than the record's retention is refused `too_old` (a dead letter
//! at the Lambda edge), never a second application after its record expired.

use crate::common;

use std::time::Duration;

use crate::txn::env::*;
use common::*;
use dev_testing::client;
use dynamodb_exactly_once::rejection::RejectionCode;
use dynamodb_exactly_once::txn::{Coordinator, TxError, TxOutcome};
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::event_time::EventTime;
use dynamodb_exactly_once_lambda::Writer;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};

/// The transfer fixture as a redrive delivers it: sent now, its body stamped by the producer
/// `age` ago under `issuedAt`.
fn redriven_transfer(env: &Env, age: Duration) -> Value {
    let text = fixture("tx-transfer.json")
        .to_string()
        .replace("AccountsTable", env.accounts());
    let mut event: Value = serde_json::from_str(&text).expect("json");
    let now_ms = dynamodb_exactly_once::__private::epoch_millis();
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
    let builder = Writer::builder("tx-coordinator", env.coordinator(client()))
        .dead_letters(DeadLetters::new(
            client(),
            &env.tables["DeadLetterTable"],
            "tx-coordinator",
        ))
        .deadline_margin(Duration::from_secs(1));
    match event_time {
        Some(event_time) => builder.event_time(event_time),
        None => builder,
    }
    .build()
    .expect("valid writer")
}

#[tokio::test]
async fn a_redriven_transaction_older_than_its_record_is_too_old_by_its_event_time() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 20).await;
    let retain = env.config().retain();
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
    let letters = guarded
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason.code, "too_old");
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(100), Some(20))
    );
    // Without the pointer too: `issuedAt` is the transaction's own time, which the
    // coordinator measures whatever the envelope says.
    let envelope = writer(&env, None);
    let answer = envelope
        .handle(LambdaEvent::new(old, Context::default()))
        .await
        .expect("handler");
    assert_eq!(
        serde_json::to_value(answer).expect("json"),
        json!({"batchItemFailures":[]})
    );
    // The same message, kept once (its dead letter is keyed by the message).
    let letters = envelope
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason.code, "too_old");
    let after = items(&base, &table).await;
    assert_eq!(
        (balance(&after, "alice"), balance(&after, "bob")),
        (Some(100), Some(20))
    );
}

/// A transfer of 10 from alice to bob issued `age` ago (`issuedAt`, epoch ms), or without an
/// issue time.
fn transfer_issued(env: &Env, tx_id: &str, issued_at: Option<u64>) -> Value {
    let mut body = json!({"txId": tx_id, "requests": [
        debit(env.accounts(), "alice", 10),
        update(env.accounts(), "bob", 10),
    ]});
    if let Some(at) = issued_at {
        body["issuedAt"] = json!(at);
    }
    body
}

fn now_ms() -> u64 {
    dynamodb_exactly_once::__private::epoch_millis()
}

/// Alice with 100 and Bob with 20, and a coordinator on the fast path or the lock path.
async fn alice_and_bob(base: &aws_sdk_dynamodb::Client, fast: bool) -> (Env, Coordinator) {
    let env = Env::new(base)
        .await
        .without_heartbeats()
        .clone_with_fast_path(fast);
    seed(base, env.accounts(), "alice", 100).await;
    seed(base, env.accounts(), "bob", 20).await;
    let c = env.coordinator(client());
    (env, c)
}

#[tokio::test]
async fn a_transaction_issued_longer_ago_than_the_retention_is_too_old_on_any_path() {
    let base = client();
    for fast in [true, false] {
        let (env, c) = alice_and_bob(&base, fast).await;
        let table = env.accounts().to_string();
        let retain = u64::try_from(env.config().retain().as_millis()).unwrap_or(u64::MAX);
        // The library, no Lambda edge: a copy whose record may have expired is refused.
        let old = transfer_issued(&env, "t-old", Some(now_ms() - retain - 3_600_000));
        match c.run(&message(&c, &old), Deadline::none()).await {
            Err(TxError::Rejected(r)) => assert_eq!(r.code, RejectionCode::TooOld, "{r}"),
            other => panic!("fast path {fast}: expected too_old, got {other:?}"),
        }
        // Within the retention it applies once.
        let fresh = transfer_issued(&env, "t-fresh", Some(now_ms() - 3_600_000));
        let report = c
            .run(&message(&c, &fresh), Deadline::none())
            .await
            .expect("run");
        assert_eq!(report.outcome, TxOutcome::Committed);
        let now = items(&base, &table).await;
        assert_eq!(
            (balance(&now, "alice"), balance(&now, "bob")),
            (Some(90), Some(30)),
            "fast path {fast}"
        );
    }
}

#[tokio::test]
async fn the_issue_time_is_part_of_the_transaction() {
    let base = client();
    for fast in [true, false] {
        let (env, c) = alice_and_bob(&base, fast).await;
        let table = env.accounts().to_string();
        let issued = now_ms() - 60_000;
        let body = transfer_issued(&env, "t-1", Some(issued));
        let first = c
            .run(&message(&c, &body), Deadline::none())
            .await
            .expect("run");
        assert_eq!(first.outcome, TxOutcome::Committed);
        // The same copy again: a duplicate.
        let again = c
            .run(&message(&c, &body), Deadline::none())
            .await
            .expect("again");
        assert_eq!(again.outcome, TxOutcome::AlreadyCommitted);
        // The same id and requests with another issue time (a producer that re-stamps a
        // retry would make its age anything): another transaction under a used id.
        let restamped = transfer_issued(&env, "t-1", Some(now_ms()));
        match c.run(&message(&c, &restamped), Deadline::none()).await {
            Err(TxError::Rejected(r)) => assert_eq!(r.code, RejectionCode::TxIdReused, "{r}"),
            other => panic!("fast path {fast}: expected tx_id_reused, got {other:?}"),
        }
        // And without one: also another transaction (the time is part of what was recorded).
        let unstamped = transfer_issued(&env, "t-1", None);
        assert!(
            matches!(
                c.run(&message(&c, &unstamped), Deadline::none()).await,
                Err(TxError::Rejected(_))
            ),
            "fast path {fast}"
        );
        let now = items(&base, &table).await;
        assert_eq!(
            (balance(&now, "alice"), balance(&now, "bob")),
            (Some(90), Some(30))
        );
    }
}

#[tokio::test]
async fn an_issue_time_that_is_not_epoch_milliseconds_is_refused() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let c = env.coordinator(client());
    for bad in [json!("yesterday"), json!(-5), json!(1.5), json!(null)] {
        let mut body = transfer_issued(&env, "t-bad", None);
        body["issuedAt"] = bad.clone();
        let refused = c
            .parse_message(body.to_string().as_bytes())
            .expect_err("refused");
        assert_eq!(refused.code, RejectionCode::InvalidTimestamp, "{bad}");
    }
}
