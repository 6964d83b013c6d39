//! Versioned writes against DynamoDB Local: versions under concurrent writers, crashes and
//! lost responses at every call (the ratchet's history mode: `ratchet_history.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::versioning::{
    HistoryEntry, HistoryOp, Latest, Revision, VersionOutcome, Versioning, VersioningConfig,
};
use dynamodb_exactly_once::ItemKey;
use serde_json::{json, Value};

// ------------------------------------------------------------------------- versioning helpers

fn versioning_config(tables: &BTreeMap<String, String>) -> VersioningConfig {
    VersioningConfig::builder(&tables["VersionedTable"], &tables["VersionedHistoryTable"])
        .build()
        .expect("valid configuration")
}

async fn versioned(client: Client) -> (Versioning, BTreeMap<String, String>) {
    let tables =
        dev_testing::template_tables(&client, &["VersionedTable", "VersionedHistoryTable"]).await;
    (Versioning::new(client, versioning_config(&tables)), tables)
}

fn doc(id: &str) -> ItemKey {
    ItemKey::from_json(&json!({ "PK": id })).expect("key")
}

async fn written(store: &Versioning, change: &Revision) -> u64 {
    match store.apply(change).await.expect("apply") {
        VersionOutcome::Written { version } => version,
        other => panic!("expected Written, got {other:?}"),
    }
}

/// Every version of `key`, newest first, read two per page.
async fn all_versions(store: &Versioning, key: &ItemKey) -> Vec<HistoryEntry> {
    let mut out = Vec::new();
    let mut before = None;
    loop {
        let page = store.history(key, 2, before).await.expect("history");
        out.extend(page.entries);
        before = page.next;
        if before.is_none() {
            return out;
        }
    }
}

/// The invariant: history holds exactly versions 1..=n and the latest item is version n, with
/// history row n's content and write id. Returns n.
async fn assert_consistent(store: &Versioning, key: &ItemKey) -> u64 {
    let history = all_versions(store, key).await;
    let n = history.len() as u64;
    let versions: Vec<u64> = history.iter().rev().map(|e| e.version).collect();
    assert_eq!(versions, (1..=n).collect::<Vec<_>>(), "history of {key:?}");
    match (store.get(key).await.expect("get"), history.first()) {
        (Latest::Absent, None) => {}
        (Latest::Live(latest), Some(top)) => {
            assert_eq!(latest.version, n);
            assert_eq!(Some(&latest.item), top.item.as_ref());
            assert_eq!(latest.write_id, top.write_id);
        }
        (Latest::Deleted { version }, Some(top)) => {
            assert_eq!(version, n);
            assert_eq!(top.op, HistoryOp::Delete);
        }
        (latest, top) => panic!("latest {latest:?} disagrees with history {top:?}"),
    }
    n
}

// ------------------------------------------------------------------------- versioning

fn create(key: &ItemKey, t: &str) -> Revision {
    Revision::create(key, json!({ "t": t })).expect("valid")
}

fn update(key: &ItemKey, expected: u64, t: &str) -> Revision {
    Revision::update(key, expected, json!({ "t": t })).expect("valid")
}

#[tokio::test]
async fn every_change_writes_the_next_version_or_says_why_not() {
    let (store, _) = versioned(client()).await;
    let key = doc("doc#1");
    let outcome = |change: Revision| {
        let store = store.clone();
        async move { store.apply(&change).await.expect("apply") }
    };
    let conflict = |current| VersionOutcome::Conflict { current };

    assert_eq!(written(&store, &create(&key, "a")).await, 1);
    assert_eq!(written(&store, &update(&key, 1, "b")).await, 2);
    assert_eq!(outcome(update(&key, 1, "late")).await, conflict(Some(2)));
    assert_eq!(outcome(create(&key, "again")).await, conflict(Some(2)));
    assert_eq!(written(&store, &Revision::delete(&key, 2)).await, 3);
    assert_eq!(
        store.get(&key).await.expect("get"),
        Latest::Deleted { version: 3 }
    );
    let deleted = VersionOutcome::Deleted { version: 3 };
    assert_eq!(outcome(update(&key, 3, "c")).await, deleted);
    assert_eq!(outcome(Revision::delete(&key, 3)).await, deleted);
    // A create finds the tombstone; a recreate continues the sequence instead of reusing 1.
    assert_eq!(outcome(create(&key, "d")).await, deleted);
    let recreate = Revision::recreate(&key, 3, json!({"t": "d"})).expect("valid");
    assert_eq!(written(&store, &recreate).await, 4);
    assert_eq!(outcome(update(&key, 9, "e")).await, conflict(Some(4)));
    assert_eq!(
        outcome(update(&doc("nothing"), 1, "f")).await,
        conflict(None)
    );
    assert_eq!(assert_consistent(&store, &key).await, 4);
}

