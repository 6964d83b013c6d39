//! What DynamoDB does beside a transaction that DynamoDB Local never does: a plain write on an
//! item that an in-flight `TransactWriteItems` holds is refused with
//! `TransactionConflictException` (injected by the SDK interceptor). The coordinator's plain
//! writes (locks' finalize and undo, header transitions, heartbeats, completion) send it again
//! themselves (within the run's deadline: `tests/txn/deadline.rs`); other protocols' handles
//! have the SDK retry it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use crate::txn::env::*;
use aws_sdk_dynamodb::config::retry::{RetryPartition, TokenBucket};
use aws_sdk_dynamodb::types::AttributeValue;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::txn::{Coordinator, TxOutcome};
use dynamodb_exactly_once::Deadline;

/// Every plain write (`PutItem`, `UpdateItem`, `DeleteItem`) is refused once with a
/// `TransactionConflictException` the first time it is sent; its retry goes through.
fn conflict_once_per_write() -> FaultInjector {
    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    FaultInjector::by_request(move |op, body| {
        let plain = matches!(op, "PutItem" | "UpdateItem" | "DeleteItem");
        let first = seen
            .lock()
            .map(|mut s| s.insert(body.to_string()))
            .unwrap_or(false);
        if plain && first {
            Fault::TransactionConflict
        } else {
            Fault::None
        }
    })
}

#[tokio::test]
async fn a_transfer_commits_although_each_plain_write_meets_a_transaction_conflict_once() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    let faults = conflict_once_per_write();
    let c = env.coordinator(client_with(Some(faults.clone()), 3));
    let body = transfer(&table, "t-conflict", "alice", "bob", 30);
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("the run ends without an error");
    assert_eq!(report.outcome, TxOutcome::Committed);
    assert!(
        faults.injected() >= 3,
        "{} conflicts injected",
        faults.injected()
    );
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(30))
    );
    assert_clean(&base, &env).await;
}

/// Conflicts retried by the SDK spend none of its retry quota (shared by every client of a
/// retry partition, process-wide by default): with a quota of 10 tokens (one transient retry,
/// or two throttling retries), every plain write of a protocol handle (the ratchet here; the
/// coordinator sends its own again outside the SDK) refused twice still goes through, and
/// another call of the same partition is still retried when throttled.
#[tokio::test]
async fn conflicts_retried_by_the_sdk_spend_none_of_its_retry_quota() {
    let base = client();
    let tables = dev_testing::template_tables(&base, &["RatchetTable"]).await;
    let table = tables["RatchetTable"].clone();
    let sent: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let faults = FaultInjector::by_request(move |op, body| {
        let before = sent
            .lock()
            .map(|mut m| {
                let n = m.entry(body.to_string()).or_default();
                *n += 1;
                *n - 1
            })
            .unwrap_or(0);
        match op {
            "PutItem" | "UpdateItem" | "DeleteItem" if before < 2 => Fault::TransactionConflict,
            "GetItem" if body.contains("probe") && before < 1 => Fault::Throttle,
            _ => Fault::None,
        }
    });
    let tiny = RetryPartition::custom("txn-conflicts-tiny-quota")
        .token_bucket(TokenBucket::new(10))
        .build();
    let config = client_with(Some(faults.clone()), 3)
        .config()
        .to_builder()
        .retry_partition(tiny)
        .build();
    let tiny_quota = aws_sdk_dynamodb::Client::from_conf(config);
    let ratchet = dynamodb_exactly_once::ratchet::Ratchet::new(
        tiny_quota.clone(),
        dynamodb_exactly_once::ratchet::RatchetConfig::builder(&table)
            .build()
            .expect("valid configuration"),
    );
    for k in 0..4 {
        let body =
            format!(r#"{{"op":"put","key":{{"PK":"q{k}","SK":"b"}},"ts":1,"item":{{"v":1}}}}"#);
        let record = ratchet.parse_record(body.as_bytes()).expect("valid record");
        let outcome = ratchet
            .write(&record)
            .await
            .expect("written after two conflicts");
        assert_eq!(
            outcome,
            dynamodb_exactly_once::ratchet::RatchetOutcome::Applied
        );
    }
    assert!(faults.injected() >= 8, "{} conflicts", faults.injected());
    let throttled = faults.injected();
    tiny_quota
        .get_item()
        .table_name(&table)
        .key("PK", AttributeValue::S("probe".into()))
        .key("SK", AttributeValue::S("b".into()))
        .send()
        .await
        .expect("a throttled read of the same partition is still retried");
    assert_eq!(
        faults.injected(),
        throttled + 1,
        "the read was throttled once"
    );
}

/// The coordinator's plain writes are sent again through conflicts by its own short,
/// jittered, bounded loop (not by the SDK): every plain write refused four times still goes
/// through.
#[tokio::test]
async fn plain_writes_refused_by_conflicts_beyond_the_sdk_attempts_are_sent_again() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    let sent: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let faults = FaultInjector::by_request(move |op, body| {
        let before = sent
            .lock()
            .map(|mut m| {
                let n = m.entry(body.to_string()).or_default();
                *n += 1;
                *n - 1
            })
            .unwrap_or(0);
        match op {
            "PutItem" | "UpdateItem" | "DeleteItem" if before < 4 => Fault::TransactionConflict,
            _ => Fault::None,
        }
    });
    let c = env.coordinator(client_with(Some(faults.clone()), 3));
    let body = transfer(&table, "t-beyond", "alice", "bob", 30);
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("every write goes through after four conflicts");
    assert_eq!(report.outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(30))
    );
    assert_clean(&base, &env).await;
}

