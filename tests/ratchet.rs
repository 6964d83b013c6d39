//! The timestamp ratchet against DynamoDB Local: tombstones, reads, tie-breaks, coalescing,
//! the handler on the `events/` fixtures, dead letters, transient failures and convergence.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use dynamo_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::ddb::item::ItemKey;
use dynamodb_exactly_once::ratchet::RatchetOutcome;
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once::RecordResult;
use dynamodb_exactly_once_lambda::Batch;
use lambda_runtime::{Context, LambdaEvent};
use proptest::prelude::*;
use serde_json::{json, Value};

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
        w.protocol
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
    let week = dynamodb_exactly_once::ddb::clock::epoch_seconds() + 7 * 24 * 3600;
    assert!(
        ttl <= week && ttl + 60 >= week,
        "TTL {ttl} is about a week from now ({week})"
    );
}

#[tokio::test]
async fn newer_put_replaces_tombstone() {
    let client = client();
    let (w, _) = ratchet_writer(client.clone()).await;
    write_one(&w, delete("u", "a", 20)).await;

    assert_eq!(
        write_one(&w, put("u", "a", 30, json!({"Rating":5}))).await,
        RatchetOutcome::Applied
    );

    let item = w
        .protocol
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
    write_one(&w, put("u", "a", 1, json!({"v":"a"}))).await;
    write_one(&w, put("u", "b", 1, json!({"v":"b"}))).await;
    write_one(&w, delete("u", "b", 2)).await;
    write_one(&w, put("u", "c", 1, json!({"v":"c"}))).await;

    assert!(w
        .protocol
        .get_json(&key("u", "b"), dynamodb_exactly_once::Read::Consistent)
        .await
        .expect("get")
        .is_none());
    assert!(w
        .protocol
        .get_json(&key("u", "a"), dynamodb_exactly_once::Read::Consistent)
        .await
        .expect("get")
        .is_some());
    let mut got: Vec<String> = w
        .protocol
        .batch_get(&[
            key("u", "a"),
            key("u", "b"),
            key("u", "c"),
            key("u", "missing"),
        ])
        .await
        .expect("batch get")
        .iter()
        .map(|i| i["SK"].as_str().unwrap_or_default().to_string())
        .collect();
    got.sort();
    assert_eq!(got, ["a", "c"]);
    let queried: Vec<String> = w
        .protocol
        .query_partition("PK", &json!("u"))
        .await
        .expect("query")
        .iter()
        .map(|i| i["SK"].as_str().unwrap_or_default().to_string())
        .collect();
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
            write_one(&w, records[i].clone()).await;
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
    write_one(&w, delete("u", "a", 7)).await;
    assert_eq!(
        write_one(&w, records[0].clone()).await,
        RatchetOutcome::Stale
    );
    let (w, _) = ratchet_writer(client.clone()).await;
    write_one(&w, records[0].clone()).await;
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
async fn each_malformed_kind_is_rejected_with_its_reason_and_kept() {
    let client = client();
    for source in ["sqs", "kinesis"] {
        let (w, tables) = ratchet_writer(client.clone()).await;
        let event = fixture(&format!("ratchet-{source}-malformed.json"));
        let batch = Batch::from_event(event.clone()).expect("fixture decodes");

        let response = w
            .handle(LambdaEvent::new(event, Context::default()))
            .await
            .expect("handler");

        assert!(
            response.failed_ids().is_empty(),
            "malformed records never block the source"
        );
        let letters = w.dead_letters.list().await.expect("list dead letters");
        let mut codes: Vec<&str> = letters.iter().map(|l| l.reason.code.as_str()).collect();
        codes.sort();
        assert_eq!(
            codes,
            [
                "bad_json",
                "invalid_timestamp",
                "key_mismatch",
                "missing_timestamp",
                "reserved_attribute",
                "unknown_op"
            ],
            "{source}"
        );
        for letter in &letters {
            let record = batch
                .records
                .iter()
                .find(|r| r.position.id == letter.position.id)
                .expect("the dead letter names its source record");
            assert_eq!(letter.payload, record.body, "payload kept byte for byte");
            assert_eq!(letter.position, record.position);
            assert!(!letter.reason.message.is_empty());
        }
        let items = scan(&client, &tables["RatchetTable"]).await;
        assert_eq!(
            items.keys().collect::<Vec<_>>(),
            ["User#4|Movie#D"],
            "the valid record was applied"
        );

        // Redelivery overwrites the same dead letters instead of piling up copies.
        w.handle_batch(&batch, Deadline::none()).await;
        assert_eq!(
            w.dead_letters.list().await.expect("list").len(),
            letters.len()
        );
    }
}

#[tokio::test]
async fn dead_letters_are_replayed_after_a_fix_and_removed() {
    // Given a writer configured with `Version` as its timestamp attribute: a payload setting
    // `Version` is rejected as reserved, and garbage is rejected as bad JSON.
    let client = client();
    let tables =
        dynamo_testing::template_tables(&client, &["RatchetTable", "DeadLetterTable"]).await;
    let mut misconfigured = ratchet_writer_on(client.clone(), &tables);
    misconfigured.protocol = dynamodb_exactly_once::ratchet::Ratchet::try_new(client.clone(), {
        let mut c = dynamodb_exactly_once::ratchet::RatchetConfig::new(&tables["RatchetTable"]);
        c.ts_attribute = "Version".into();
        c
    })
    .expect("valid configuration");
    let batch = sqs_batch(
        &[put("u", "a", 1, json!({"Version": 3})), json!("garbage")],
        0,
    );
    misconfigured.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(
        misconfigured.dead_letters.list().await.expect("list").len(),
        2
    );

    // When the configuration is fixed and the dead letters are replayed
    let fixed = ratchet_writer_on(client.clone(), &tables);
    let report = fixed
        .replay_dead_letters(&dynamodb_exactly_once_lambda::ReplayScope::all())
        .await
        .expect("replay");

    // Then the fixed record is applied and its dead letter removed; the garbage stays.
    assert_eq!(
        report.replayed,
        ["ratchet-writer|sqs|arn:aws:sqs:us-east-1:1:q|m0"]
    );
    assert_eq!(report.still_rejected.len(), 1);
    assert_eq!(report.still_rejected[0].1.code, "not_an_object");
    let left = fixed.dead_letters.list().await.expect("list");
    assert_eq!(
        left.iter()
            .map(|l| l.position.id.as_str())
            .collect::<Vec<_>>(),
        ["m1"]
    );
    let item = fixed
        .protocol
        .get_json(&key("u", "a"), dynamodb_exactly_once::Read::Consistent)
        .await
        .expect("get")
        .expect("applied");
    assert_eq!(item["Version"], json!(3));
}

#[tokio::test]
async fn oversized_item_and_schema_mismatch_are_dead_lettered() {
    let client = client();
    let (w, _) = ratchet_writer(client.clone()).await;
    let big = put("u", "big", 1, json!({"blob": "x".repeat(410 * 1024)}));
    let big_body = big.clone();
    // The table's key is PK+SK: DynamoDB rejects this key with a ValidationException.
    let wrong_schema = json!({"op":"put","key":{"PK":"u"},"ts":1,"item":{"v":1}});
    let fine = put("u", "ok", 1, json!({"v":1}));

    let report = w
        .handle_batch(&sqs_batch(&[big, wrong_schema, fine], 0), Deadline::none())
        .await;

    assert!(report.response.failed_ids().is_empty());
    let labels: Vec<&str> = report.results.iter().map(|r| r.label()).collect();
    assert_eq!(labels, ["invalid", "invalid", "applied"]);
    let letters = w.dead_letters.list().await.expect("list");
    let mut codes: Vec<&str> = letters.iter().map(|l| l.reason.code.as_str()).collect();
    codes.sort();
    assert_eq!(codes, ["item_too_large", "rejected_by_dynamodb"]);
    let kept = letters
        .iter()
        .find(|l| l.reason.code == "item_too_large")
        .expect("kept");
    assert_eq!(
        kept.payload,
        report_body(&big_body),
        "a payload over one item is kept whole, in parts"
    );
    assert!(kept.parts > 1);
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
    let tables =
        dynamo_testing::template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
    let mut w = ratchet_writer_on(client_with(Some(refuse_b.clone()), 1), &tables);
    w.protocol =
        dynamodb_exactly_once::ratchet::Ratchet::try_new(client_with(Some(refuse_b.clone()), 1), {
            let mut c = w.protocol.config().clone();
            c.concurrency = 1;
            c
        })
        .expect("valid configuration");
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
    let retry = Batch {
        kind: batch.kind,
        records: batch.records[..3].to_vec(),
    };
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
    let tables =
        dynamo_testing::template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
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
    let tables =
        dynamo_testing::template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
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
    let tables =
        dynamo_testing::template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
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
    let dir = dynamo_testing::workspace_root().join("events");
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

// ------------------------------------------------------------------------- convergence

#[derive(Debug, Clone)]
struct GenRecord {
    key: u8,
    ts: i64,
    delete: bool,
    value: u8,
}

fn body(case: usize, r: &GenRecord) -> Value {
    let pk = format!("case{case}");
    let sk = format!("k{}", r.key);
    if r.delete {
        delete(&pk, &sk, r.ts)
    } else {
        put(&pk, &sk, r.ts, json!({"v": r.value}))
    }
}

fn records() -> impl Strategy<Value = Vec<GenRecord>> {
    prop::collection::vec(
        (0u8..4, 0i64..6, prop::bool::weighted(0.25), 0u8..3).prop_map(
            |(key, ts, delete, value)| GenRecord {
                key,
                ts,
                delete,
                value,
            },
        ),
        1..40,
    )
}

/// Deliveries: duplicates (indices repeated), a shuffled order, and batch boundaries.
fn delivery() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, u64)> {
    (
        prop::collection::vec(0usize..1000, 0..20),
        prop::collection::vec(1usize..12, 1..10),
        any::<u64>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// The table is a function of the *set* of records: whatever duplication, order and batch
    /// split, every key holds the model's winner (greatest timestamp; at equal timestamps a
    /// delete, then the greater content hash), tombstones as specified.
    #[test]
    fn table_converges_to_the_model(records in records(), (dups, splits, seed) in delivery()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            use rand::seq::SliceRandom;
            use rand::SeedableRng;
            static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let case = CASE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let client = client();
            let tables = table_for_property(&client).await;
            let w = ratchet_writer_on(client.clone(), &tables);

            // Delivery: every record at least once, some more often, shuffled, split in batches.
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

            // The model: per key, the record with the greatest version.
            let mut model: BTreeMap<String, dynamodb_exactly_once::ratchet::RatchetRecord> = BTreeMap::new();
            for r in &records {
                let parsed = w.protocol.parse_record(body(case, r).to_string().as_bytes()).expect("valid");
                let id = format!("case{case}|k{}", r.key);
                let replace = model.get(&id).is_none_or(|m| parsed.version() > m.version());
                if replace {
                    model.insert(id, parsed);
                }
            }
            let table: BTreeMap<_, _> = scan(&client, &tables["RatchetTable"]).await
                .into_iter()
                .filter(|(k, _)| k.starts_with(&format!("case{case}|")))
                .collect();
            assert_eq!(table.keys().collect::<Vec<_>>(), model.keys().collect::<Vec<_>>());
            for (id, winner) in &model {
                let stored = &table[id];
                assert_eq!(stored["Timestamp"], winner.ts().to_json(), "{id}");
                assert_eq!(stored["TieBreak"], json!(winner.token()), "{id}");
                match winner.op() {
                    dynamodb_exactly_once::ratchet::RatchetOp::Delete => {
                        assert_eq!(stored["Deleted"], json!(true), "{id}");
                        assert!(stored["TTL"].is_number());
                        assert_eq!(stored.len(), 6, "a tombstone keeps only key, ts, token, flag, TTL: {stored:?}");
                    }
                    dynamodb_exactly_once::ratchet::RatchetOp::Put(item) => {
                        let expected = dynamodb_exactly_once::ddb::item::item_to_json(item.clone()).expect("json");
                        assert_eq!(stored, &expected, "{id}");
                    }
                    other => panic!("an op the model does not know: {other:?}"),
                }
            }
        });
    }
}

/// One pair of tables shared by all property cases of this process (cases use distinct keys).
async fn table_for_property(client: &aws_sdk_dynamodb::Client) -> BTreeMap<String, String> {
    static TABLES: std::sync::Mutex<Option<BTreeMap<String, String>>> = std::sync::Mutex::new(None);
    if let Some(t) = TABLES.lock().expect("lock").clone() {
        return t;
    }
    let t = dynamo_testing::template_tables(client, &["RatchetTable", "DeadLetterTable"]).await;
    *TABLES.lock().expect("lock") = Some(t.clone());
    t
}