#[tokio::test]
async fn history_pages_come_newest_first() {
    let (store, _) = versioned(client()).await;
    let key = doc("doc#pages");
    written(&store, &create(&key, "a")).await;
    written(&store, &update(&key, 1, "b")).await;
    written(&store, &Revision::delete(&key, 2)).await;
    written(&store, &Revision::restore(&key, 3, 2)).await;

    let first = store.history(&key, 3, None).await.expect("page");
    let second = store.history(&key, 3, first.next).await.expect("page");

    let versions = |page: &dynamodb_exactly_once::versioning::HistoryPage| -> Vec<u64> {
        page.entries.iter().map(|e| e.version).collect()
    };
    assert_eq!((versions(&first), first.next), (vec![4, 3, 2], Some(2)));
    assert_eq!((versions(&second), second.next), (vec![1], None));
    let ops: Vec<HistoryOp> = first.entries.iter().map(|e| e.op).collect();
    assert_eq!(
        ops,
        [HistoryOp::Restore, HistoryOp::Delete, HistoryOp::Update]
    );
    let v2 = store.get_version(&key, 2).await.expect("get").expect("v2");
    assert_eq!(
        Value::Object(v2.item.unwrap_or_default()),
        json!({"PK": "doc#pages", "t": "b"})
    );
    assert_eq!(store.get_version(&key, 5).await.expect("get"), None);
}

#[tokio::test]
async fn protocol_attributes_are_refused_in_caller_data() {
    let key = doc("doc#1");
    for name in ["_version", "_deleted", "_writeId", "_writtenAt"] {
        let err = Revision::create(&key, json!({ name: 1 })).expect_err("reserved");
        assert_eq!(err.code, "reserved_attribute");
        assert!(err.message.contains(name), "{err}");
    }
    let err = Revision::update(&key, 1, json!({"PK": "doc#2"})).expect_err("mismatch");
    assert_eq!(err.code, "key_mismatch");
}

#[tokio::test]
async fn restore_writes_version_v_as_version_n_plus_one() {
    let (store, _) = versioned(client()).await;
    let key = doc("doc#r");
    written(
        &store,
        &Revision::create(&key, json!({"t": "first", "n": 1})).expect("ok"),
    )
    .await;
    written(
        &store,
        &Revision::update(&key, 1, json!({"t": "second"})).expect("ok"),
    )
    .await;
    written(&store, &Revision::delete(&key, 2)).await;

    let restored = written(&store, &Revision::restore(&key, 3, 1)).await;

    assert_eq!(restored, 4);
    let v1 = store.get_version(&key, 1).await.expect("get").expect("v1");
    let v4 = store.get_version(&key, 4).await.expect("get").expect("v4");
    assert_eq!(v4.op, HistoryOp::Restore);
    assert_eq!(v4.restored_from, Some(1));
    assert_eq!(v4.item, v1.item);
    let Latest::Live(latest) = store.get(&key).await.expect("get") else {
        panic!("the restore revived the item");
    };
    // Typed: the latest item decodes into the caller's type.
    let typed: serde_json::Map<String, serde_json::Value> = latest.item_as().expect("decodes");
    assert_eq!(Some(typed), v1.item);
    assert_eq!(Some(latest.item), v1.item);
    assert_eq!(
        store
            .apply(&Revision::restore(&key, 4, 3))
            .await
            .expect("apply"),
        VersionOutcome::NoSuchVersion { version: 3 },
        "a delete has nothing to restore"
    );
    assert_eq!(
        store
            .apply(&Revision::restore(&key, 4, 9))
            .await
            .expect("apply"),
        VersionOutcome::NoSuchVersion { version: 9 }
    );
    assert_eq!(
        store
            .apply(&Revision::restore(&key, 2, 1))
            .await
            .expect("apply"),
        VersionOutcome::Conflict { current: Some(4) }
    );
    assert_eq!(assert_consistent(&store, &key).await, 4);
}