/// Issue 18, finding 5: two TX tables over one items table (blue/green, staging beside prod,
/// a retained old table). A lock whose transaction record is not in this coordinator's TX
/// table is another deployment's: it is never undone (that would drop a committed change).
#[tokio::test]
async fn a_lock_of_another_tx_table_is_never_undone() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let other = Env::new(&base).await.without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 100).await;
    // Given deployment A commits T (+30 to alice) and dies before finalizing its items,
    let no_finalize = FaultInjector::by_request(|op, body| {
        if op == "UpdateItem" && body.contains("REMOVE") {
            Fault::Refuse
        } else {
            Fault::None
        }
    });
    let a = env.coordinator(client_with(Some(no_finalize), 1));
    let t = transfer(&table, "t-a", "bob", "alice", 30);
    assert!(a.run(&message(&a, &t), Deadline::none()).await.is_err());
    // when deployment B, with its own TX table, meets T's lock on alice,
    let config = other
        .builder()
        .allowed_tables([table.clone()])
        .build()
        .expect("valid configuration");
    let b = Coordinator::new(client(), config);
    let u = transfer(&table, "u-b", "alice", "bob", 10);
    let met = b.run(&message(&b, &u), Deadline::none()).await;
    // then it does not undo T's change: its run fails, to be retried,
    assert!(met.is_err(), "{met:?}");
    assert_eq!(balance(&items(&base, &table).await, "alice"), Some(130));
    // and once A's redelivery finished T, B's redelivery commits U on top of it.
    let a = env.coordinator(client());
    let _ = a
        .run(&message(&a, &t), Deadline::none())
        .await
        .expect("A again");
    let report = b
        .run(&message(&b, &u), Deadline::none())
        .await
        .expect("B again");
    assert_eq!(report.outcome, TxOutcome::Committed);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(120), Some(80))
    );
}

/// Every protocol's plain writes retry a `TransactionConflictException` (their items may take
/// part in the application's own transactions): the ratchet as the example.
#[tokio::test]
async fn a_ratchet_write_that_meets_a_transaction_conflict_is_sent_again() {
    let base = client();
    let tables = dev_testing::template_tables(&base, &["RatchetTable"]).await;
    let ratchet = dynamodb_exactly_once::ratchet::Ratchet::new(
        client_with(Some(conflict_once_per_write()), 3),
        dynamodb_exactly_once::ratchet::RatchetConfig::builder(&tables["RatchetTable"])
            .build()
            .expect("valid configuration"),
    );
    let record = ratchet
        .parse_record(br#"{"op":"put","key":{"PK":"a","SK":"b"},"ts":1,"item":{"v":1}}"#)
        .expect("valid record");
    let outcome = ratchet.write(&record).await.expect("written");
    assert_eq!(
        outcome,
        dynamodb_exactly_once::ratchet::RatchetOutcome::Applied
    );
}
