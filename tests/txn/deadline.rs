//! Every retry loop of the coordinator and the sweeper ends at the run's deadline (issue 42,
//! review X4): under a `TransactionConflictException` storm (injected by the SDK interceptor)
//! that would outlast the invocation, with the production client's retry settings (3
//! attempts, 1 s initial backoff), a run answers `Deferred` before its deadline, a batch keeps
//! the results of its finished members, the sweeper answers within its invocation, and a
//! holder whose commit is being sent again keeps its lock alive.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::txn::env::*;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::batch::{Protocol, RecordFailure, RecordResult};
use dynamodb_exactly_once::txn::{TxError, TxOutcome};
use dynamodb_exactly_once::Deadline;

/// A client with the production retry settings (the SDK's standard: 3 attempts, waits of up
/// to 1 s then 2 s) and `faults`.
fn production_client(faults: &FaultInjector) -> Client {
    let config = client_with(Some(faults.clone()), 3)
        .config()
        .to_builder()
        .retry_config(RetryConfig::standard())
        .build();
    Client::from_conf(config)
}

/// A storm: every plain write whose body contains `marker` meets a conflict, for as long as
/// the test runs.
fn storm_on(marker: &'static str) -> FaultInjector {
    FaultInjector::by_request(move |op, body| match op {
        "PutItem" | "UpdateItem" | "DeleteItem" if body.contains(marker) => {
            Fault::TransactionConflict
        }
        _ => Fault::None,
    })
}

/// A Lambda invocation's deadline `after` from now, stopping new work `margin` before it.
fn invocation_deadline(after: Duration, margin: Duration) -> Deadline {
    let at = SystemTime::now() + after;
    let ms = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Deadline::from_epoch_ms(ms, margin)
}

/// The commit of a lock-path transfer meets a storm; the run has 1 s: it ends `Deferred`
/// before 1.5 s (not after the client's 27 sends, 14–30 s), and the next delivery, the storm
/// over, commits it.
#[tokio::test]
async fn a_commit_in_a_conflict_storm_is_deferred_before_the_deadline() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 0).await;
    let faults = storm_on("committed");
    let c = env.coordinator(production_client(&faults));
    let body = transfer(&table, "t-storm", "alice", "bob", 30);
    let started = Instant::now();
    let m = message(&c, &body);
    // A deadline shorter than the conflict loop's least total wait (1.3 s): the loop always
    // meets the deadline first. (With 2 s, a loop that ran out of sends at 1.99 s answered the
    // conflict itself, retryable, instead of `Deferred`: seen once in a clean-clone run.)
    let run = c.run(&m, Deadline::after(Duration::from_secs(1)));
    let result = tokio::time::timeout(Duration::from_secs(5), run).await;
    let took = started.elapsed();
    assert!(
        matches!(result, Ok(Err(TxError::Deferred))),
        "expected Deferred within the deadline, got {result:?} after {took:?}"
    );
    assert!(
        took < Duration::from_millis(1500),
        "answered after {took:?}"
    );
    assert!(faults.injected() >= 1);
    let again = env.coordinator(base.clone());
    let report = again
        .run(&message(&again, &body), Deadline::none())
        .await
        .expect("the next delivery resumes");
    assert!(report.outcome.is_committed(), "{:?}", report.outcome);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(30))
    );
    assert_clean(&base, &env).await;
}

/// A batch of three where one member's finalize meets a storm past the invocation's end: the
/// batch answers before the cut-off (as the Lambda edge bounds it), the two finished members
/// keep `committed`, and the third is reported for redelivery.
#[tokio::test]
async fn a_batch_at_its_deadline_keeps_the_results_of_its_finished_members() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    for pk in ["a1", "b1", "a2", "b2", "zed1", "zed2"] {
        seed(&base, &table, pk, 100).await;
    }
    let faults = storm_on("zed");
    let c = env.coordinator(production_client(&faults));
    let records = [
        ("t-one", "a1", "b1"),
        ("t-two", "a2", "b2"),
        ("t-stuck", "zed1", "zed2"),
    ]
    .iter()
    .enumerate()
    .map(|(i, (tx, from, to))| (i, message(&c, &transfer(&table, tx, from, to, 10))))
    .collect();
    let deadline = invocation_deadline(Duration::from_millis(2500), Duration::from_secs(1));
    let started = Instant::now();
    let applied = tokio::time::timeout(
        Duration::from_secs(6),
        deadline.bound(c.apply(records, deadline)),
    )
    .await;
    let took = started.elapsed();
    let Ok(Some(applied)) = applied else {
        panic!("the batch lost every result at its cut-off ({took:?})");
    };
    assert!(
        took < Duration::from_millis(2500),
        "answered after {took:?}"
    );
    let mut results = applied.results;
    results.sort_by_key(|(i, _)| *i);
    let done: Vec<bool> = results
        .iter()
        .map(|(_, r)| matches!(r, RecordResult::Done(o) if o.is_committed()))
        .collect();
    assert_eq!(done, [true, true, false], "{results:?}");
    let again = env.coordinator(base.clone());
    let body = transfer(&table, "t-stuck", "zed1", "zed2", 10);
    let report = again
        .run(&message(&again, &body), Deadline::none())
        .await
        .expect("the redelivery finishes it");
    assert!(report.outcome.is_committed(), "{:?}", report.outcome);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "zed1"), balance(&now, "zed2")),
        (Some(90), Some(110))
    );
    assert_clean(&base, &env).await;
}