#[tokio::test]
async fn a_change_is_one_transact_write_items_request() {
    let counting = FaultInjector::counting();
    let (store, _) = versioned(client_with(Some(counting.clone()), 3)).await;
    let key = doc("doc#cost");
    written(
        &store,
        &Revision::create(&key, json!({"t": "a"})).expect("ok"),
    )
    .await;
    let before = counting.calls();
    let cost = dynamodb_exactly_once::Cost::default();

    let outcome = store
        .apply_counted(
            &Revision::update(&key, 1, json!({"t": "b"})).expect("ok"),
            &cost,
        )
        .await
        .expect("apply");

    assert_eq!(outcome, VersionOutcome::Written { version: 2 });
    assert_eq!(counting.calls() - before, 1);
    assert_eq!(counting.calls_of("TransactWriteItems"), 2);
    assert_eq!(cost.write_calls(), 1);
    assert!(cost.write_units() > 0.0, "consumed capacity is reported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updaters_never_lose_a_version_nor_write_one_twice() {
    const N: usize = 16;
    let (store, _) = versioned(client()).await;
    let key = doc("doc#hot");

    let tasks: Vec<_> = (0..N)
        .map(|writer| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move { append_until_written(&store, &key, writer).await })
        })
        .collect();
    let mut won: Vec<u64> = Vec::new();
    for task in tasks {
        won.push(task.await.expect("task"));
    }

    won.sort_unstable();
    assert_eq!(
        won,
        (1..=N as u64).collect::<Vec<_>>(),
        "each writer won one version"
    );
    assert_eq!(assert_consistent(&store, &key).await, N as u64);
    let history = all_versions(&store, &key).await;
    let ids: BTreeSet<&str> = history.iter().map(|e| e.write_id.as_str()).collect();
    assert_eq!(ids.len(), N, "one write id per version");
    let Latest::Live(latest) = store.get(&key).await.expect("get") else {
        panic!("live");
    };
    let mut writers: Vec<u64> = latest.item["writers"]
        .as_array()
        .expect("writers")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    writers.sort_unstable();
    assert_eq!(
        writers,
        (0..N as u64).collect::<Vec<_>>(),
        "no update was lost"
    );
}

/// Read the latest version, append `writer` to its `writers`, write it; again on a conflict.
async fn append_until_written(store: &Versioning, key: &ItemKey, writer: usize) -> u64 {
    for _ in 0..1000 {
        let latest = store.get(key).await.expect("get");
        let change = match latest.live() {
            None => Revision::create(key, json!({ "writers": [writer] })),
            Some(item) => {
                let mut writers = item.item["writers"].as_array().cloned().unwrap_or_default();
                writers.push(json!(writer));
                Revision::update(key, item.version, json!({ "writers": writers }))
            }
        }
        .expect("valid");
        match store.apply(&change).await {
            Ok(VersionOutcome::Written { version }) => return version,
            Ok(VersionOutcome::Conflict { .. }) => {}
            Ok(other) => panic!("writer {writer}: {other:?}"),
            Err(err) if err.is_retryable() => {}
            Err(err) => panic!("writer {writer}: {err}"),
        }
        tokio::time::sleep(Duration::from_millis(rand::random_range(1..8))).await;
    }
    panic!("writer {writer} never won a version")
}

/// The scenarios of the crash test: the setup (healthy) and the change under test.
async fn scenario(store: &Versioning, name: &str, key: &ItemKey) -> (Revision, u64) {
    match name {
        "create" => (create(key, "new"), 1),
        "recreate" => {
            written(store, &create(key, "old")).await;
            written(store, &Revision::delete(key, 1)).await;
            let again = Revision::recreate(key, 2, json!({"t": "again"})).expect("ok");
            (again, 3)
        }
        "update" => {
            written(store, &create(key, "old")).await;
            (update(key, 1, "new"), 2)
        }
        "delete" => {
            written(store, &create(key, "old")).await;
            (Revision::delete(key, 1), 2)
        }
        "update-retried-after-lost-response" => {
            written(store, &create(key, "old")).await;
            let change = update(key, 1, "new");
            let lost = FaultInjector::new(|_, _| Fault::LoseResponse);
            let lossy = Versioning::new(client_with(Some(lost), 1), store.config().clone());
            assert!(lossy.apply(&change).await.is_err(), "the response was lost");
            (change, 2)
        }
        "update-redelivered-after-lost-response" => {
            // The message is delivered again: the same write id, another time, another token.
            written(store, &create(key, "old")).await;
            let first = Revision::update(key, 1, json!({"t": "new"}))
                .and_then(|c| c.with_write_id("message-1"))
                .expect("ok");
            let lost = FaultInjector::new(|_, _| Fault::LoseResponse);
            let lossy = Versioning::new(client_with(Some(lost), 1), store.config().clone());
            assert!(lossy.apply(&first).await.is_err(), "the response was lost");
            let later = first.written_at_ms() + 1000;
            let again = first.with_written_at(later);
            (again, 2)
        }
        "restore" => {
            written(store, &create(key, "first")).await;
            written(store, &update(key, 1, "second")).await;
            (Revision::restore(key, 2, 1), 3)
        }
        other => panic!("unknown scenario {other}"),
    }
}

