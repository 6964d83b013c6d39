//! Multi-item transactions against DynamoDB Local: crash at every step, contention, isolation,
//! size, the sweeper's cost, idempotency, conditions, validation and the handlers on the
//! `events/` fixtures.

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::txn::env::*;
use common::*;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::__private::item_to_json;
use dynamodb_exactly_once::txn::read::Isolation;
use dynamodb_exactly_once::txn::TxState;
use dynamodb_exactly_once::txn::{Coordinator, TxError, TxOutcome};
use dynamodb_exactly_once::Deadline;
use lambda_runtime::{Context, LambdaEvent};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

pub(crate) mod builder;
pub(crate) mod check;
pub(crate) mod chunks;
pub(crate) mod conflicts;
pub(crate) mod cost;
pub(crate) mod deadline;
pub(crate) mod env;
pub(crate) mod fast;
pub(crate) mod fast_edges;
pub(crate) mod fast_self;
mod handlers;
pub(crate) mod interleave;
pub(crate) mod issued;
pub(crate) mod keys;
pub(crate) mod locked_read;
pub(crate) mod logs;
pub(crate) mod long;
pub(crate) mod missing_old;
pub(crate) mod numbers;
pub(crate) mod own_lock;
pub(crate) mod part_pace;
mod races;
pub(crate) mod read_ahead;
pub(crate) mod redrive;
pub(crate) mod sizes;
pub(crate) mod sizes_resume;
pub(crate) mod sweep;
pub(crate) mod versions;