/// The sweeper's drive of an abandoned transaction meets a storm on every undo: the sweep
/// answers within its invocation (2 s here), leaving the transaction to the next sweep.
#[tokio::test]
async fn a_sweep_in_a_conflict_storm_answers_within_its_invocation() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "sa", 100).await;
    seed(&base, &table, "sb", 0).await;
    let body = transfer(&table, "t-swept", "sa", "sb", 30);
    abandon(&env, &body).await;
    let faults = FaultInjector::by_request(|op, body| match op {
        "PutItem" | "UpdateItem" | "DeleteItem" if body.contains("\"sa\"") => {
            Fault::TransactionConflict
        }
        _ => Fault::None,
    });
    let sweeper = env.sweeper(production_client(&faults), 0, 3600);
    let started = Instant::now();
    let swept = tokio::time::timeout(
        Duration::from_secs(6),
        sweeper.sweep(Deadline::after(Duration::from_secs(2))),
    )
    .await;
    let took = started.elapsed();
    assert!(matches!(swept, Ok(Ok(_))), "{swept:?} after {took:?}");
    assert!(
        took < Duration::from_millis(2500),
        "answered after {took:?}"
    );
    let summary = sweep_all(&env, base.clone()).await;
    assert!(summary.rolled_back + summary.finished >= 1, "{summary:?}");
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "sa"), balance(&now, "sb")),
        (Some(100), Some(0))
    );
    assert_clean(&base, &env).await;
}

/// T holds its locks and sends its commit again through a storm of about a second; U, meeting
/// T's lock with a patience of 300 ms, sees T's heartbeats and waits: T commits in its first
/// attempt (never rolled back), then U commits.
#[tokio::test]
async fn a_holder_sending_its_commit_again_keeps_its_lock_alive() {
    let base = client();
    let mut env = Env::new(&base).await.lock_path();
    env.heartbeat_every = Some(Duration::from_millis(100));
    let table = env.accounts().to_string();
    seed(&base, &table, "ha", 100).await;
    seed(&base, &table, "hb", 0).await;
    seed(&base, &table, "hc", 0).await;
    let first: Arc<Mutex<Option<Instant>>> = Arc::default();
    let seen = first.clone();
    let faults = FaultInjector::by_request(move |op, body| {
        if op != "UpdateItem" || !body.contains("committed") || !body.contains("t-holder") {
            return Fault::None;
        }
        let Ok(mut first) = seen.lock() else {
            return Fault::None;
        };
        let since = first.get_or_insert_with(Instant::now).elapsed();
        if since < Duration::from_millis(900) {
            Fault::TransactionConflict
        } else {
            Fault::None
        }
    });
    let holder = env.coordinator(client_with(Some(faults.clone()), 3));
    let t = transfer(&table, "t-holder", "ha", "hb", 30);
    let t_run = {
        let message = message(&holder, &t);
        tokio::spawn(async move { holder.run(&message, Deadline::none()).await })
    };
    while faults.injected() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let contender = env.coordinator(base.clone());
    let u = transfer(&table, "t-contender", "ha", "hc", 20);
    let u_report = contender
        .run(&message(&contender, &u), Deadline::none())
        .await
        .expect("the contender commits after the holder");
    let t_report = t_run.await.expect("join").expect("the holder commits");
    assert_eq!(t_report.outcome, TxOutcome::Committed);
    assert!(u_report.outcome.is_committed());
    let header = base
        .get_item()
        .table_name(env.tx())
        .key("TxId", AttributeValue::S("t-holder".into()))
        .key("Part", AttributeValue::S("#".into()))
        .send()
        .await
        .expect("read the header")
        .item
        .unwrap_or_default();
    assert_eq!(
        header.get("Attempt"),
        Some(&AttributeValue::N("1".into())),
        "the holder was rolled back while it sent its commit again: {header:?}"
    );
    let now = items(&base, &table).await;
    assert_eq!(
        (
            balance(&now, "ha"),
            balance(&now, "hb"),
            balance(&now, "hc")
        ),
        (Some(50), Some(30), Some(20))
    );
    assert_clean(&base, &env).await;
}

