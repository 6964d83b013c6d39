//! The `issuedAt` horizon has an upper bound (a future
//! `issuedAt` — a clock ahead, microseconds — would switch `too_old` off), and a record written
//! before `issuedAt` existed (its hash is the requests' alone) is recognised when the message
//! comes again carrying `issuedAt`, during an upgrade.

use crate::txn::env::*;
use dev_testing::{client, client_with, FaultInjector};
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once::txn::{TxError, TxOutcome, TxState};
use dynamodb_exactly_once::{Deadline, RejectionCode};
use serde_json::json;

#[tokio::test]
async fn an_issue_time_ahead_of_the_clock_beyond_the_skew_is_an_invalid_timestamp() {
    let base = client();
    let env = Env::new(&base).await.fast();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    let c = env.coordinator(client());
    let now = epoch_millis();
    let day = 86_400_000;
    for (n, issued) in [now * 1000, now + 30 * day].into_iter().enumerate() {
        let mut body = transfer(&table, &format!("t-future-{n}"), "alice", "bob", 10);
        body["issuedAt"] = json!(issued);
        let result = c.run(&message(&c, &body), Deadline::none()).await;
        assert!(
            matches!(&result, Err(TxError::Rejected(r)) if r.code == RejectionCode::InvalidTimestamp),
            "issuedAt {issued}: {result:?}"
        );
    }
    // A clock a minute ahead is within the skew allowed.
    let mut body = transfer(&table, "t-skewed", "alice", "bob", 10);
    body["issuedAt"] = json!(now + 60_000);
    let report = c.run(&message(&c, &body), Deadline::none()).await;
    assert_eq!(report.expect("run").outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(90), Some(10))
    );
}

#[tokio::test]
async fn a_record_written_before_issued_at_existed_is_resumed_by_a_message_carrying_it() {
    let base = client();
    for fast in [true, false] {
        let env = Env::new(&base).await.clone_with_fast_path(fast);
        let table = env.accounts().to_string();
        seed(&base, &table, "alice", 100).await;
        seed(&base, &table, "bob", 0).await;
        let c = env.coordinator(client());
        // Given T's record as a version before `issuedAt` wrote it (hash of the requests
        // alone), left pending: T without the field, run on the lock path by a coordinator
        // that stops after creating the record (its calls from the third on fail)
        let mut body = transfer(&table, "t-upgrade", "alice", "bob", 30);
        let stops = client_with(Some(FaultInjector::fail_from(2)), 1);
        let old = lock_path_coordinator(&env, stops, 1, false);
        let stopped = old.run(&message(&old, &body), Deadline::none()).await;
        assert!(stopped.is_err(), "fast path {fast}: {stopped:?}");
        let left = env.sweeper(client(), 0, 3600).status("t-upgrade").await;
        let left = left.expect("status").map(|s| s.state);
        assert_eq!(left, Some(TxState::Pending), "fast path {fast}");
        body["issuedAt"] = json!(epoch_millis() - 1000);
        // When the redelivery, carrying `issuedAt`, reaches this version
        let report = c.run(&message(&c, &body), Deadline::none()).await;
        // Then it is the same transaction, resumed and committed once
        let report = report.unwrap_or_else(|e| panic!("fast path {fast}: {e:?}"));
        assert_eq!(report.outcome, TxOutcome::Committed, "fast path {fast}");
        let now = items(&base, &table).await;
        assert_eq!(
            (balance(&now, "alice"), balance(&now, "bob")),
            (Some(70), Some(30))
        );
        let again = c.run(&message(&c, &body), Deadline::none()).await;
        assert_eq!(again.expect("again").outcome, TxOutcome::AlreadyCommitted);
        assert_clean(&base, &env).await;
    }
}