/// The requests of the crash test for N = 1, 2, 5 with keys prefixed by `p`, and the balances
/// before (`None` = absent) and after.
#[allow(clippy::type_complexity)]
fn crash_case(
    table: &str,
    n: usize,
    p: &str,
) -> (
    Vec<Value>,
    Vec<(String, Option<i64>)>,
    Vec<(String, Option<i64>)>,
) {
    let k = |s: &str| format!("{p}-{s}");
    match n {
        1 => (
            vec![update(table, &k("a"), 5)],
            vec![(k("a"), Some(100))],
            vec![(k("a"), Some(105))],
        ),
        2 => (
            vec![debit(table, &k("a"), 30), update(table, &k("b"), 30)],
            vec![(k("a"), Some(100)), (k("b"), Some(100))],
            vec![(k("a"), Some(70)), (k("b"), Some(130))],
        ),
        _ => (
            vec![
                debit(table, &k("a"), 10),
                update(table, &k("b"), 10),
                json!({"Put":{"TableName":table,"Item":{"PK":k("new"),"balance":7},
                    "ConditionExpression":"attribute_not_exists(PK)"}}),
                json!({"Delete":{"TableName":table,"Key":{"PK":k("del")}}}),
                json!({"ConditionCheck":{"TableName":table,"Key":{"PK":k("ghost")},
                    "ConditionExpression":"attribute_not_exists(PK)"}}),
            ],
            vec![
                (k("a"), Some(100)),
                (k("b"), Some(100)),
                (k("new"), None),
                (k("del"), Some(1)),
                (k("ghost"), None),
            ],
            vec![
                (k("a"), Some(90)),
                (k("b"), Some(110)),
                (k("new"), Some(7)),
                (k("del"), None),
                (k("ghost"), None),
            ],
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_every_step_leaves_all_or_nothing() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    for n in [1usize, 2, 5] {
        // Given the number of calls of an undisturbed run,
        let counter = FaultInjector::counting();
        let c = env.coordinator(client_with(Some(counter.clone()), 1));
        let (requests, before, after) = crash_case(&table, n, &format!("n{n}probe"));
        for (pk, b) in &before {
            if let Some(b) = b {
                seed(&base, &table, pk, *b).await;
            }
        }
        let body = json!({"txId":format!("n{n}probe"),"requests":requests});
        let report = c
            .run(&message(&c, &body), Deadline::none())
            .await
            .expect("undisturbed run");
        assert_eq!(report.outcome, TxOutcome::Committed);
        // 2N + 3: requests that do not fit the (small) inline budget go to a part item, created
        // with the header in one call.
        let json = message(&c, &body).requests_json();
        assert!(
            json.len() <= 64 * 1024,
            "within the coordinator's CREATE_AT_ONCE_BYTES"
        );
        assert_eq!(
            report.write_calls,
            2 * n as u64 + 3,
            "write count for N={n}"
        );
        let total = counter.calls();
        let now = items(&base, &table).await;
        for (pk, b) in &after {
            assert_eq!(balance(&now, pk), *b, "undisturbed {pk}");
        }

        // when the coordinator dies after its k-th call, for every k,
        // (the k-th call refused, or applied with its response lost, then every later call
        // refused),
        let (mut swept_none, mut swept_all) = (0, 0);
        for (k, lose) in (0..=total).flat_map(|k| [(k, false), (k, true)]) {
            let p = format!("n{n}k{k}{}", if lose { "lost" } else { "" });
            let (requests, before, after) = crash_case(&table, n, &p);
            for (pk, b) in &before {
                if let Some(b) = b {
                    seed(&base, &table, pk, *b).await;
                }
            }
            let body = json!({"txId":p.clone(),"requests":requests});
            let dies = if lose {
                FaultInjector::new(move |i, _| match i.cmp(&k) {
                    std::cmp::Ordering::Less => Fault::None,
                    std::cmp::Ordering::Equal => Fault::LoseResponse,
                    std::cmp::Ordering::Greater => Fault::Refuse,
                })
            } else {
                FaultInjector::fail_from(k)
            };
            let dying = env.coordinator(client_with(Some(dies), 1));
            let first = dying.run(&message(&dying, &body), Deadline::none()).await;
            assert_eq!(
                first.is_ok(),
                k == total,
                "n={n} k={k} lost={lose}: {first:?}"
            );

            // and then another coordinator (even k) or the sweeper (odd k) takes over,
            let by_coordinator = k % 2 == 0;
            if by_coordinator {
                let other = env.coordinator(client());
                let report = other
                    .run(&message(&other, &body), Deadline::none())
                    .await
                    .expect("resume");
                assert!(
                    report.outcome.is_committed(),
                    "n={n} k={k} lost={lose}: {report:?}"
                );
            } else {
                sweep_all(&env, client()).await;
            }

            // then every request is applied or none, and nothing of the protocol is left.
            let now = items(&base, &table).await;
            let got: Vec<Option<i64>> = before.iter().map(|(pk, _)| balance(&now, pk)).collect();
            let none: Vec<Option<i64>> = before.iter().map(|(_, b)| *b).collect();
            let all: Vec<Option<i64>> = after.iter().map(|(_, b)| *b).collect();
            assert!(
                got == none || got == all,
                "n={n} k={k} lost={lose}: partial state {got:?} (none {none:?}, all {all:?})"
            );
            if by_coordinator {
                assert_eq!(
                    got, all,
                    "n={n} k={k} lost={lose}: the resumed transaction commits"
                );
            } else if got == all {
                swept_all += 1;
            } else {
                swept_none += 1;
            }
            for (pk, _) in &before {
                if let Some(item) = now.get(pk) {
                    assert!(
                        item.keys()
                            .all(|a| a == "PK" || a == "balance" || a == "_txVer"),
                        "n={n} k={k} lost={lose}: {pk} = {item:?}"
                    );
                }
            }
            let header = env
                .sweeper(client(), 0, 3600)
                .status(&p)
                .await
                .expect("header");
            if let Some(h) = header {
                assert_eq!(h.state, TxState::Completed, "n={n} k={k} lost={lose}");
            }
        }
        eprintln!("N={n}: {total} calls; sweeper rolled back {swept_none}, finished {swept_all}");
        assert!(
            swept_none > 0 && swept_all > 0,
            "both sweeper paths are exercised"
        );
    }
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn lost_responses_never_apply_twice() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    // Every write's first attempt is applied but its response is lost; the SDK retries.
    let lossy = FaultInjector::new(|i, op| {
        if i % 2 == 0
            && matches!(
                op,
                "UpdateItem" | "PutItem" | "DeleteItem" | "TransactWriteItems"
            )
        {
            Fault::LoseResponse
        } else {
            Fault::None
        }
    });
    let c = env.coordinator(client_with(Some(lossy.clone()), 4));
    let report = c
        .run(
            &message(&c, &transfer(&table, "lossy", "a", "b", 40)),
            Deadline::none(),
        )
        .await
        .expect("run");
    assert!(lossy.injected() > 0);
    assert!(report.outcome.is_committed(), "{report:?}");
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a"), balance(&now, "b")),
        (Some(60), Some(40))
    );
    assert_clean(&base, &env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_transfers_keep_the_sum_and_never_overdraw() {
    const ACCOUNTS: usize = 10;
    const COORDINATORS: usize = 8;
    const INITIAL: i64 = 1000;
    let transfers: usize = std::env::var("TXN_CONTENTION_TRANSFERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let base = client();
    let env = Arc::new(Env::new(&base).await);
    let table = env.accounts().to_string();
    for a in 0..ACCOUNTS {
        seed(&base, &table, &format!("acc{a}"), INITIAL).await;
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..COORDINATORS {
        let env = env.clone();
        let table = table.clone();
        tasks.push(tokio::spawn(async move {
            let c = env.coordinator(client());
            let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64);
            let mut done = Vec::new();
            for t in (w..transfers).step_by(COORDINATORS) {
                let from = rng.random_range(0..ACCOUNTS);
                let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
                let amount = rng.random_range(1..=400i64);
                let body = transfer(
                    &table,
                    &format!("t{t}"),
                    &format!("acc{from}"),
                    &format!("acc{to}"),
                    amount,
                );
                let outcome = loop {
                    match c.run(&message(&c, &body), Deadline::none()).await {
                        Ok(r) => break r.outcome,
                        // Aborted too often: SQS would deliver the message again.
                        Err(TxError::Contention { .. }) => continue,
                        Err(e) => panic!("transfer {t}: {e}"),
                    }
                };
                done.push((from, to, amount, outcome));
            }
            done
        }));
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.extend(t.await.expect("task"));
    }
    let elapsed = started.elapsed();
    sweep_all(&env, client()).await;

    let now = items(&base, &table).await;
    let mut expected = vec![INITIAL; ACCOUNTS];
    let mut committed = 0;
    for (from, to, amount, outcome) in &outcomes {
        match outcome {
            TxOutcome::Committed => {
                committed += 1;
                expected[*from] -= amount;
                expected[*to] += amount;
            }
            TxOutcome::RolledBack { request } => assert_eq!(*request, 0, "the debit failed"),
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    let got: Vec<i64> = (0..ACCOUNTS)
        .map(|a| balance(&now, &format!("acc{a}")).expect("balance"))
        .collect();
    eprintln!(
        "contention: {transfers} transfers by {COORDINATORS} coordinators in {elapsed:?}, {committed} committed"
    );
    assert_eq!(outcomes.len(), transfers);
    assert_eq!(got.iter().sum::<i64>(), INITIAL * ACCOUNTS as i64);
    assert!(got.iter().all(|b| *b >= 0), "{got:?}");
    assert_eq!(got, expected, "outcomes match the balances");
    assert!(committed > transfers / 4);
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn committed_reads_never_see_uncommitted_changes() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    let c = env.coordinator(client());
    let key = |pk: &str| json!({"PK":pk}).as_object().cloned().expect("key");
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;

    // Given a transfer whose coordinator died after locking (and applying) both items:
    // DescribeTable 1 + create 1 + reads 2 + locks 2 = 6 calls.
    let dying = env.coordinator(client_with(Some(FaultInjector::fail_from(6)), 1));
    let body = transfer(&table, "iso", "a", "b", 30);
    assert!(dying
        .run(&message(&dying, &body), Deadline::none())
        .await
        .is_err());
    let read = |pk: &'static str, level| {
        let c = c.clone();
        let table = table.clone();
        let key = key(pk);
        async move {
            c.read(&table, &key, level)
                .await
                .expect("read")
                .and_then(|i| i.get("balance").and_then(Value::as_i64))
        }
    };
    // then committed reads see the images, uncommitted reads the pending change;
    assert_eq!(read("a", Isolation::Committed).await, Some(100));
    assert_eq!(read("b", Isolation::Committed).await, Some(0));
    assert_eq!(read("a", Isolation::Uncommitted).await, Some(70));

    // and once rolled back, the change is never visible again, at any level.
    let summary = sweep_all(&env, client()).await;
    assert_eq!(summary.rolled_back, 1);
    for level in [
        Isolation::Committed,
        Isolation::Uncommitted,
        Isolation::Locked,
    ] {
        assert_eq!(read("a", level).await, Some(100), "{level:?}");
        assert_eq!(read("b", level).await, Some(0), "{level:?}");
    }

    // A coordinator that died right after the commit: committed reads see the new values.
    let dying = env.coordinator(client_with(Some(FaultInjector::fail_from(7)), 1));
    let body = transfer(&table, "iso2", "a", "b", 30);
    assert!(dying
        .run(&message(&dying, &body), Deadline::none())
        .await
        .is_err());
    assert_eq!(read("a", Isolation::Committed).await, Some(70));
    let values = c
        .read_locked(&[(table.clone(), key("a")), (table.clone(), key("b"))])
        .await
        .expect("locked read");
    let balances: Vec<Option<i64>> = values
        .iter()
        .map(|v| {
            v.as_ref()
                .and_then(|i| i.get("balance"))
                .and_then(Value::as_i64)
        })
        .collect();
    assert_eq!(balances, vec![Some(70), Some(30)]);
    sweep_all(&env, client()).await;
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn large_transactions_commit() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    let c = env.coordinator(client());

    // 150 items.
    let requests: Vec<Value> = (0..150)
        .map(|i| json!({"Put":{"TableName":table,"Item":{"PK":format!("item{i:03}"),"balance":i}}}))
        .collect();
    let report = c
        .run(
            &message(&c, &json!({"txId":"wide","requests":requests})),
            Deadline::none(),
        )
        .await
        .expect("150 items");
    assert_eq!(report.outcome, TxOutcome::Committed);
    // 2N + 3: the requests (13 KB) are kept out of the header, which every lock write checks
    // (a check is billed by the checked item's size), in a part item created with the header
    // in one call.
    assert_eq!(report.write_calls, 2 * 150 + 3);
    assert!(report.write_units >= 303.0);
    let now = items(&base, &table).await;
    assert_eq!(now.len(), 150);

    // More than 400 KB of requests: the TX record is split over part items.
    let blob = "x".repeat(90 * 1024);
    let requests: Vec<Value> = (0..5)
        .map(|i| json!({"Put":{"TableName":table,"Item":{"PK":format!("big{i}"),"blob":blob}}}))
        .collect();
    let body = json!({"txId":"heavy","requests":requests});
    assert!(body.to_string().len() > 400 * 1024);
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("heavy");
    assert_eq!(report.outcome, TxOutcome::Committed);
    assert_eq!(report.write_calls, 2 * 5 + 3 + 2, "two part items");
    let now = items(&base, &table).await;
    assert_eq!(now.len(), 155);
    assert_eq!(
        now["big4"]
            .get("blob")
            .and_then(Value::as_str)
            .map(str::len),
        Some(90 * 1024)
    );
    // Redelivered: the stored requests (from the parts) match, nothing is applied again.
    let again = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("again");
    assert_eq!(again.outcome, TxOutcome::AlreadyCommitted);
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn tx_id_makes_a_transaction_idempotent() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = env.accounts().to_string();
    let c = env.coordinator(client());
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    let body = transfer(&table, "once", "a", "b", 10);
    let first = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("1");
    let second = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("2");
    assert_eq!(first.outcome, TxOutcome::Committed);
    assert_eq!(second.outcome, TxOutcome::AlreadyCommitted);
    assert_eq!(second.write_calls, 1, "only the refused header creation");
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a"), balance(&now, "b")),
        (Some(90), Some(10))
    );

    let other = transfer(&table, "once", "a", "b", 99);
    match c.run(&message(&c, &other), Deadline::none()).await {
        Err(TxError::Rejected(r)) => assert_eq!(r.code, "tx_id_reused"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn failed_condition_rolls_back_and_names_the_request() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = env.accounts().to_string();
    let c = env.coordinator(client());
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 5).await;
    // Items are locked in key order: the credit of "a" is applied first, then the debit of "b"
    // fails its condition; the rollback restores "a".
    let body = json!({"txId":"overdraft","requests":[
        update(&table, "a", 50), debit(&table, "b", 50)]});
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("run");
    assert_eq!(report.outcome, TxOutcome::RolledBack { request: 1 });
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a"), balance(&now, "b")),
        (Some(100), Some(5))
    );
    let again = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("again");
    assert_eq!(again.outcome, TxOutcome::AlreadyRolledBack { request: 1 });
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn disallowed_tables_and_reserved_attributes_are_refused() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let c = env.coordinator(client());
    let refused = |body: Value| match c.parse_message(body.to_string().as_bytes()) {
        Err(r) => r.code.as_str(),
        Ok(_) => "accepted",
    };
    assert_eq!(
        refused(transfer(env.tx(), "t", "a", "b", 1)),
        "table_not_allowed"
    );
    assert_eq!(
        refused(
            json!({"txId":"t","requests":[{"Update":{"TableName":env.accounts(),
            "Key":{"PK":"a"},"UpdateExpression":"REMOVE _txLock"}}]})
        ),
        "reserved_attribute"
    );
    // A bad expression is rejected by DynamoDB: rolled back and dead-lettered.
    let body = json!({"txId":"bad","requests":[{"Update":{"TableName":env.accounts(),
        "Key":{"PK":"a"},"UpdateExpression":"SET #b = :undefined",
        "ExpressionAttributeNames":{"#b":"balance"}}}]});
    match c.run(&message(&c, &body), Deadline::none()).await {
        Err(TxError::Rejected(r)) => assert_eq!(r.code, "rejected_by_dynamodb"),
        other => panic!("{other:?}"),
    }
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn a_near_deadline_defers_the_message_for_redelivery() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 100).await;
    seed(&base, &table, "b", 0).await;
    let writer = coordinator_writer(&env, env.coordinator(client()));
    let batch = sqs_batch(&[transfer(&table, "late", "a", "b", 10)], 0);
    // Given a deadline already reached, the message is not started and reported for retry;
    let report = writer
        .handle_batch(&batch, Deadline::after(Duration::ZERO))
        .await;
    assert_eq!(report.response.failed_ids(), vec!["m0".to_string()]);
    assert_eq!(report.summary.count("deferred"), 1);
    // delivered again with time left, it commits.
    let report = writer.handle_batch(&batch, Deadline::none()).await;
    assert!(report.response.failed_ids().is_empty());
    assert_eq!(report.summary.count("committed"), 1);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "a"), balance(&now, "b")),
        (Some(90), Some(10))
    );
}
