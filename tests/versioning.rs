//! Versioned writes and the ratchet's history mode against DynamoDB Local: versions under
//! concurrent writers, crashes and lost responses at every call; history complete and identical
//! whatever the delivery, unprocessed rows retried.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextMut,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use common::*;
use dynamo_lambda::dead_letter::DeadLetters;
use dynamo_lambda::{Batch, Writer};
use dynamo_protocols::ddb::ItemKey;
use dynamo_protocols::ratchet::{Ratchet, RatchetConfig, RatchetOp, RatchetOutcome};
use dynamo_protocols::versioning::{
    Change, HistoryEntry, HistoryOp, Latest, VersionOutcome, Versioning, VersioningConfig,
};
use dynamo_protocols::{Deadline, RecordResult};
use dynamo_testing::{client, client_with, Fault, FaultInjector};
use lambda_runtime::{Context, LambdaEvent};
use proptest::prelude::*;
use serde_json::{json, Value};

// ------------------------------------------------------------------------- versioning helpers

fn versioning_config(tables: &BTreeMap<String, String>) -> VersioningConfig {
    VersioningConfig::new(&tables["VersionedTable"], &tables["VersionedHistoryTable"])
}

async fn versioned(client: Client) -> (Versioning, BTreeMap<String, String>) {
    let tables =
        dynamo_testing::template_tables(&client, &["VersionedTable", "VersionedHistoryTable"])
            .await;
    (Versioning::new(client, versioning_config(&tables)), tables)
}

fn doc(id: &str) -> ItemKey {
    ItemKey::from_json(&json!({ "PK": id })).expect("key")
}

