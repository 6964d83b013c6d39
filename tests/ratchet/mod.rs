//! The timestamp ratchet against DynamoDB Local: tombstones, reads, tie-breaks, coalescing,
//! the handler on the `events/` fixtures, dead letters, transient failures and convergence.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::ratchet::RatchetOutcome;
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once::ItemKey;
use dynamodb_exactly_once::RecordResult;
use dynamodb_exactly_once_lambda::Batch;
use futures::TryStreamExt;
use lambda_runtime::{Context, LambdaEvent};
use proptest::prelude::*;
use serde_json::{json, Value};

pub(crate) mod cache;
pub(crate) mod check;
mod convergence;
mod dead_letters;
pub(crate) mod history;

fn key(pk: &str, sk: &str) -> ItemKey {
    ItemKey::from_json(&json!({"PK":pk,"SK":sk})).expect("key")
}

#[tokio::test]
async fn older_put_cannot_revive_tombstone() {
    let client = client();
    let (w, tables) = ratchet_writer(client.clone()).await;
    assert_eq!(
        write_one(&w, put("u", "a", 10, json!({"Rating":1}))).await,
        RatchetOutcome::Applied
    );
    assert_eq!(
        write_one(&w, delete("u", "a", 20)).await,
        RatchetOutcome::Applied
    );

    assert_eq!(
        write_one(&w, put("u", "a", 15, json!({"Rating":2}))).await,
        RatchetOutcome::Stale
    );

    assert_eq!(
        w.protocol()
            .get_json(&key("u", "a"), dynamodb_exactly_once::Read::Consistent)
            .await
            .expect("get"),
        None
    );
    let raw = raw_item(
        &client,
        &tables["RatchetTable"],
        key("u", "a").to_item().expect("key"),
    )
    .await
    .expect("the tombstone is stored");
    let names: BTreeSet<&str> = raw.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from(["PK", "SK", "Timestamp", "TieBreak", "Deleted", "TTL"])
    );
    assert_eq!(raw["Deleted"], json!(true));
    assert_eq!(raw["Timestamp"], json!(20));
    let ttl = raw["TTL"].as_u64().expect("TTL is a number");
    let week = dynamodb_exactly_once::__private::epoch_seconds() + 7 * 24 * 3600;
    assert!(
        ttl <= week && ttl + 60 >= week,
        "TTL {ttl} is about a week from now ({week})"
    );
}

#[tokio::test]
async fn newer_put_replaces_tombstone() {
    let client = client();
    let (w, _) = ratchet_writer(client.clone()).await;
    let _ = write_one(&w, delete("u", "a", 20)).await;

    assert_eq!(
        write_one(&w, put("u", "a", 30, json!({"Rating":5}))).await,
        RatchetOutcome::Applied
    );

    let item = w
        .protocol()
        .get_json(&key("u", "a"), dynamodb_exactly_once::Read::Consistent)
        .await
        .expect("get")
        .expect("live item");
    assert_eq!(item["Rating"], json!(5));
    assert!(
        !item.contains_key("Deleted") && !item.contains_key("TTL"),
        "{item:?}"
    );
}

#[tokio::test]
async fn reads_suppress_tombstones_in_get_batch_get_and_query() {
    let client = client();
    let (w, _) = ratchet_writer(client.clone()).await;
    let _ = write_one(&w, put("u", "a", 1, json!({"v":"a"}))).await;
    let _ = write_one(&w, put("u", "b", 1, json!({"v":"b"}))).await;
    let _ = write_one(&w, delete("u", "b", 2)).await;
    let _ = write_one(&w, put("u", "c", 1, json!({"v":"c"}))).await;

    assert!(w
        .protocol()
        .get_json(&key("u", "b"), dynamodb_exactly_once::Read::Consistent)
        .await
        .expect("get")
        .is_none());
    assert!(w
        .protocol()
        .get_json(&key("u", "a"), dynamodb_exactly_once::Read::Consistent)
        .await
        .expect("get")
        .is_some());
    // Typed and streamed: each item decodes into the caller's type.
    #[derive(serde::Deserialize)]
    struct Row {
        #[serde(rename = "SK")]
        sk: String,
        v: String,
    }
    let keys = [
        key("u", "a"),
        key("u", "b"),
        key("u", "c"),
        key("u", "missing"),
    ];
    let mut got: Vec<(String, String)> = w
        .protocol()
        .batch_get::<Row>(&keys)
        .map_ok(|r| (r.sk, r.v))
        .try_collect()
        .await
        .expect("batch get");
    got.sort();
    assert_eq!(got, [("a".into(), "a".into()), ("c".into(), "c".into())]);
    let queried: Vec<String> = w
        .protocol()
        .query_partition::<Row>("PK", &json!("u"))
        .map_ok(|r| r.sk)
        .try_collect()
        .await
        .expect("query");
    assert_eq!(queried, ["a", "c"]);
}