#[tokio::test]
async fn a_crash_or_lost_response_at_every_call_leaves_latest_and_history_consistent() {
    let setup = client();
    let (healthy, tables) = versioned(setup.clone()).await;
    let mut schedules = 0;
    let mut calls = BTreeMap::new();
    for name in [
        "create",
        "recreate",
        "update",
        "delete",
        "restore",
        "update-retried-after-lost-response",
        "update-redelivered-after-lost-response",
    ] {
        for fault in [Fault::Refuse, Fault::LoseResponse] {
            for k in 0.. {
                // Given the scenario's item, when call k of the change fails (no SDK retry)
                let key = doc(&format!("{name}-{fault:?}-{k}"));
                let (change, expected) = scenario(&healthy, name, &key).await;
                let injector =
                    FaultInjector::new(move |i, _| if i == k { fault } else { Fault::None });
                let faulty = Versioning::new(
                    client_with(Some(injector.clone()), 1),
                    versioning_config(&tables),
                );
                let result = faulty.apply(&change).await;
                if injector.injected() == 0 {
                    assert_eq!(
                        result.expect("no fault"),
                        VersionOutcome::Written { version: expected }
                    );
                    calls.insert(name, k);
                    break;
                }
                schedules += 1;
                // then latest and history agree (the change applied entirely or not at all)
                let n = assert_consistent(&healthy, &key).await;
                assert!(
                    n == expected || n == expected - 1,
                    "{name} {fault:?} call {k}: {n}"
                );
                if let Err(err) = &result {
                    assert!(err.is_retryable(), "{name} {fault:?} call {k}: {err}");
                }
                // and applying the same change again writes its version exactly once.
                assert_eq!(
                    healthy.apply(&change).await.expect("retry"),
                    VersionOutcome::Written { version: expected },
                    "{name} {fault:?} call {k}"
                );
                assert_eq!(assert_consistent(&healthy, &key).await, expected);
            }
        }
    }
    // Every call of every scenario failed once each way.
    println!("DynamoDB calls per change: {calls:?}; {schedules} fault schedules");
    assert_eq!(schedules, 2 * calls.values().sum::<usize>());
    assert!(calls.values().all(|&n| n >= 1));
}

#[tokio::test]
async fn a_lost_transaction_response_does_not_create_a_second_version() {
    let setup = client();
    let (healthy, tables) = versioned(setup).await;
    let key = doc("doc#lost");
    written(
        &healthy,
        &Revision::create(&key, json!({"t": "a"})).expect("ok"),
    )
    .await;
    let first_transaction = Arc::new(AtomicUsize::new(0));
    let lose_first = FaultInjector::new(move |_, op| {
        let first =
            op == "TransactWriteItems" && first_transaction.fetch_add(1, Ordering::SeqCst) == 0;
        if first {
            Fault::LoseResponse
        } else {
            Fault::None
        }
    });
    let store = Versioning::new(
        client_with(Some(lose_first.clone()), 3),
        versioning_config(&tables),
    );
    let change = Revision::update(&key, 1, json!({"t": "b"})).expect("ok");

    // DynamoDB applies the transaction, the response is lost, the SDK sends it again.
    let outcome = store.apply(&change).await.expect("apply");

    assert_eq!(lose_first.injected(), 1);
    assert_eq!(outcome, VersionOutcome::Written { version: 2 });
    assert_eq!(assert_consistent(&healthy, &key).await, 2);
    let row = healthy
        .get_version(&key, 2)
        .await
        .expect("get")
        .expect("v2");
    assert_eq!(row.write_id, change.write_id());
    // The caller applying the same change again (e.g. after a timeout) is still version 2.
    assert_eq!(
        store.apply(&change).await.expect("again"),
        VersionOutcome::Written { version: 2 }
    );
    assert_eq!(assert_consistent(&healthy, &key).await, 2);
}

#[tokio::test]
async fn a_retry_that_finds_someone_elses_version_is_a_conflict() {
    let (store, _) = versioned(client()).await;
    let key = doc("doc#race");
    written(
        &store,
        &Revision::create(&key, json!({"t": "a"})).expect("ok"),
    )
    .await;
    let mine = Revision::update(&key, 1, json!({"by": "me"})).expect("ok");
    let theirs = Revision::update(&key, 1, json!({"by": "them"})).expect("ok");

    written(&store, &theirs).await;
    let outcome = store.apply(&mine).await.expect("apply");

    assert_eq!(outcome, VersionOutcome::Conflict { current: Some(2) });
    assert_eq!(assert_consistent(&store, &key).await, 2);
    // The same content under a caller-chosen write id is recognised after a redelivery.
    let redelivered = Revision::update(&key, 2, json!({"by": "msg-7"}))
        .and_then(|c| c.with_write_id("msg-7"))
        .expect("ok");
    written(&store, &redelivered).await;
    let again = Revision::update(&key, 2, json!({"by": "msg-7"}))
        .and_then(|c| c.with_write_id("msg-7"))
        .expect("ok");
    assert_eq!(
        store.apply(&again).await.expect("apply"),
        VersionOutcome::Written { version: 3 },
        "the version with this write id is already there"
    );
    assert_eq!(assert_consistent(&store, &key).await, 3);
}

