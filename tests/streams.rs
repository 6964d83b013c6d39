//! DynamoDB Streams against DynamoDB Local: a replica through the ratchet and aggregates
//! through the counter, fed by shuffled, duplicated, re-batched and parallel deliveries of a
//! random history that really ran on a source table; ratchet timestamps of 56 digits next to
//! number ones; the handlers on the `events/` fixtures and the partial batch response.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use common::*;
use dev_testing::events::stream_batch;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::counter::{Aggregation, Counter, CounterConfig};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig, RatchetOutcome, Replication};
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once::Item;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::{Batch, Writer};
use lambda_runtime::{Context, LambdaEvent};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

pub(crate) const TABLES: [&str; 4] = [
    "OrdersTable",
    "OrdersReplicaTable",
    "OrdersTotalsTable",
    "DeadLetterTable",
];

pub(crate) fn replica_writer(client: Client, tables: &BTreeMap<String, String>) -> Writer<Ratchet> {
    let config = RatchetConfig::builder(&tables["OrdersReplicaTable"])
        .replication(Replication::default())
        .build()
        .expect("valid configuration");
    Writer::builder("orders-replica", Ratchet::new(client.clone(), config))
        .dead_letters(DeadLetters::new(
            client,
            &tables["DeadLetterTable"],
            "orders-replica",
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer")
}

fn totals_writer(client: Client, tables: &BTreeMap<String, String>) -> Writer<Counter> {
    let config = CounterConfig::builder(&tables["OrdersTotalsTable"])
        .aggregation(
            Aggregation::builder("PK")
                .count("orders")
                .sum("amount", "Amount")
                .build()
                .expect("valid aggregation"),
        )
        .build()
        .expect("valid configuration");
    Writer::builder("orders-totals", Counter::new(client.clone(), config))
        .dead_letters(DeadLetters::new(
            client,
            &tables["DeadLetterTable"],
            "orders-totals",
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer")
}

/// One change as a stream record, typed images kept as they are.
pub(crate) fn stream_record(
    seq: &str,
    name: &str,
    key: &Item,
    new: Option<&Item>,
    old: Option<&Item>,
) -> Value {
    let typed =
        |item: &Item| serde_json::to_value(serde_dynamo::Item::from(item.clone())).expect("typed");
    let mut change = json!({
        "ApproximateCreationDateTime": (dynamodb_exactly_once::__private::epoch_millis() / 1000) as f64,
        "Keys": typed(key), "SequenceNumber": seq, "SizeBytes": 100,
        "StreamViewType": "NEW_AND_OLD_IMAGES"});
    if let Some(new) = new {
        change["NewImage"] = typed(new);
    }
    if let Some(old) = old {
        change["OldImage"] = typed(old);
    }
    json!({"eventID": format!("evt-{seq}"), "eventName": name, "eventVersion": "1.1",
        "eventSource": "aws:dynamodb", "awsRegion": "us-east-1", "dynamodb": change,
        "eventSourceARN": dev_testing::events::STREAM_ARN})
}

pub(crate) fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// A random order item: sets, binaries, 38-digit numbers, and attributes of other protocols
/// that a replica must not copy.
fn random_item(rng: &mut StdRng, pk: &str, sk: &str) -> Item {
    let mut item: Item = HashMap::from([
        ("PK".into(), s(pk)),
        ("SK".into(), s(sk)),
        (
            "Amount".into(),
            AttributeValue::N(rng.random_range(1..100).to_string()),
        ),
        (
            "Status".into(),
            s(["new", "paid", "sent"][rng.random_range(0..3)]),
        ),
    ]);
    if rng.random_bool(0.5) {
        let tags = (0..rng.random_range(1..4))
            .map(|i| format!("t{i}"))
            .collect();
        item.insert("Tags".into(), AttributeValue::Ss(tags));
    }
    if rng.random_bool(0.3) {
        item.insert(
            "Blob".into(),
            AttributeValue::B(Blob::new(vec![rng.random::<u8>(), 0, 255])),
        );
    }
    if rng.random_bool(0.3) {
        let big = format!("{}{:037}", rng.random_range(1..9), rng.random::<u64>());
        item.insert("Big".into(), AttributeValue::N(big));
    }
    if rng.random_bool(0.3) {
        item.insert("_txLock".into(), s("tx-1"));
        item.insert("ctr_bucket".into(), s("L1_2"));
    }
    item
}

/// A random history run on the source table: the stream records it produced, in order.
/// Sequence numbers start just above `u64` and cross from 20 to 21 digits.
async fn run_history(client: &Client, table: &str, seed: u64, steps: usize) -> Vec<Value> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut state: BTreeMap<(String, String), Item> = BTreeMap::new();
    let mut seq: u128 = 99_999_999_999_999_999_950;
    let mut records = Vec::new();
    for _ in 0..steps {
        let (pk, sk) = (
            format!("c{}", rng.random_range(0..3)),
            format!("o{}", rng.random_range(0..4)),
        );
        let key: Item = HashMap::from([("PK".into(), s(&pk)), ("SK".into(), s(&sk))]);
        seq += rng.random_range(1..5);
        let id = (pk.clone(), sk.clone());
        let old = state.get(&id).cloned();
        if old.is_some() && rng.random_bool(0.3) {
            client
                .delete_item()
                .table_name(table)
                .set_key(Some(key.clone()))
                .send()
                .await
                .expect("delete");
            state.remove(&id);
            records.push(stream_record(
                &seq.to_string(),
                "REMOVE",
                &key,
                None,
                old.as_ref(),
            ));
        } else {
            let new = random_item(&mut rng, &pk, &sk);
            client
                .put_item()
                .table_name(table)
                .set_item(Some(new.clone()))
                .send()
                .await
                .expect("put");
            let name = if old.is_some() { "MODIFY" } else { "INSERT" };
            records.push(stream_record(
                &seq.to_string(),
                name,
                &key,
                Some(&new),
                old.as_ref(),
            ));
            state.insert(id, new);
        }
    }
    records
}

/// What Lambda may do to a stream: every record at least once, some several times, in any
/// order, in batches of any size, two invocations at once.
async fn deliver<P: dynamodb_exactly_once::Protocol>(
    writer: &Writer<P>,
    records: &[Value],
    rng: &mut StdRng,
) {
    let mut delivery: Vec<Value> = records.to_vec();
    for r in records {
        if rng.random_bool(0.4) {
            delivery.push(r.clone());
        }
    }
    delivery.shuffle(rng);
    let mut batches: Vec<Vec<Value>> = Vec::new();
    while !delivery.is_empty() {
        let n = rng.random_range(1..=12).min(delivery.len());
        batches.push(delivery.drain(..n).collect());
    }
    let (even, odd): (Vec<_>, Vec<_>) = batches
        .into_iter()
        .enumerate()
        .partition(|(i, _)| i % 2 == 0);
    let run = |part: Vec<(usize, Vec<Value>)>| async move {
        for (_, batch) in part {
            let report = writer
                .handle_batch(&stream_batch(&batch), Deadline::none())
                .await;
            assert!(
                report.response.failed_ids().is_empty(),
                "{:?}",
                report.summary
            );
            assert_eq!(
                report.summary.outcomes.get("invalid"),
                None,
                "{:?}",
                report.summary
            );
        }
    };
    futures::join!(run(even), run(odd));
}

/// Every item of a table, typed, by `PK|SK`, sets sorted (DynamoDB keeps no set order).
pub(crate) async fn typed_scan(client: &Client, table: &str) -> BTreeMap<String, Item> {
    let items: Vec<Item> = client
        .scan()
        .table_name(table)
        .consistent_read(true)
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .expect("scan");
    items
        .into_iter()
        .map(|mut item| {
            for v in item.values_mut() {
                match v {
                    AttributeValue::Ss(x) | AttributeValue::Ns(x) => x.sort(),
                    AttributeValue::Bs(x) => x.sort_by(|a, b| a.as_ref().cmp(b.as_ref())),
                    _ => {}
                }
            }
            let part = |n: &str| {
                item.get(n)
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default()
            };
            (format!("{}|{}", part("PK"), part("SK")), item)
        })
        .collect()
}

#[tokio::test]
async fn replica_converges_to_the_source_whatever_the_delivery() {
    let client = client();
    for case in 0..6u64 {
        let seed = 0x5eed_0000 + case;
        println!("replica case {case}: seed {seed:#x}");
        let tables = dev_testing::template_tables(&client, &TABLES).await;
        let records = run_history(&client, &tables["OrdersTable"], seed, 60).await;
        let writer = replica_writer(client.clone(), &tables);
        let mut rng = StdRng::seed_from_u64(seed ^ 0xde1);
        deliver(&writer, &records, &mut rng).await;

        let source = typed_scan(&client, &tables["OrdersTable"]).await;
        let replica = typed_scan(&client, &tables["OrdersReplicaTable"]).await;
        let skip = Replication::default();
        let config = writer.protocol().config();
        let expected: BTreeMap<String, Item> = source
            .into_iter()
            .map(|(id, item)| {
                (
                    id,
                    item.into_iter()
                        .filter(|(n, _)| !skip.skips(config, n))
                        .collect(),
                )
            })
            .collect();
        let live: BTreeMap<String, Item> = replica
            .iter()
            .filter(|(_, item)| item.get("Deleted") != Some(&AttributeValue::Bool(true)))
            .map(|(id, item)| {
                let copy = item
                    .iter()
                    .filter(|(n, _)| *n != "Timestamp" && *n != "TieBreak")
                    .map(|(n, v)| (n.clone(), v.clone()))
                    .collect();
                (id.clone(), copy)
            })
            .collect();
        assert_eq!(live, expected, "seed {seed:#x}");
        // Each replica item carries the sequence number of its key's last change.
        let mut last: BTreeMap<String, String> = BTreeMap::new();
        for r in &records {
            let id = format!(
                "{}|{}",
                r["dynamodb"]["Keys"]["PK"]["S"].as_str().unwrap_or(""),
                r["dynamodb"]["Keys"]["SK"]["S"].as_str().unwrap_or("")
            );
            last.insert(
                id,
                r["dynamodb"]["SequenceNumber"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            );
        }
        for (id, item) in &replica {
            let stored = item["Timestamp"].as_s().expect("a digit string above u64");
            assert_eq!(stored.len(), 64, "{id}");
            assert_eq!(
                stored.trim_start_matches('0'),
                last[id],
                "{id}, seed {seed:#x}"
            );
        }
    }
}

#[tokio::test]
async fn aggregates_stay_exact_under_redelivery() {
    let client = client();
    for case in 0..6u64 {
        let seed = 0xa66_0000 + case;
        println!("aggregate case {case}: seed {seed:#x}");
        let tables = dev_testing::template_tables(&client, &TABLES).await;
        let records = run_history(&client, &tables["OrdersTable"], seed, 60).await;
        let writer = totals_writer(client.clone(), &tables);
        let mut rng = StdRng::seed_from_u64(seed ^ 0xa66);
        deliver(&writer, &records, &mut rng).await;
        // A whole redelivery after the fact changes nothing.
        deliver(&writer, &records, &mut rng).await;

        let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for r in &records {
            let pk = r["dynamodb"]["Keys"]["PK"]["S"]
                .as_str()
                .unwrap_or("")
                .to_string();
            expected.entry(pk).or_default();
        }
        for item in typed_scan(&client, &tables["OrdersTable"]).await.values() {
            let e = expected
                .entry(item["PK"].as_s().expect("pk").clone())
                .or_default();
            e.0 += 1;
            e.1 += item["Amount"]
                .as_n()
                .expect("amount")
                .parse::<i64>()
                .expect("int");
        }
        let totals: BTreeMap<String, (i64, i64)> =
            typed_scan(&client, &tables["OrdersTotalsTable"])
                .await
                .into_values()
                .map(|item| {
                    let n = |name: &str| {
                        item[name]
                            .as_n()
                            .expect("counter")
                            .parse::<i64>()
                            .expect("int")
                    };
                    (
                        item["PK"].as_s().expect("pk").clone(),
                        (n("orders"), n("amount")),
                    )
                })
                .collect();
        assert_eq!(totals, expected, "seed {seed:#x}");
    }
}

const KINESIS_A: &str = "49590338271490256608559692538361571095921575989136588898";
const KINESIS_B: &str = "49590338271490256608559692538361571095921575989136588899";

fn big_put(sk: &str, ts: &str, v: &str) -> Value {
    json!({"op":"put","key":{"PK":"tokens","SK":sk},"ts":ts,"item":{"v":v}})
}

#[tokio::test]
async fn timestamps_of_56_digits_order_correctly_after_number_ones() {
    let client = client();
    let (w, tables) = ratchet_writer(client.clone()).await;
    // An item stored with a number timestamp (as every earlier version stored them).
    assert_eq!(
        write_one(&w, put("tokens", "a", i64::MAX, json!({"v":"number"}))).await,
        RatchetOutcome::Applied
    );
    assert_eq!(
        write_one(&w, big_put("a", KINESIS_A, "A")).await,
        RatchetOutcome::Applied
    );
    assert_eq!(
        write_one(&w, big_put("a", KINESIS_B, "B")).await,
        RatchetOutcome::Applied
    );
    assert_eq!(
        write_one(&w, big_put("a", KINESIS_A, "A")).await,
        RatchetOutcome::Stale
    );
    assert_eq!(
        write_one(&w, big_put("a", KINESIS_B, "B")).await,
        RatchetOutcome::Duplicate
    );
    // No number can undo a string timestamp, not even the greatest one stored as a number.
    let max = json!({"op":"put","key":{"PK":"tokens","SK":"a"},"ts":u64::MAX,"item":{"v":"max"}});
    assert_eq!(write_one(&w, max).await, RatchetOutcome::Stale);
    let key = HashMap::from([("PK".into(), s("tokens")), ("SK".into(), s("a"))]);
    let stored = raw_item(&client, &tables["RatchetTable"], key)
        .await
        .expect("item");
    assert_eq!(stored["v"], json!("B"));
    assert_eq!(
        stored["Timestamp"],
        json!(format!("{KINESIS_B:0>64}")),
        "a 64-digit string"
    );

    // 55 digits < 56 digits, though "9…" > "1…" bytewise: the padding keeps the order.
    let nines = "9".repeat(55);
    let ten_pow_55 = format!("1{}", "0".repeat(55));
    assert_eq!(
        write_one(&w, big_put("b", &ten_pow_55, "56 digits")).await,
        RatchetOutcome::Applied
    );
    assert_eq!(
        write_one(&w, big_put("b", &nines, "55 digits")).await,
        RatchetOutcome::Stale
    );
    // A delete at a big timestamp: an older put cannot revive the item, a newer one can.
    let del =
        json!({"op":"delete","key":{"PK":"tokens","SK":"b"},"ts":format!("1{}1", "0".repeat(54))});
    assert_eq!(write_one(&w, del).await, RatchetOutcome::Applied);
    assert_eq!(
        write_one(&w, big_put("b", &ten_pow_55, "56 digits")).await,
        RatchetOutcome::Stale
    );
    assert_eq!(
        write_one(&w, big_put("b", &format!("2{}", "0".repeat(55)), "back")).await,
        RatchetOutcome::Applied
    );
}

fn fixture_event(name: &str) -> LambdaEvent<Value> {
    LambdaEvent::new(fixture(name), Context::default())
}

#[tokio::test]
async fn the_fixture_replicates_and_totals_and_a_redelivery_changes_nothing() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let replica = replica_writer(client.clone(), &tables);
    let totals = totals_writer(client.clone(), &tables);
    for name in [
        "orders-dynamodb-stream.json",
        "orders-dynamodb-stream-redelivered.json",
    ] {
        let response = replica.handle(fixture_event(name)).await.expect("replica");
        assert!(response.failed_ids().is_empty(), "{name}");
        let response = totals.handle(fixture_event(name)).await.expect("totals");
        assert!(response.failed_ids().is_empty(), "{name}");
    }
    let rows = typed_scan(&client, &tables["OrdersReplicaTable"]).await;
    assert_eq!(rows["alice|o1"]["Amount"], AttributeValue::N("45".into()));
    assert_eq!(
        rows["alice|o1"]["Tags"],
        AttributeValue::Ss(vec!["gift".into(), "rush".into()])
    );
    assert_eq!(rows["alice|o2"]["Deleted"], AttributeValue::Bool(true));
    assert!(
        !rows["bob|o1"].contains_key("_txLock"),
        "protocol attributes are not copied"
    );
    let sums = typed_scan(&client, &tables["OrdersTotalsTable"]).await;
    let n = |id: &str, name: &str| sums[id][name].as_n().cloned().unwrap_or_default();
    assert_eq!(
        (n("alice|", "orders"), n("alice|", "amount")),
        ("1".into(), "45".into())
    );
    assert_eq!(
        (n("bob|", "orders"), n("bob|", "amount")),
        ("1".into(), "7".into())
    );
}

#[tokio::test]
async fn failed_writes_are_reported_by_sequence_number() {
    let tables = dev_testing::template_tables(&client(), &TABLES).await;
    // Every PutItem refused (no SDK retry): every record must come back to Lambda.
    let faults = FaultInjector::new(|_, op| {
        if op == "PutItem" {
            Fault::Refuse
        } else {
            Fault::None
        }
    });
    let writer = replica_writer(client_with(Some(faults), 1), &tables);
    let event = fixture_event("orders-dynamodb-stream.json");
    let ids: Vec<String> = event.payload["Records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            r["dynamodb"]["SequenceNumber"]
                .as_str()
                .expect("seq")
                .to_string()
        })
        .collect();
    let response = writer.handle(event).await.expect("response");
    let json = serde_json::to_value(&response).expect("json");
    let mut reported: Vec<String> = json["batchItemFailures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| f["itemIdentifier"].as_str().expect("id").to_string())
        .collect();
    reported.sort();
    assert_eq!(reported, ids);
}

#[tokio::test]
async fn changes_without_a_mapping_are_kept_not_applied() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let mut writer = replica_writer(client.clone(), &tables);
    writer = crate::common::with_protocol(
        &writer,
        Ratchet::new(
            client.clone(),
            RatchetConfig::builder(&tables["OrdersReplicaTable"])
                .build()
                .expect("valid configuration"),
        ),
    );
    let batch: Batch = Batch::from_event(fixture("orders-dynamodb-stream.json")).expect("event");
    let report = writer.handle_batch(&batch, Deadline::none()).await;
    assert!(report.response.failed_ids().is_empty());
    assert_eq!(report.summary.outcomes.get("invalid"), Some(&5));
    let kept = writer
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    assert_eq!(kept.len(), 5);
    assert!(kept
        .iter()
        .all(|l| l.reason.code.as_str() == "no_change_mapping"));
    assert!(typed_scan(&client, &tables["OrdersReplicaTable"])
        .await
        .is_empty());
    // Configured later, a replay applies them.
    writer = crate::common::with_protocol(
        &writer,
        replica_writer(client.clone(), &tables).protocol().clone(),
    );
    let replay = writer
        .replay_dead_letters(
            writer.dead_letter_table().expect("a dead-letter table"),
            &dynamodb_exactly_once_lambda::ReplayScope::all(),
        )
        .await
        .expect("replay");
    assert_eq!(replay.replayed.len(), 5, "{replay:?}");
    assert_eq!(
        typed_scan(&client, &tables["OrdersReplicaTable"])
            .await
            .len(),
        3
    );
}