#[tokio::test]
async fn redelivered_record_is_a_duplicate_and_older_one_stale() {
    let client = client();
    let (w, _) = ratchet_writer(client.clone()).await;
    assert_eq!(
        write_one(&w, put("u", "a", 5, json!({"v":1}))).await,
        RatchetOutcome::Applied
    );
    assert_eq!(
        write_one(&w, put("u", "a", 5, json!({"v":1}))).await,
        RatchetOutcome::Duplicate
    );
    assert_eq!(
        write_one(&w, put("u", "a", 4, json!({"v":9}))).await,
        RatchetOutcome::Stale
    );
}

#[tokio::test]
async fn equal_timestamps_resolve_the_same_way_in_every_order() {
    let records = [
        put("u", "a", 7, json!({"v":"x"})),
        put("u", "a", 7, json!({"v":"y"})),
        put("u", "a", 7, json!({"v":"z", "w": 1})),
    ];
    let orders: [[usize; 3]; 6] = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    let client = client();
    let mut finals = BTreeSet::new();
    for order in orders {
        let (w, tables) = ratchet_writer(client.clone()).await;
        for i in order {
            let _ = write_one(&w, records[i].clone()).await;
        }
        finals.insert(json!(scan(&client, &tables["RatchetTable"]).await).to_string());
    }
    assert_eq!(
        finals.len(),
        1,
        "every order converges to one item: {finals:?}"
    );

    // A delete at the same timestamp beats every put, in either order.
    let (w, _) = ratchet_writer(client.clone()).await;
    let _ = write_one(&w, delete("u", "a", 7)).await;
    assert_eq!(
        write_one(&w, records[0].clone()).await,
        RatchetOutcome::Stale
    );
    let (w, _) = ratchet_writer(client.clone()).await;
    let _ = write_one(&w, records[0].clone()).await;
    assert_eq!(
        write_one(&w, delete("u", "a", 7)).await,
        RatchetOutcome::Applied
    );
}

#[tokio::test]
async fn batch_writes_once_per_key_and_labels_every_record() {
    let injector = FaultInjector::counting();
    let client = client_with(Some(injector.clone()), 3);
    let (w, tables) = ratchet_writer(client.clone()).await;
    let before = injector.calls_of("PutItem");
    let batch = sqs_batch(
        &[
            put("u", "a", 1, json!({"v":1})),
            put("u", "a", 3, json!({"v":3})),
            put("u", "a", 3, json!({"v":3})),
            put("u", "a", 2, json!({"v":2})),
            put("u", "b", 1, json!({"v":1})),
            delete("u", "c", 9),
        ],
        0,
    );

    let report = w.handle_batch(&batch, Deadline::none()).await;

    assert_eq!(
        injector.calls_of("PutItem") - before,
        3,
        "one write per distinct key"
    );
    assert_eq!(report.summary.write_calls, 3);
    let labels: Vec<&str> = report.results.iter().map(|r| r.label()).collect();
    assert_eq!(
        labels,
        [
            "superseded",
            "applied",
            "duplicate",
            "superseded",
            "applied",
            "applied"
        ]
    );
    assert!(report.response.failed_ids().is_empty());
    let items = scan(&client, &tables["RatchetTable"]).await;
    assert_eq!(items["u|a"]["v"], json!(3));
    assert_eq!(items["u|c"]["Deleted"], json!(true));
}