// ------------------------------------------- read_modify_write on a counter item: lost responses

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_modify_write_applies_its_change_once_when_many_versions_land_before_the_sdk_retry() {
    use dynamodb_exactly_once::counter::{Counter, CounterConfig};
    use dynamodb_exactly_once::versioning::RmwOutcome;
    use serde_json::Map;

    // Given writer A whose read-modify-write lands version 1 with its response lost, and whose
    // SDK retry is held until twelve other versioned writes have landed
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["CounterTable"]).await;
    let config = CounterConfig::builder(&tables["CounterTable"])
        .build()
        .expect("valid configuration");
    let other = Counter::new(setup.clone(), config.clone());
    let il = dev_testing::Interleaving::new();
    il.lose_response("A", dev_testing::At::op("UpdateItem"));
    il.pause_before("A", dev_testing::At::op("UpdateItem").attempt(2));
    let a = Counter::new(il.client("A", 3), config);
    let key = ItemKey::from_json(&json!({"PK": "acct#1", "SK": "settings"})).expect("key");
    let changes = Arc::new(AtomicUsize::new(0));
    let task = {
        let (key, changes) = (key.clone(), Arc::clone(&changes));
        tokio::spawn(async move {
            a.read_modify_write(&key, 5, |current| {
                changes.fetch_add(1, Ordering::SeqCst);
                let seen = current
                    .and_then(|c| c.get("edits"))
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                Map::from_iter([("edits".into(), json!(seen + 1))])
            })
            .await
        })
    };
    il.wait_paused("A").await.expect("A's retry is held");
    for version in 1..=12 {
        let label = Map::from_iter([("label".into(), json!(format!("l{version}")))]);
        let moved = other
            .put_versioned(&key, Some(version), &label)
            .await
            .expect("other write");
        assert_eq!(
            moved,
            VersionOutcome::Written {
                version: version + 1
            }
        );
    }

    // When the retry goes out
    il.release("A");
    let outcome = task.await.expect("task").expect("rmw");

    // Then A's change was applied once (its own write, version 1), not again on top
    assert!(
        matches!(outcome, RmwOutcome::Written { version: 1, .. }),
        "{outcome:?}"
    );
    assert_eq!(
        changes.load(Ordering::SeqCst),
        1,
        "the change was computed once"
    );
    let item = other.get_json(&key).await.expect("get").expect("item");
    assert_eq!(item["edits"], json!(1), "{item:?}");
    assert_eq!(item["ctr_version"], json!(13));
}

#[tokio::test]
async fn a_versioned_write_in_the_token_epoch_of_the_last_costs_one_request() {
    use dynamodb_exactly_once::counter::{Counter, CounterConfig};
    use serde_json::Map;

    // Given an item this writer wrote a version of a moment ago
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["CounterTable"]).await;
    let counting = FaultInjector::counting();
    let w = Counter::new(
        client_with(Some(counting.clone()), 3),
        CounterConfig::builder(&tables["CounterTable"])
            .build()
            .expect("valid configuration"),
    );
    let key = ItemKey::from_json(&json!({"PK": "acct#2", "SK": "settings"})).expect("key");
    let label = |l: &str| Map::from_iter([("label".into(), json!(l))]);
    let epoch = || dynamodb_exactly_once::__private::epoch_millis() / 30_000;
    let before = epoch();
    let first = w
        .put_versioned(&key, None, &label("a"))
        .await
        .expect("write");
    assert_eq!(first, VersionOutcome::Written { version: 1 });
    counting.reset_counts();

    // When it writes the next version
    let next = w
        .put_versioned(&key, Some(1), &label("b"))
        .await
        .expect("write");

    // Then that is one UpdateItem, not a failed guess of the token shape and a second one
    // (unless a token epoch began between the two writes)
    assert_eq!(next, VersionOutcome::Written { version: 2 });
    if epoch() == before {
        assert_eq!(counting.calls_of("UpdateItem"), 1);
    }
}

pub(crate) mod check;