/// A group-commit batch: the first member's condition fails in the group call, so it leaves
/// the group and runs alone, and its own call stays in flight past the invocation's end (the
/// SDK retrying a throttled call, 10 attempts from 1 s of backoff); the two others committed in
/// the group's second call. At the cut-off the batch answers with their results; only the one
/// in flight is reported cut off.
#[tokio::test]
async fn a_group_member_in_flight_alone_at_the_cut_off_leaves_the_others_their_results() {
    let base = client();
    let env = Env::new(&base).await.fast();
    let table = env.accounts().to_string();
    for pk in ["a1", "b1", "a2", "b2", "zed1", "zed2"] {
        seed(&base, &table, pk, 100).await;
    }
    // Its own call (the group's names a1 too) is throttled for as long as the SDK retries.
    let faults = FaultInjector::by_request(|op, body| {
        let alone = body.contains("\"zed1\"") && !body.contains("\"a1\"");
        if op == "TransactWriteItems" && alone {
            Fault::Throttle
        } else {
            Fault::None
        }
    });
    let config = client_with(Some(faults.clone()), 10)
        .config()
        .to_builder()
        .retry_config(RetryConfig::standard().with_max_attempts(10))
        .build();
    let c = env.coordinator(Client::from_conf(config));
    let records = [
        ("t-stuck", "zed1", "zed2", 1000),
        ("t-one", "a1", "b1", 10),
        ("t-two", "a2", "b2", 10),
    ]
    .iter()
    .enumerate()
    .map(|(i, (tx, from, to, n))| (i, message(&c, &transfer(&table, tx, from, to, *n))))
    .collect();
    let deadline = invocation_deadline(Duration::from_millis(3000), Duration::from_secs(1));
    let applied = tokio::time::timeout(
        Duration::from_secs(6),
        deadline.bound(c.apply(records, deadline)),
    )
    .await;
    let Ok(Some(applied)) = applied else {
        panic!("the batch lost every result at its cut-off");
    };
    let mut results = applied.results;
    results.sort_by_key(|(i, _)| *i);
    let done: Vec<bool> = results
        .iter()
        .map(|(_, r)| matches!(r, RecordResult::Done(o) if o.is_committed()))
        .collect();
    assert_eq!(done, [false, true, true], "{results:?}");
    assert!(
        matches!(results[0].1, RecordResult::Failed(RecordFailure::CutOff(_))),
        "{results:?}"
    );
    assert!(faults.injected() >= 1);
    let now = items(&base, &table).await;
    assert_eq!(
        (
            balance(&now, "a1"),
            balance(&now, "b1"),
            balance(&now, "zed1")
        ),
        (Some(90), Some(110), Some(100))
    );
}

/// A large record's parts are written two per second (`txn_part_pace`): its creation sends no
/// further wave once the run's deadline has passed; the run ends `Deferred` (the parts written
/// expire with their TTL), and the next delivery creates the record and commits.
#[tokio::test]
async fn the_paced_parts_of_a_large_record_stop_at_the_deadline() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    let c = env.coordinator(base.clone());
    // Seven puts of 250 KB: about 1.75 MB of requests JSON, five parts, three waves.
    let blob = "x".repeat(250 * 1024);
    let requests: Vec<serde_json::Value> = (0..7)
        .map(|i| serde_json::json!({"Put":{"TableName":table,"Item":{"PK":format!("big{i}"),"blob":blob}}}))
        .collect();
    let body = serde_json::json!({"txId":"t-paced-deadline","requests":requests});
    let m = message(&c, &body);
    let started = Instant::now();
    let result = c.run(&m, Deadline::after(Duration::from_millis(300))).await;
    let took = started.elapsed();
    assert!(matches!(result, Err(TxError::Deferred)), "{result:?}");
    assert!(
        took < Duration::from_millis(1500),
        "answered after {took:?}"
    );
    let report = c
        .run(&m, Deadline::none())
        .await
        .expect("the next delivery commits");
    assert!(report.outcome.is_committed(), "{:?}", report.outcome);
}

/// A locked read whose lock writes are cancelled by conflicts for as long as they are sent
/// (its snapshot read too) gives up within four lock patiences (1.2 s here) with the retryable
/// `Contention`, having released what it held, instead of sending them forever.
#[tokio::test]
async fn a_locked_read_in_a_conflict_storm_gives_up_after_its_patiences() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "ra", 100).await;
    seed(&base, &table, "rb", 0).await;
    let faults = FaultInjector::by_request(|op, _| match op {
        "TransactGetItems" | "TransactWriteItems" => Fault::TransactionCanceledByConflict,
        _ => Fault::None,
    });
    let reader = env.coordinator(client_with(Some(faults), 3));
    let key = |pk: &str| {
        serde_json::json!({ "PK": pk })
            .as_object()
            .cloned()
            .unwrap_or_default()
    };
    let keys = [(table.clone(), key("ra")), (table.clone(), key("rb"))];
    let started = Instant::now();
    let read = tokio::time::timeout(Duration::from_secs(6), reader.read_locked(&keys)).await;
    let took = started.elapsed();
    assert!(
        matches!(read, Ok(Err(TxError::Contention { .. }))),
        "{read:?} after {took:?}"
    );
    assert!(took < Duration::from_secs(3), "gave up after {took:?}");
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "ra"), balance(&now, "rb")),
        (Some(100), Some(0))
    );
    assert_clean(&base, &env).await;
}
