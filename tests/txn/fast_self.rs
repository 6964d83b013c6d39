//! The fast path meeting its own transaction: a duplicate delivery took the lock path, and its
//! lock write was checking the header at the moment of the fast call, so the call is cancelled
//! with `TransactionConflict` on the header (for as long as the lock patience, here) and `ConditionalCheckFailed` on an item carrying
//! `txId#1`. The fast path sends again (then finds the record and resumes it), never waits on
//! and rolls back its own transaction's attempt.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::txn::env::*;
use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextMut,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use dev_testing::client;
use dynamodb_exactly_once::txn::TxOutcome;
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Value};

use crate::common::scan;

/// Answers the first `remaining` fast-path calls (a `TransactWriteItems` carrying
/// `DecidedBy`) with `answer`, unapplied (its body is emptied, which DynamoDB refuses), and counts the calls.
#[derive(Debug, Clone)]
struct AnswerFastCall {
    answer: Arc<String>,
    remaining: Arc<AtomicUsize>,
    fast_calls: Arc<AtomicUsize>,
}

#[derive(Debug, Clone)]
struct Answered;
impl Storable for Answered {
    type Storer = StoreReplace<Self>;
}

impl Intercept for AnswerFastCall {
    fn name(&self) -> &'static str {
        "AnswerFastCall"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let fast = request
            .headers()
            .get("x-amz-target")
            .is_some_and(|t| t.ends_with(".TransactWriteItems"))
            && request
                .body()
                .bytes()
                .is_some_and(|b| String::from_utf8_lossy(b).contains("DecidedBy"));
        if !fast {
            return Ok(());
        }
        self.fast_calls.fetch_add(1, Ordering::SeqCst);
        let take = self
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if take.is_ok() {
            *request.body_mut() = SdkBody::from("{}");
            request.headers_mut().insert("content-length", "2");
            cfg.interceptor_state().store_put(Answered);
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg.load::<Answered>().is_none() {
            return Ok(());
        }
        let response = context.response_mut();
        *response.status_mut() = StatusCode::try_from(400)?;
        response.headers_mut().remove("x-amz-crc32");
        response
            .headers_mut()
            .insert("content-length", self.answer.len().to_string());
        *response.body_mut() = SdkBody::from(self.answer.as_str());
        Ok(())
    }
}

/// Fast calls answered so: their waits add up to more than the lock patience (300 ms here),
/// after which a wait on a silent holder would roll it back.
const ANSWERED: usize = 10;

#[tokio::test]
async fn a_fast_call_meeting_its_own_lock_path_delivery_sends_again_without_a_rollback() {
    let base = client();
    let env = Env::new(&base).await;
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    let body = transfer(&table, "t-self", "a", "b", 30);
    // The other delivery: on the lock path, holding both items (attempt 1, pending).
    abandon(&env.clone_with_fast_path(false), &body).await;
    let answer = json!({
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "message": "injected: Transaction cancelled [ConditionalCheckFailed, None, TransactionConflict]",
        "CancellationReasons": [
            {"Code": "ConditionalCheckFailed", "Message": "The conditional request failed",
             "Item": {"PK": {"S": "a"}, "balance": {"N": "70"}, "_txLock": {"S": "t-self#1"},
                      "_txVer": {"S": "0123456789abcdef0123456789abcdef"}}},
            {"Code": "None"},
            {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
        ]
    });
    let interceptor = AnswerFastCall {
        answer: Arc::new(answer.to_string()),
        remaining: Arc::new(AtomicUsize::new(ANSWERED)),
        fast_calls: Arc::default(),
    };
    let config = client()
        .config()
        .to_builder()
        .interceptor(interceptor.clone())
        .build();
    let c = env
        .clone_with_fast_path(true)
        .coordinator(Client::from_conf(config));
    let started = std::time::Instant::now();
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert!(
        matches!(
            report.outcome,
            TxOutcome::Committed | TxOutcome::AlreadyCommitted
        ),
        "{report:?}"
    );
    // Sent again after each: the call after them finds the record, the run resumes attempt 1.
    assert_eq!(interceptor.fast_calls.load(Ordering::SeqCst), ANSWERED + 1);
    let header = scan(&base, env.tx())
        .await
        .into_values()
        .find(|i| i["TxId"] == json!("t-self") && i["Part"] == json!("#"))
        .expect("a header");
    assert_eq!(
        header.get("Attempt"),
        Some(&Value::from(1)),
        "no attempt of its own rolled back and restarted: {header:?} after {:?}",
        started.elapsed()
    );
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a"), balance(&now, "b")),
        (Some(70), Some(30))
    );
    assert_clean(&base, &env).await;
}