#[tokio::test]
async fn handler_applies_the_sqs_and_kinesis_fixtures() {
    let client = client();
    for source in ["sqs", "kinesis"] {
        let (w, tables) = ratchet_writer(client.clone()).await;
        let mut labels = BTreeMap::new();
        for name in ["in-order", "out-of-order", "duplicates"] {
            let event = fixture(&format!("ratchet-{source}-{name}.json"));
            let batch = Batch::from_event(event.clone()).expect("fixture decodes");
            let response = w
                .handle(LambdaEvent::new(event, Context::default()))
                .await
                .expect("handler");
            assert!(
                response.failed_ids().is_empty(),
                "{source} {name}: {:?}",
                response.failed_ids()
            );
            // The same batch again: nothing changes, every record is acknowledged.
            let report = w.handle_batch(&batch, Deadline::none()).await;
            assert_eq!(
                report.summary.count("applied"),
                0,
                "{source} {name} redelivered"
            );
            for r in &report.results {
                *labels.entry(r.label()).or_insert(0) += 1;
            }
        }
        let items = scan(&client, &tables["RatchetTable"]).await;
        assert_eq!(items["User#1|Movie#A"]["Rating"], json!(1), "{source}");
        assert_eq!(items["User#1|Movie#A"]["Review"], json!("changed my mind"));
        assert_eq!(items["User#1|Movie#B"]["Rating"], json!(3));
        assert_eq!(
            items["User#2|Movie#Z"]["Deleted"],
            json!(true),
            "the delete beat the older put"
        );
        assert_eq!(items["User#3|Movie#C"]["Rating"], json!(5));
        assert_eq!(items.len(), 4);
        assert!(
            labels.get("stale").copied().unwrap_or(0)
                + labels.get("duplicate").copied().unwrap_or(0)
                > 0
        );
    }
}

#[tokio::test]
async fn transient_failures_are_reported_and_a_redelivery_completes() {
    // The first two PutItem calls are refused, as an unreachable or throttling DynamoDB would,
    // and the SDK does not retry: the pipeline must report them. Keys are written one at a time
    // (concurrency 1, in order of first appearance), so the failures hit keys a and b.
    let refuse_b = FaultInjector::new({
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        move |_, op| {
            // The first two PutItem calls fail, later ones pass.
            if op == "PutItem" && calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2 {
                Fault::Refuse
            } else {
                Fault::None
            }
        }
    });
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
    let mut w = ratchet_writer_on(client_with(Some(refuse_b.clone()), 1), &tables);
    w = crate::common::with_protocol(
        &w,
        dynamodb_exactly_once::ratchet::Ratchet::new(
            client_with(Some(refuse_b.clone()), 1),
            w.protocol()
                .config()
                .to_builder()
                .concurrency(1)
                .build()
                .expect("valid configuration"),
        ),
    );
    let bodies = [
        put("u", "a", 2, json!({"v":2})),
        put("u", "a", 1, json!({"v":1})),
        put("u", "b", 1, json!({"v":1})),
        put("u", "c", 1, json!({"v":1})),
    ];
    let batch = sqs_batch(&bodies, 0);

    let report = w.handle_batch(&batch, Deadline::none()).await;

    // Keys a (both records, also the superseded one) and b failed; c was written.
    assert_eq!(report.response.failed_ids(), ["m0", "m1", "m2"]);
    assert!(matches!(
        report.results[3],
        RecordResult::Done(RatchetOutcome::Applied)
    ));
    assert_eq!(refuse_b.injected(), 2);

    // Lambda delivers the failed records again: they complete.
    let retry = Batch::new(batch.kind, batch.records[..3].to_vec());
    let report = w.handle_batch(&retry, Deadline::none()).await;
    assert!(report.response.failed_ids().is_empty());
    let items = scan(&setup, &tables["RatchetTable"]).await;
    assert_eq!(items["u|a"]["v"], json!(2));
    assert_eq!(items.len(), 3);
}