async fn written(store: &Versioning, change: &Change) -> u64 {
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

fn create(key: &ItemKey, t: &str) -> Change {
    Change::create(key, json!({ "t": t })).expect("valid")
}

fn update(key: &ItemKey, expected: u64, t: &str) -> Change {
    Change::update(key, expected, json!({ "t": t })).expect("valid")
}

#[tokio::test]
async fn every_change_writes_the_next_version_or_says_why_not() {
    let (store, _) = versioned(client()).await;
    let key = doc("doc#1");
    let outcome = |change: Change| {
        let store = store.clone();
        async move { store.apply(&change).await.expect("apply") }
    };
    let conflict = |current| VersionOutcome::Conflict { current };

    assert_eq!(written(&store, &create(&key, "a")).await, 1);
    assert_eq!(written(&store, &update(&key, 1, "b")).await, 2);
    assert_eq!(outcome(update(&key, 1, "late")).await, conflict(Some(2)));
    assert_eq!(outcome(create(&key, "again")).await, conflict(Some(2)));
    assert_eq!(written(&store, &Change::delete(&key, 2)).await, 3);
    assert_eq!(
        store.get(&key).await.expect("get"),
        Latest::Deleted { version: 3 }
    );
    let deleted = VersionOutcome::Deleted { version: 3 };
    assert_eq!(outcome(update(&key, 3, "c")).await, deleted);
    assert_eq!(outcome(Change::delete(&key, 3)).await, deleted);
    // A create finds the tombstone; a recreate continues the sequence instead of reusing 1.
    assert_eq!(outcome(create(&key, "d")).await, deleted);
    let recreate = Change::recreate(&key, 3, json!({"t": "d"})).expect("valid");
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
    written(&store, &Change::delete(&key, 2)).await;
    written(&store, &Change::restore(&key, 3, 2)).await;

    let first = store.history(&key, 3, None).await.expect("page");
    let second = store.history(&key, 3, first.next).await.expect("page");

    let versions = |page: &dynamo_protocols::versioning::HistoryPage| -> Vec<u64> {
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
        let err = Change::create(&key, json!({ name: 1 })).expect_err("reserved");
        assert_eq!(err.code, "reserved_attribute");
        assert!(err.message.contains(name), "{err}");
    }
    let err = Change::update(&key, 1, json!({"PK": "doc#2"})).expect_err("mismatch");
    assert_eq!(err.code, "key_mismatch");
}

#[tokio::test]
async fn restore_writes_version_v_as_version_n_plus_one() {
    let (store, _) = versioned(client()).await;
    let key = doc("doc#r");
    written(
        &store,
        &Change::create(&key, json!({"t": "first", "n": 1})).expect("ok"),
    )
    .await;
    written(
        &store,
        &Change::update(&key, 1, json!({"t": "second"})).expect("ok"),
    )
    .await;
    written(&store, &Change::delete(&key, 2)).await;

    let restored = written(&store, &Change::restore(&key, 3, 1)).await;

    assert_eq!(restored, 4);
    let v1 = store.get_version(&key, 1).await.expect("get").expect("v1");
    let v4 = store.get_version(&key, 4).await.expect("get").expect("v4");
    assert_eq!(v4.op, HistoryOp::Restore);
    assert_eq!(v4.restored_from, Some(1));
    assert_eq!(v4.item, v1.item);
    let Latest::Live(latest) = store.get(&key).await.expect("get") else {
        panic!("the restore revived the item");
    };
    assert_eq!(Some(latest.item), v1.item);
    assert_eq!(
        store
            .apply(&Change::restore(&key, 4, 3))
            .await
            .expect("apply"),
        VersionOutcome::NoSuchVersion { version: 3 },
        "a delete has nothing to restore"
    );
    assert_eq!(
        store
            .apply(&Change::restore(&key, 4, 9))
            .await
            .expect("apply"),
        VersionOutcome::NoSuchVersion { version: 9 }
    );
    assert_eq!(
        store
            .apply(&Change::restore(&key, 2, 1))
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
        &Change::create(&key, json!({"t": "a"})).expect("ok"),
    )
    .await;
    let before = counting.calls();
    let cost = dynamo_protocols::ddb::Cost::default();

    let outcome = store
        .apply_counted(
            &Change::update(&key, 1, json!({"t": "b"})).expect("ok"),
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
            None => Change::create(key, json!({ "writers": [writer] })),
            Some(item) => {
                let mut writers = item.item["writers"].as_array().cloned().unwrap_or_default();
                writers.push(json!(writer));
                Change::update(key, item.version, json!({ "writers": writers }))
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
async fn scenario(store: &Versioning, name: &str, key: &ItemKey) -> (Change, u64) {
    match name {
        "create" => (create(key, "new"), 1),
        "recreate" => {
            written(store, &create(key, "old")).await;
            written(store, &Change::delete(key, 1)).await;
            let again = Change::recreate(key, 2, json!({"t": "again"})).expect("ok");
            (again, 3)
        }
        "update" => {
            written(store, &create(key, "old")).await;
            (update(key, 1, "new"), 2)
        }
        "delete" => {
            written(store, &create(key, "old")).await;
            (Change::delete(key, 1), 2)
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
            let first = Change::update(key, 1, json!({"t": "new"}))
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
            (Change::restore(key, 2, 1), 3)
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
        &Change::create(&key, json!({"t": "a"})).expect("ok"),
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
    let change = Change::update(&key, 1, json!({"t": "b"})).expect("ok");

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
        &Change::create(&key, json!({"t": "a"})).expect("ok"),
    )
    .await;
    let mine = Change::update(&key, 1, json!({"by": "me"})).expect("ok");
    let theirs = Change::update(&key, 1, json!({"by": "them"})).expect("ok");

    written(&store, &theirs).await;
    let outcome = store.apply(&mine).await.expect("apply");

    assert_eq!(outcome, VersionOutcome::Conflict { current: Some(2) });
    assert_eq!(assert_consistent(&store, &key).await, 2);
    // The same content under a caller-chosen write id is recognised after a redelivery.
    let redelivered = Change::update(&key, 2, json!({"by": "msg-7"}))
        .and_then(|c| c.with_write_id("msg-7"))
        .expect("ok");
    written(&store, &redelivered).await;
    let again = Change::update(&key, 2, json!({"by": "msg-7"}))
        .and_then(|c| c.with_write_id("msg-7"))
        .expect("ok");
    assert_eq!(
        store.apply(&again).await.expect("apply"),
        VersionOutcome::Written { version: 3 },
        "the version with this write id is already there"
    );
    assert_eq!(assert_consistent(&store, &key).await, 3);
}

// ------------------------------------------------------------------------- history mode helpers

async fn history_tables(client: &Client) -> BTreeMap<String, String> {
    dynamo_testing::template_tables(
        client,
        &["RatchetTable", "RatchetHistoryTable", "DeadLetterTable"],
    )
    .await
}

fn history_writer(client: Client, tables: &BTreeMap<String, String>) -> Writer<Ratchet> {
    let config = RatchetConfig {
        history_table: Some(tables["RatchetHistoryTable"].clone()),
        ..RatchetConfig::new(&tables["RatchetTable"])
    };
    Writer {
        function: "ratchet-writer".into(),
        protocol: Ratchet::new(client.clone(), config),
        dead_letters: DeadLetters::new(client, &tables["DeadLetterTable"], "ratchet-writer"),
        deadline_margin: Duration::from_secs(1),
    }
}

/// Every history row, keyed by `ItemKey|RecordVersion`.
async fn history_rows(
    client: &Client,
    table: &str,
) -> BTreeMap<String, serde_json::Map<String, Value>> {
    let mut out = BTreeMap::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("scan");
        for item in page.items.unwrap_or_default() {
            let row = dynamo_protocols::ddb::item::item_to_json(item).expect("json");
            let id = format!(
                "{}|{}",
                row["ItemKey"].as_str().unwrap_or_default(),
                row["RecordVersion"].as_str().unwrap_or_default()
            );
            out.insert(id, row);
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            return out;
        }
    }
}

// ------------------------------------------------------------------------- history mode

#[tokio::test]
async fn late_duplicate_and_deleted_records_all_land_in_history() {
    let client = client();
    let tables = history_tables(&client).await;
    let w = history_writer(client.clone(), &tables);
    let event = fixture("ratchet-history-sqs.json");

    let response = ratchet_writer::handler(LambdaEvent::new(event.clone(), Context::default()), &w)
        .await
        .expect("handler");

    assert!(response.failed_ids().is_empty());
    let rows = history_rows(&client, &tables["RatchetHistoryTable"]).await;
    let key = r#"{"PK":"User#4","SK":"Movie#H"}"#;
    let mut seen: Vec<(i64, String, Value)> = rows
        .values()
        .map(|r| {
            assert_eq!(r["ItemKey"], json!(key));
            let rating = r
                .get("Item")
                .map(|i| i["Rating"].clone())
                .unwrap_or(Value::Null);
            (
                r["Timestamp"].as_i64().unwrap_or_default(),
                r["Op"].as_str().unwrap_or_default().into(),
                rating,
            )
        })
        .collect();
    seen.sort_by_key(|a| a.0);
    let ts = |s: i64| 1_721_770_000_000 + s;
    assert_eq!(seen.len(), 5, "six records, one duplicate: {seen:?}");
    assert_eq!(
        seen[0],
        (ts(90_000), "put".into(), json!(1)),
        "the late put"
    );
    assert_eq!(seen[1].0, ts(100_000));
    assert_eq!(
        seen[2].0,
        ts(100_000),
        "equal ts, other content: its own row"
    );
    assert_eq!(
        seen[3],
        (ts(105_000), "put".into(), json!(5)),
        "the put older than the delete"
    );
    assert_eq!(
        seen[4],
        (ts(110_000), "delete".into(), Value::Null),
        "the delete"
    );
    // Sort keys sort as versions do.
    let sort_keys: Vec<&String> = rows.keys().collect();
    let mut by_version = sort_keys.clone();
    by_version.sort();
    assert_eq!(sort_keys, by_version);
    // The latest table holds the tombstone; a redelivery changes nothing in either table.
    let latest = scan(&client, &tables["RatchetTable"]).await;
    assert_eq!(latest["User#4|Movie#H"]["Deleted"], json!(true));
    let report = w
        .handle_batch(&Batch::from_event(event).expect("event"), Deadline::none())
        .await;
    assert!(report.response.failed_ids().is_empty());
    assert_eq!(report.summary.count("applied"), 0);
    assert_eq!(
        history_rows(&client, &tables["RatchetHistoryTable"]).await,
        rows
    );
}

#[tokio::test]
async fn a_record_is_acknowledged_only_when_its_history_row_and_latest_write_are_done() {
    let setup = client();
    let tables = history_tables(&setup).await;
    let refuse = |operation: &'static str| {
        FaultInjector::new(move |_, op| {
            if op == operation {
                Fault::Refuse
            } else {
                Fault::None
            }
        })
    };
    let bodies = [
        put("u", "a", 2, json!({"v": 2})),
        put("u", "a", 1, json!({"v": 1})),
        delete("u", "b", 1),
    ];
    let batch = sqs_batch(&bodies, 0);

    // History refused: nothing acknowledged, and the latest table is not written either.
    let no_history = history_writer(client_with(Some(refuse("BatchWriteItem")), 1), &tables);
    let report = no_history.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(report.response.failed_ids(), ["m0", "m1", "m2"]);
    assert!(
        scan(&setup, &tables["RatchetTable"]).await.is_empty(),
        "latest never ahead of history"
    );

    // Latest refused: history rows are written, records still reported.
    let no_latest = history_writer(client_with(Some(refuse("PutItem")), 1), &tables);
    let report = no_latest.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(report.response.failed_ids(), ["m0", "m1", "m2"]);
    let rows = history_rows(&setup, &tables["RatchetHistoryTable"]).await;
    assert_eq!(rows.len(), 3);

    // The redelivery completes both; the history is unchanged.
    let healthy = history_writer(setup.clone(), &tables);
    let report = healthy.handle_batch(&batch, Deadline::none()).await;
    assert!(report.response.failed_ids().is_empty());
    assert_eq!(
        history_rows(&setup, &tables["RatchetHistoryTable"]).await,
        rows
    );
    assert_eq!(
        scan(&setup, &tables["RatchetTable"]).await["u|a"]["v"],
        json!(2)
    );
}

#[tokio::test]
async fn unprocessed_history_rows_are_retried() {
    let setup = client();
    let tables = history_tables(&setup).await;
    // DynamoDB leaves 5 rows of each of the first three BatchWriteItem calls unprocessed.
    let unprocessed = Unprocessed::new(3, 5);
    let w = history_writer(unprocessed.client(), &tables);
    let bodies: Vec<Value> = (0..60)
        .map(|i| put("u", &format!("k{i}"), i, json!({"i": i})))
        .collect();

    let report = w
        .handle_batch(&sqs_batch(&bodies, 0), Deadline::none())
        .await;

    assert!(report.response.failed_ids().is_empty());
    assert_eq!(unprocessed.dropped(), 15);
    assert!(
        unprocessed.calls() > 3,
        "chunks of 25, 25, 10 and their retries: {}",
        unprocessed.calls()
    );
    assert_eq!(
        history_rows(&setup, &tables["RatchetHistoryTable"])
            .await
            .len(),
        60
    );
    assert_eq!(scan(&setup, &tables["RatchetTable"]).await.len(), 60);
}

#[tokio::test]
async fn rows_left_unprocessed_after_every_retry_are_reported_for_redelivery() {
    let setup = client();
    let tables = history_tables(&setup).await;
    // Every call leaves its last row unprocessed: the backoff runs out for one row per chunk.
    let unprocessed = Unprocessed::new(usize::MAX, 1);
    let w = history_writer(unprocessed.client(), &tables);
    let bodies = [
        put("u", "a", 1, json!({})),
        put("u", "b", 1, json!({})),
        put("u", "a", 2, json!({})),
    ];
    let batch = sqs_batch(&bodies, 0);

    let report = w.handle_batch(&batch, Deadline::none()).await;

    let failed = report.response.failed_ids();
    assert_eq!(failed.len(), 1, "one row never written: {failed:?}");
    assert_eq!(
        report
            .results
            .iter()
            .filter(|r| matches!(r, RecordResult::Failed(_)))
            .count(),
        1
    );
    // Lambda delivers it again to a healthy writer: every row and the winners are written.
    let healthy = history_writer(setup.clone(), &tables);
    let retry = Batch {
        kind: batch.kind,
        records: batch
            .records
            .iter()
            .filter(|r| failed.contains(&r.position.id))
            .cloned()
            .collect(),
    };
    assert!(healthy
        .handle_batch(&retry, Deadline::none())
        .await
        .response
        .failed_ids()
        .is_empty());
    assert_eq!(
        history_rows(&setup, &tables["RatchetHistoryTable"])
            .await
            .len(),
        3
    );
    let latest = scan(&setup, &tables["RatchetTable"]).await;
    assert_eq!(latest["u|a"]["Timestamp"], json!(2));
}

#[tokio::test]
async fn ratchet_history_table_is_read_from_the_environment() {
    use dynamo_lambda::settings::FromEnv;
    std::env::set_var("RATCHET_TABLE", "Latest");
    std::env::set_var("RATCHET_HISTORY_TABLE", "History");
    let ratchet = Ratchet::from_env(client()).expect("settings");
    assert_eq!(ratchet.config().history_table.as_deref(), Some("History"));
    std::env::set_var("RATCHET_HISTORY_TABLE", "Latest");
    assert!(
        Ratchet::from_env(client()).is_err(),
        "history must be another table"
    );
    std::env::remove_var("RATCHET_HISTORY_TABLE");
    assert_eq!(
        Ratchet::from_env(client())
            .expect("settings")
            .config()
            .history_table,
        None
    );
}

// ------------------------------------------------------------------------- history convergence

#[derive(Debug, Clone)]
struct GenRecord {
    key: u8,
    ts: i64,
    delete: bool,
    value: u8,
}

fn body(case: usize, r: &GenRecord) -> Value {
    let (pk, sk) = (format!("hcase{case}"), format!("k{}", r.key));
    if r.delete {
        delete(&pk, &sk, r.ts)
    } else {
        put(&pk, &sk, r.ts, json!({"v": r.value}))
    }
}

fn records() -> impl Strategy<Value = Vec<GenRecord>> {
    prop::collection::vec(
        (0u8..3, -2i64..4, prop::bool::weighted(0.25), 0u8..3).prop_map(
            |(key, ts, delete, value)| GenRecord {
                key,
                ts,
                delete,
                value,
            },
        ),
        1..30,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The history is the set of distinct records: whatever duplication, order and batch split,
    /// every distinct record has exactly its row (equal timestamps with other content included),
    /// and the latest table still converges to the winner of each key.
    #[test]
    fn history_is_the_set_of_distinct_records_whatever_the_delivery(
        records in records(),
        dups in prop::collection::vec(0usize..1000, 0..15),
        splits in prop::collection::vec(1usize..10, 1..8),
        seed in any::<u64>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            use rand::seq::SliceRandom;
            use rand::SeedableRng;
            static CASE: AtomicUsize = AtomicUsize::new(0);
            let case = CASE.fetch_add(1, Ordering::SeqCst);
            let client = client();
            let tables = property_tables(&client).await;
            let w = history_writer(client.clone(), &tables);

            let mut delivered: Vec<usize> = (0..records.len()).collect();
            delivered.extend(dups.iter().map(|d| d % records.len()));
            delivered.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
            let bodies: Vec<Value> = delivered.iter().map(|&i| body(case, &records[i])).collect();
            let mut start = 0;
            let mut splits = splits.into_iter().cycle();
            while start < bodies.len() {
                let end = (start + splits.next().unwrap_or(1)).min(bodies.len());
                let report = w.handle_batch(&sqs_batch(&bodies[start..end], start), Deadline::none()).await;
                assert!(report.response.failed_ids().is_empty());
                start = end;
            }

            let (model, winners) = model(case, &records, &w.protocol);
            let prefix = format!("{{\"PK\":\"hcase{case}\",");
            let history: BTreeMap<String, Value> = history_rows(&client, &tables["RatchetHistoryTable"]).await
                .into_iter()
                .filter(|(id, _)| id.starts_with(&prefix))
                .map(|(id, row)| (id, Value::Object(row)))
                .collect();
            assert_eq!(history, model);
            let latest: BTreeMap<String, (i128, String)> = scan(&client, &tables["RatchetTable"]).await
                .into_iter()
                .filter(|(k, _)| k.starts_with(&format!("hcase{case}|")))
                .map(|(k, item)| {
                    let ts = item["Timestamp"].as_i64().map(i128::from).unwrap_or_default();
                    (k, (ts, item["TieBreak"].as_str().unwrap_or_default().to_string()))
                })
                .collect();
            assert_eq!(latest, winners);
        });
    }
}

/// The model of a case: one history row per distinct record, built from the record alone, and
/// the winning version `(ts, tie-break)` of each key.
#[allow(clippy::type_complexity)]
fn model(
    case: usize,
    records: &[GenRecord],
    ratchet: &Ratchet,
) -> (BTreeMap<String, Value>, BTreeMap<String, (i128, String)>) {
    let mut rows = BTreeMap::new();
    let mut winners: BTreeMap<String, (i128, String)> = BTreeMap::new();
    for r in records {
        let parsed = ratchet
            .parse_record(body(case, r).to_string().as_bytes())
            .expect("valid");
        let item_key = parsed.key.canonical().to_string();
        let ts = parsed.ts.as_i128().expect("a number timestamp");
        let sort_key = match ts < 0 {
            true => format!("-{:020}#{}", ts + (1i128 << 63), parsed.token),
            false => format!("{:020}#{}", ts, parsed.token),
        };
        let mut row = json!({"ItemKey": item_key, "RecordVersion": sort_key,
            "Timestamp": i64::try_from(ts).expect("i64"), "TieBreak": parsed.token});
        match &parsed.op {
            RatchetOp::Put(item) => {
                let item = dynamo_protocols::ddb::item::item_to_json(item.clone()).expect("json");
                row["Op"] = json!("put");
                row["Item"] = Value::Object(item);
            }
            RatchetOp::Delete => row["Op"] = json!("delete"),
        }
        rows.insert(format!("{item_key}|{sort_key}"), row);
        let id = format!("hcase{case}|k{}", r.key);
        if winners
            .get(&id)
            .is_none_or(|w| (ts, parsed.token.as_str()) > (w.0, w.1.as_str()))
        {
            winners.insert(id, (ts, parsed.token.clone()));
        }
    }
    (rows, winners)
}

/// One set of history-mode tables shared by all property cases (cases use distinct keys).
async fn property_tables(client: &Client) -> BTreeMap<String, String> {
    static TABLES: Mutex<Option<BTreeMap<String, String>>> = Mutex::new(None);
    if let Some(t) = TABLES.lock().expect("lock").clone() {
        return t;
    }
    let t = history_tables(client).await;
    *TABLES.lock().expect("lock") = Some(t.clone());
    t
}

#[tokio::test]
async fn ratchet_without_history_writes_no_history() {
    let client = client();
    let tables = history_tables(&client).await;
    let w = ratchet_writer_on(client.clone(), &tables);
    assert_eq!(
        write_one(&w, put("u", "a", 1, json!({}))).await,
        RatchetOutcome::Applied
    );
    assert!(history_rows(&client, &tables["RatchetHistoryTable"])
        .await
        .is_empty());
}

// ------------------------------------------------------------------------- unprocessed rows

/// An SDK interceptor playing a throttled DynamoDB for `BatchWriteItem`: for the first `calls`
/// calls, the last `rows` put requests are taken out of the request before it is signed (so
/// they are not written) and returned in the response's `UnprocessedItems`.
#[derive(Debug, Clone)]
struct Unprocessed {
    remaining: Arc<AtomicUsize>,
    rows: usize,
    calls: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

/// What one `BatchWriteItem` call left unprocessed; `all`: the call was emptied (and sent as
/// a `ListTables`, since DynamoDB refuses an empty `BatchWriteItem`).
#[derive(Debug, Clone)]
struct Dropped {
    items: Value,
    all: bool,
}
impl Storable for Dropped {
    type Storer = StoreReplace<Self>;
}

impl Unprocessed {
    fn new(calls: usize, rows: usize) -> Self {
        Unprocessed {
            remaining: Arc::new(AtomicUsize::new(calls)),
            rows,
            calls: Arc::default(),
            dropped: Arc::default(),
        }
    }

    fn client(&self) -> Client {
        let config = client()
            .config()
            .to_builder()
            .interceptor(self.clone())
            .build();
        Client::from_conf(config)
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn dropped(&self) -> usize {
        self.dropped.load(Ordering::SeqCst)
    }

    /// Take the last `rows` requests of each table out of a `BatchWriteItem` body.
    fn split(&self, body: &mut Value) -> Dropped {
        let mut taken = serde_json::Map::new();
        if let Some(tables) = body["RequestItems"].as_object_mut() {
            for (table, requests) in tables.iter_mut() {
                let Some(requests) = requests.as_array_mut() else {
                    continue;
                };
                let rest = requests.split_off(requests.len().saturating_sub(self.rows));
                self.dropped.fetch_add(rest.len(), Ordering::SeqCst);
                taken.insert(table.clone(), Value::Array(rest));
            }
            tables.retain(|_, requests| requests.as_array().is_some_and(|r| !r.is_empty()));
        }
        let all = body["RequestItems"]
            .as_object()
            .is_none_or(|t| t.is_empty());
        Dropped {
            items: Value::Object(taken),
            all,
        }
    }
}

impl Intercept for Unprocessed {
    fn name(&self) -> &'static str {
        "Unprocessed"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let is_batch_write = request
            .headers()
            .get("x-amz-target")
            .is_some_and(|t| t.ends_with(".BatchWriteItem"));
        if !is_batch_write {
            return Ok(());
        }
        self.calls.fetch_add(1, Ordering::SeqCst);
        let take = self
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if take.is_err() {
            return Ok(());
        }
        let mut body: Value = serde_json::from_slice(request.body().bytes().unwrap_or_default())?;
        let dropped = self.split(&mut body);
        let bytes = match dropped.all {
            true => {
                let target = "DynamoDB_20120810.ListTables";
                request.headers_mut().insert("x-amz-target", target);
                b"{}".to_vec()
            }
            false => serde_json::to_vec(&body)?,
        };
        request
            .headers_mut()
            .insert("content-length", bytes.len().to_string());
        *request.body_mut() = SdkBody::from(bytes);
        cfg.interceptor_state().store_put(dropped);
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(dropped) = cfg.load::<Dropped>().cloned() else {
            return Ok(());
        };
        // The rows kept in the request were written; the answer lists the others.
        let response = context.response_mut();
        let bytes = serde_json::to_vec(&json!({ "UnprocessedItems": dropped.items }))?;
        response.headers_mut().remove("x-amz-crc32");
        response
            .headers_mut()
            .insert("content-length", bytes.len().to_string());
        *response.body_mut() = SdkBody::from(bytes);
        Ok(())
    }
}