#[tokio::test]
async fn kinesis_failures_are_reported_by_sequence_number() {
    let refuse_all_puts = FaultInjector::new(|_, op| {
        if op == "PutItem" {
            Fault::Refuse
        } else {
            Fault::None
        }
    });
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
    let w = ratchet_writer_on(client_with(Some(refuse_all_puts), 1), &tables);
    let event = fixture("ratchet-kinesis-in-order.json");
    let expected: Vec<String> = Batch::from_event(event.clone())
        .expect("decodes")
        .records
        .iter()
        .map(|r| r.position.id.clone())
        .collect();

    let response = w
        .handle(LambdaEvent::new(event, Context::default()))
        .await
        .expect("handler");

    let json = serde_json::to_value(&response).expect("json");
    let ids: Vec<&str> = json["batchItemFailures"]
        .as_array()
        .expect("batchItemFailures")
        .iter()
        .filter_map(|f| f["itemIdentifier"].as_str())
        .collect();
    assert_eq!(ids, expected.iter().map(String::as_str).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_dead_letter_that_cannot_be_written_is_reported_not_dropped() {
    let refuse_all_puts = FaultInjector::new(|_, op| {
        if op == "PutItem" {
            Fault::Refuse
        } else {
            Fault::None
        }
    });
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
    let w = ratchet_writer_on(client_with(Some(refuse_all_puts), 1), &tables);

    let report = w
        .handle_batch(&sqs_batch(&[json!("not a record")], 0), Deadline::none())
        .await;

    assert_eq!(report.response.failed_ids(), ["m0"]);
    assert_eq!(report.results[0].label(), "failed");
}

#[tokio::test]
async fn lost_response_is_retried_by_the_sdk_and_recognised_as_duplicate() {
    // DynamoDB applies the first PutItem, its response is lost; the SDK retries the same write.
    let lose_first = FaultInjector::new(|i, op| {
        if i == 0 && op == "PutItem" {
            Fault::LoseResponse
        } else {
            Fault::None
        }
    });
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
    let w = ratchet_writer_on(client_with(Some(lose_first.clone()), 3), &tables);

    let outcome = write_one(&w, put("u", "a", 1, json!({"v":1}))).await;

    assert_eq!(lose_first.injected(), 1);
    assert_eq!(
        outcome,
        RatchetOutcome::Duplicate,
        "the retry found its own write"
    );
    assert_eq!(
        scan(&setup, &tables["RatchetTable"]).await["u|a"]["v"],
        json!(1)
    );
}

#[tokio::test]
async fn nothing_is_started_after_the_deadline() {
    let client = client();
    let (w, tables) = ratchet_writer(client.clone()).await;
    let batch = sqs_batch(
        &[put("u", "a", 1, json!({})), put("u", "b", 1, json!({}))],
        0,
    );

    let report = w
        .handle_batch(
            &batch,
            Deadline::from_epoch_ms(1_700_000_000_000, std::time::Duration::ZERO),
        )
        .await;

    assert_eq!(report.response.failed_ids(), ["m0", "m1"]);
    assert_eq!(report.summary.count("deferred"), 2);
    assert!(scan(&client, &tables["RatchetTable"]).await.is_empty());
}

#[tokio::test]
async fn fixtures_round_trip_and_match_their_source() {
    let dir = dev_testing::workspace_root().join("events");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).expect("events/") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if !name.starts_with("ratchet-") {
            continue;
        }
        let batch = Batch::from_event(fixture(&name)).expect("decodes");
        let expected = if name.contains("kinesis") {
            "Kinesis"
        } else if name.contains("kafka") {
            "Kafka"
        } else {
            "Sqs"
        };
        assert_eq!(format!("{:?}", batch.kind), expected, "{name}");
        assert!(!batch.records.is_empty());
        seen += 1;
    }
    assert!(seen >= 6);
}

fn report_body(v: &Value) -> Vec<u8> {
    v.to_string().into_bytes()
}
