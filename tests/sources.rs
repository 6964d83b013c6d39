//! Ordered sources against DynamoDB Local: SQS FIFO order per message group and Kinesis
//! order per partition key (for the transaction coordinator), under injected failures.
//! (KPL-aggregated Kinesis records: `tests/kpl.rs`.)

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use common::*;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::batch::RecordFailure;
use dynamodb_exactly_once::txn::{Coordinator, TxConfig, TxOutcome};
use dynamodb_exactly_once::{Deadline, RecordResult};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::source::{Batch, SourceKind, SourcePosition, SourceRecord};
use dynamodb_exactly_once_lambda::Writer;
use serde_json::{json, Value};

// ------------------------------------------------------------------- transactions

/// The coordinator's tables and a writer on them.
pub(crate) async fn tx_tables(client: &Client) -> BTreeMap<String, String> {
    let tables =
        dev_testing::template_tables(client, &["TxTable", "AccountsTable", "DeadLetterTable"])
            .await;
    for (pk, balance) in [
        ("ann", 100),
        ("ben", 0),
        ("cat", 0),
        ("dan", 50),
        ("eve", 0),
    ] {
        client
            .put_item()
            .table_name(&tables["AccountsTable"])
            .item("PK", AttributeValue::S(pk.into()))
            .item("balance", AttributeValue::N(balance.to_string()))
            .send()
            .await
            .expect("seed");
    }
    tables
}

pub(crate) fn coordinator_on(
    client: Client,
    tables: &BTreeMap<String, String>,
) -> Writer<Coordinator> {
    // Patience must be at least twice the heartbeat interval (checked when built).
    let config = TxConfig::builder(&tables["TxTable"], [tables["AccountsTable"].as_str()])
        .lock_patience(Duration::from_millis(300))
        .heartbeat_every(Duration::from_millis(150))
        .build()
        .expect("valid configuration");
    Writer::builder("tx-coordinator", Coordinator::new(client.clone(), config))
        .dead_letters(DeadLetters::new(
            client,
            &tables["DeadLetterTable"],
            "tx-coordinator",
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer")
}

/// Move `amount` from `from` (only if it has that much) to `to`.
pub(crate) fn transfer(table: &str, tx_id: &str, from: &str, to: &str, amount: i64) -> Value {
    json!({"txId": tx_id, "requests": [
        {"Update": {"TableName": table, "Key": {"PK": from},
            "UpdateExpression": "SET #b = #b - :a", "ConditionExpression": "#b >= :a",
            "ExpressionAttributeNames": {"#b": "balance"}, "ExpressionAttributeValues": {":a": amount}}},
        {"Update": {"TableName": table, "Key": {"PK": to},
            "UpdateExpression": "SET #b = #b + :a",
            "ExpressionAttributeNames": {"#b": "balance"}, "ExpressionAttributeValues": {":a": amount}}}]})
}

/// Two interleaved keys (the paying account): in order, `ann-2` and `dan-2` find too little
/// money and roll back; `ann-3` commits. Out of order the outcomes differ.
fn transfers(table: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("ann", transfer(table, "ann-1", "ann", "ben", 60)),
        ("dan", transfer(table, "dan-1", "dan", "eve", 20)),
        ("ann", transfer(table, "ann-2", "ann", "cat", 50)),
        ("dan", transfer(table, "dan-2", "dan", "eve", 40)),
        ("ann", transfer(table, "ann-3", "ann", "ben", 10)),
    ]
}

/// Every request of transaction `tx_id` refused (as by a throttled or unreachable DynamoDB).
pub(crate) fn refuse_tx(tx_id: &'static str) -> FaultInjector {
    let needle = format!("\"{tx_id}\"");
    FaultInjector::by_request(move |_, body| {
        if body.contains(&needle) {
            Fault::Refuse
        } else {
            Fault::None
        }
    })
}

/// An SQS FIFO event of (message group, body) pairs, message ids `m<i>`.
fn fifo_event(messages: &[(&str, Value)]) -> Value {
    let with_ids: Vec<(String, &str, Value)> = messages
        .iter()
        .enumerate()
        .map(|(i, (group, body))| (format!("m{i}"), *group, body.clone()))
        .collect();
    fifo_event_with_ids(&with_ids)
}

/// An SQS FIFO event of (message id, message group, body).
fn fifo_event_with_ids(messages: &[(String, &str, Value)]) -> Value {
    let now = dynamodb_exactly_once::__private::epoch_millis().to_string();
    let records: Vec<Value> = messages
        .iter()
        .map(|(id, group, body)| {
            let body = body
                .as_str()
                .map_or_else(|| body.to_string(), str::to_string);
            json!({"eventSource": "aws:sqs", "messageId": id, "body": body,
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:Queue.fifo",
                "attributes": {"MessageGroupId": group, "SentTimestamp": now}})
        })
        .collect();
    json!({ "Records": records })
}

/// A Kinesis batch of (partition key, body) pairs, sequence numbers `0…0`, `0…1`, ...
fn kinesis_keyed(records: &[(&str, Value)]) -> Batch {
    let records = records
        .iter()
        .enumerate()
        .map(|(i, (key, body))| {
            SourceRecord::new(
                {
                    let mut position = SourcePosition::new(SourceKind::Kinesis, format!("{i:020}"));
                    position.source_arn =
                        Some("arn:aws:kinesis:us-east-1:123456789012:stream/Tx".into());
                    position.shard_id = Some("shardId-000000000000".into());
                    position.partition_key = Some((*key).to_string());
                    position
                },
                body.to_string().into_bytes(),
            )
        })
        .collect();
    Batch::new(SourceKind::Kinesis, records)
}

pub(crate) async fn balances(client: &Client, table: &str) -> BTreeMap<String, i64> {
    scan(client, table)
        .await
        .into_iter()
        .filter_map(|(id, item)| {
            let balance = item.get("balance").and_then(Value::as_i64)?;
            Some((id.trim_end_matches('|').to_string(), balance))
        })
        .collect()
}

fn held_back_after<O>(result: &RecordResult<O>) -> Option<&str> {
    match result {
        RecordResult::Failed(RecordFailure::HeldBack { after }) => Some(after),
        _ => None,
    }
}

fn expect_outcomes(results: &[RecordResult<TxOutcome>], expected: &[Option<TxOutcome>]) {
    for (i, (result, want)) in results.iter().zip(expected).enumerate() {
        match (result, want) {
            (RecordResult::Done(got), Some(want)) => assert_eq!(got, want, "record {i}"),
            (_, None) => {}
            (other, want) => panic!("record {i}: {other:?}, expected {want:?}"),
        }
    }
}

const ROLLED_BACK: TxOutcome = TxOutcome::RolledBack { request: 0 };

#[tokio::test]
async fn fifo_a_failed_transfer_holds_back_the_rest_of_its_group_and_only_that_group() {
    // Given two interleaved message groups, and DynamoDB refusing every call of ann-1
    let setup = client();
    let tables = tx_tables(&setup).await;
    let accounts = tables["AccountsTable"].clone();
    let messages = transfers(&accounts);
    let faulty = coordinator_on(client_with(Some(refuse_tx("ann-1")), 1), &tables);
    let batch = Batch::from_event(fifo_event(&messages)).expect("sqs fifo");

    // When the batch is handled
    let report = faulty.handle_batch(&batch, Deadline::none()).await;

    // Then ann's group stops at ann-1: its later messages are reported, not applied; dan's
    // group goes on in order
    assert_eq!(report.response.failed_ids(), ["m0", "m2", "m4"]);
    assert!(matches!(report.results[0], RecordResult::Failed(_)));
    assert_eq!(held_back_after(&report.results[2]), Some("m0"));
    assert_eq!(held_back_after(&report.results[4]), Some("m0"));
    expect_outcomes(
        &report.results,
        &[
            None,
            Some(TxOutcome::Committed),
            None,
            Some(ROLLED_BACK),
            None,
        ],
    );
    assert_eq!(report.summary.count("held_back"), 2);
    let now = balances(&setup, &accounts).await;
    assert_eq!((now["ann"], now["ben"], now["cat"]), (100, 0, 0), "{now:?}");
    assert_eq!((now["dan"], now["eve"]), (30, 20));

    // When SQS delivers ann's group again (in order) and DynamoDB answers
    let healthy = coordinator_on(setup.clone(), &tables);
    let again: Vec<(&str, Value)> = [0, 2, 4].map(|i| messages[i].clone()).to_vec();
    let report = healthy
        .handle_batch(
            &Batch::from_event(fifo_event(&again)).expect("sqs fifo"),
            Deadline::none(),
        )
        .await;

    // Then the group applies in its order: ann-2 finds 40 and rolls back, ann-3 commits
    assert!(report.response.failed_ids().is_empty());
    expect_outcomes(
        &report.results,
        &[
            Some(TxOutcome::Committed),
            Some(ROLLED_BACK),
            Some(TxOutcome::Committed),
        ],
    );
    let end = balances(&setup, &accounts).await;
    let want = [
        ("ann", 30),
        ("ben", 70),
        ("cat", 0),
        ("dan", 30),
        ("eve", 20),
    ];
    assert_eq!(end, want.map(|(k, v)| (k.to_string(), v)).into());
}

#[tokio::test]
async fn fifo_a_dead_lettered_message_lets_its_group_go_on_unless_its_dead_letter_fails() {
    let setup = client();
    let tables = tx_tables(&setup).await;
    let accounts = tables["AccountsTable"].clone();
    let messages = vec![
        ("ann", transfer(&accounts, "ann-1", "ann", "ben", 60)),
        ("ann", Value::from("{not json")),
        ("ann", transfer(&accounts, "ann-2", "ann", "cat", 50)),
    ];
    let batch = Batch::from_event(fifo_event(&messages)).expect("sqs fifo");

    // Given the dead-letter table refusing writes: the malformed message cannot be kept, so
    // it is reported, and the group stops behind it
    let dead_letters = tables["DeadLetterTable"].clone();
    let refuse_letters = FaultInjector::by_request(move |op, body| {
        if op == "PutItem" && body.contains(&dead_letters) {
            Fault::Refuse
        } else {
            Fault::None
        }
    });
    let w = coordinator_on(setup.clone(), &tables);
    let w = Writer::builder("tx-coordinator", w.protocol().clone())
        .dead_letters(DeadLetters::new(
            client_with(Some(refuse_letters), 1),
            &tables["DeadLetterTable"],
            "tx-coordinator",
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer");
    let report = w.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(report.response.failed_ids(), ["m1", "m2"]);
    assert_eq!(held_back_after(&report.results[2]), Some("m1"));
    expect_outcomes(&report.results, &[Some(TxOutcome::Committed), None, None]);

    // When the dead letter can be written, the malformed message counts as handled: the
    // group goes on
    let w = coordinator_on(setup.clone(), &tables);
    let report = w.handle_batch(&batch, Deadline::none()).await;
    assert!(report.response.failed_ids().is_empty());
    assert!(matches!(report.results[1], RecordResult::Rejected(_)));
    expect_outcomes(
        &report.results,
        &[Some(TxOutcome::AlreadyCommitted), None, Some(ROLLED_BACK)],
    );
    assert_eq!(
        w.dead_letter_table()
            .expect("a dead-letter table")
            .list()
            .await
            .expect("list")
            .len(),
        1
    );
}

#[tokio::test]
async fn fifo_random_interleavings_under_random_failures_apply_each_group_as_a_prefix() {
    // Groups of ratchet puts (one item per message, so nothing but the FIFO ordering keeps a
    // group's messages in order), interleaved at random; on every delivery DynamoDB refuses
    // the writes of a random third of the messages. After every delivery, each group's
    // applied messages must be a prefix of the group; redelivering what was reported (as SQS
    // FIFO does) ends with every message applied.
    use rand::{Rng, SeedableRng};
    use std::sync::{Arc, Mutex};

    let setup = client();
    let (_, tables) = ratchet_writer(setup.clone()).await;
    let refused: Arc<Mutex<Vec<String>>> = Arc::default();
    let plan = {
        let refused = Arc::clone(&refused);
        FaultInjector::by_request(move |_, body| {
            let hit = refused
                .lock()
                .map(|r| r.iter().any(|sk| body.contains(&format!("\"{sk}\""))))
                .unwrap_or(false);
            if hit {
                Fault::Refuse
            } else {
                Fault::None
            }
        })
    };
    let w = ratchet_writer_on(client_with(Some(plan), 1), &tables);
    const GROUPS: [&str; 3] = ["g0", "g1", "g2"];
    const PER_GROUP: usize = 5;
    for seed in 0..6u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        // A random interleaving of the groups' messages, each group in its own order.
        let mut next = [0usize; GROUPS.len()];
        let mut pending: Vec<(String, &str, Value)> = Vec::new();
        while pending.len() < GROUPS.len() * PER_GROUP {
            let g = rng.random_range(0..GROUPS.len());
            if next[g] == PER_GROUP {
                continue;
            }
            let sk = format!("s{seed}-{}-{}", GROUPS[g], next[g]);
            let body = put("fifo", &sk, 1, json!({"n": next[g]}));
            pending.push((format!("m-{sk}"), GROUPS[g], body));
            next[g] += 1;
        }
        for delivery in 0..30 {
            if pending.is_empty() {
                break;
            }
            let chosen: Vec<String> = pending
                .iter()
                .filter(|_| rng.random_bool(0.33))
                .map(|(id, _, _)| id.trim_start_matches("m-").to_string())
                .collect();
            *refused.lock().expect("plan") = chosen;
            let batch = Batch::from_event(fifo_event_with_ids(&pending)).expect("fifo");
            let report = w.handle_batch(&batch, Deadline::none()).await;
            let failed = report.response.failed_ids();
            pending.retain(|(id, _, _)| failed.contains(id));

            let items = scan(&setup, &tables["RatchetTable"]).await;
            for group in GROUPS {
                let applied: Vec<bool> = (0..PER_GROUP)
                    .map(|k| items.contains_key(&format!("fifo|s{seed}-{group}-{k}")))
                    .collect();
                let prefix = applied.iter().take_while(|a| **a).count();
                assert!(
                    applied[prefix..].iter().all(|a| !a),
                    "seed {seed}, delivery {delivery}: group {group} applied {applied:?}"
                );
            }
        }
        assert!(pending.is_empty(), "seed {seed}: never completed");
    }
}

#[tokio::test]
async fn fifo_fixture_groups_apply_in_order_when_nothing_fails() {
    // The fixture's interleaved groups through the handler: each group's second transfer
    // sees the first one's effect, every time.
    let setup = client();
    let tables = tx_tables(&setup).await;
    let w = coordinator_on(setup.clone(), &tables);
    let mut event = fixture("tx-fifo.json");
    for record in event["Records"].as_array_mut().into_iter().flatten() {
        let body = record["body"].as_str().unwrap_or_default();
        let renamed = body.replace("AccountsTable", &tables["AccountsTable"]);
        record["body"] = Value::from(renamed);
    }
    let batch = Batch::from_event(event).expect("fixture");
    let report = w.handle_batch(&batch, Deadline::none()).await;
    assert!(report.response.failed_ids().is_empty());
    expect_outcomes(
        &report.results,
        &[
            Some(TxOutcome::Committed),
            Some(TxOutcome::Committed),
            Some(ROLLED_BACK),
            Some(ROLLED_BACK),
            Some(TxOutcome::Committed),
        ],
    );
    let end = balances(&setup, &tables["AccountsTable"]).await;
    assert_eq!(
        (end["ann"], end["ben"], end["dan"], end["eve"]),
        (30, 70, 30, 20)
    );
}

#[tokio::test]
async fn kinesis_a_failed_transfer_holds_back_later_records_of_its_partition_key() {
    // Given two interleaved partition keys, and DynamoDB refusing every call of ann-1
    let setup = client();
    let tables = tx_tables(&setup).await;
    let accounts = tables["AccountsTable"].clone();
    let batch = kinesis_keyed(&transfers(&accounts));
    let faulty = coordinator_on(client_with(Some(refuse_tx("ann-1")), 1), &tables);

    // When the batch is handled
    let report = faulty.handle_batch(&batch, Deadline::none()).await;

    // Then ann's later records are reported, not applied; dan's key goes on
    let seq = |i: usize| format!("{i:020}");
    assert_eq!(report.response.failed_ids(), [seq(0), seq(2), seq(4)]);
    assert_eq!(held_back_after(&report.results[2]), Some(seq(0).as_str()));
    expect_outcomes(
        &report.results,
        &[
            None,
            Some(TxOutcome::Committed),
            None,
            Some(ROLLED_BACK),
            None,
        ],
    );
    let now = balances(&setup, &accounts).await;
    assert_eq!((now["ann"], now["dan"]), (100, 30), "{now:?}");

    // When Lambda restarts the shard from the lowest reported sequence number: every record
    // from there is delivered again, dan's too
    let healthy = coordinator_on(setup.clone(), &tables);
    let report = healthy.handle_batch(&batch, Deadline::none()).await;

    // Then dan's transfers are duplicates, ann's apply in order
    assert!(report.response.failed_ids().is_empty());
    expect_outcomes(
        &report.results,
        &[
            Some(TxOutcome::Committed),
            Some(TxOutcome::AlreadyCommitted),
            Some(ROLLED_BACK),
            Some(TxOutcome::AlreadyRolledBack { request: 0 }),
            Some(TxOutcome::Committed),
        ],
    );
    let end = balances(&setup, &accounts).await;
    let want = [
        ("ann", 30),
        ("ben", 70),
        ("cat", 0),
        ("dan", 30),
        ("eve", 20),
    ];
    assert_eq!(end, want.map(|(k, v)| (k.to_string(), v)).into());
}

#[tokio::test]
async fn fifo_past_the_deadline_every_group_is_deferred_and_nothing_applied() {
    let setup = client();
    let tables = tx_tables(&setup).await;
    let accounts = tables["AccountsTable"].clone();
    let w = coordinator_on(setup.clone(), &tables);
    let batch = Batch::from_event(fifo_event(&transfers(&accounts))).expect("sqs fifo");

    let report = w
        .handle_batch(&batch, Deadline::after(Duration::ZERO))
        .await;

    assert_eq!(report.response.failed_ids(), ["m0", "m1", "m2", "m3", "m4"]);
    assert_eq!(report.summary.count("deferred"), 5);
    let now = balances(&setup, &accounts).await;
    assert_eq!((now["ann"], now["dan"]), (100, 50));
}

// ------------------------------------------------------------------- standard queues

#[tokio::test]
async fn a_standard_queue_whose_messages_carry_a_group_keeps_coalescing() {
    // Given a standard queue (not `.fifo`) whose messages carry a MessageGroupId, as fair
    // queues' do, and two puts on one item
    let (w, tables) = ratchet_writer(client()).await;
    let now = dynamodb_exactly_once::__private::epoch_millis().to_string();
    let records: Vec<Value> = [
        put("u", "a", 1, json!({"v": 1})),
        put("u", "a", 2, json!({"v": 2})),
    ]
    .iter()
    .enumerate()
    .map(|(i, body)| {
        json!({"eventSource": "aws:sqs", "messageId": format!("m{i}"), "body": body.to_string(),
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:Queue",
                "attributes": {"MessageGroupId": "tenant-1", "SentTimestamp": now}})
    })
    .collect();
    let batch = Batch::from_event(json!({ "Records": records })).expect("sqs");

    // When the batch is handled
    let report = w.handle_batch(&batch, Deadline::none()).await;

    // Then it is not treated as FIFO: the item's puts coalesce into one write
    assert!(report.response.failed_ids().is_empty());
    assert_eq!(
        report.summary.write_calls, 1,
        "a standard queue's batch lost coalescing"
    );
    let items = scan(&client(), &tables["RatchetTable"]).await;
    assert_eq!(items["u|a"]["v"], json!(2));
}

#[tokio::test]
async fn fifo_consecutive_messages_on_one_item_are_one_write_and_a_failure_still_stops_the_group() {
    use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    let setup = client();
    let (_, tables) = ratchet_writer(setup.clone()).await;
    let puts = Arc::new(AtomicUsize::new(0));
    let refuse_b = Arc::new(AtomicBool::new(false));
    let plan = {
        let (puts, refuse_b) = (Arc::clone(&puts), Arc::clone(&refuse_b));
        FaultInjector::by_request(move |op, body| {
            if op != "PutItem" {
                return Fault::None;
            }
            puts.fetch_add(1, Ordering::SeqCst);
            match refuse_b.load(Ordering::SeqCst) && body.contains("\"runB\"") {
                true => Fault::Refuse,
                false => Fault::None,
            }
        })
    };
    let mut w = ratchet_writer_on(setup.clone(), &tables);
    let config = RatchetConfig::builder(&tables["RatchetTable"])
        .cache_keys(0) // every delivery goes to DynamoDB
        .build()
        .expect("valid configuration");
    w = crate::common::with_protocol(&w, Ratchet::new(client_with(Some(plan), 1), config));
    // Group c1: four messages on item runA, one on runB, two more on runA; group c2: one.
    let a = |ts: i64| ("c1", put("fifo", "runA", ts, json!({"n": ts})));
    let messages = vec![
        a(1),
        a(2),
        ("c2", put("fifo", "other", 1, json!({"n": 1}))),
        a(3),
        a(4),
        ("c1", put("fifo", "runB", 1, json!({"n": 1}))),
        a(5),
        a(6),
    ];
    let batch = Batch::from_event(fifo_event(&messages)).expect("fifo");

    // When nothing fails, each run of one item in a group is one write: 4 instead of 8
    let report = w.handle_batch(&batch, Deadline::none()).await;
    assert!(report.response.failed_ids().is_empty());
    assert_eq!(puts.load(Ordering::SeqCst), 4);
    let labels: Vec<&str> = report.results.iter().map(|r| r.label()).collect();
    assert_eq!(
        labels,
        [
            "superseded",
            "superseded",
            "applied",
            "superseded",
            "applied",
            "applied",
            "superseded",
            "applied"
        ]
    );

    // When runB's write fails, the group stops there: the run after it is held back (reported,
    // to come again as duplicates), the run before it and the other group are acknowledged
    refuse_b.store(true, Ordering::SeqCst);
    let report = w.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(report.response.failed_ids(), ["m5", "m6", "m7"]);
    assert!(matches!(
        &report.results[6],
        RecordResult::Failed(RecordFailure::HeldBack { after }) if after == "m5"
    ));
}

#[tokio::test]
async fn fifo_a_group_of_one_counter_item_is_one_update() {
    use dynamodb_exactly_once::counter::{Counter, CounterConfig};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["CounterTable", "DeadLetterTable"]).await;
    let updates = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&updates);
    let counting = FaultInjector::new(move |_, op| {
        if op == "UpdateItem" {
            seen.fetch_add(1, Ordering::SeqCst);
        }
        Fault::None
    });
    let counter = Counter::new(
        client_with(Some(counting), 1),
        CounterConfig::builder(&tables["CounterTable"])
            .build()
            .expect("valid configuration"),
    );
    let w = Writer::builder("counter-writer", counter)
        .dead_letters(DeadLetters::new(
            setup.clone(),
            &tables["DeadLetterTable"],
            "counter-writer",
        ))
        .build()
        .expect("valid writer");
    // A FIFO group per customer, five events each
    let event = |c: &str, k: usize| {
        let body = json!({"key": {"PK": c, "SK": "t"}, "add": {"n": 1}, "idempotencyKey": format!("{c}-{k}")});
        (if c == "ann" { "ann" } else { "ben" }, body)
    };
    let messages: Vec<(&str, Value)> = (0..5)
        .flat_map(|k| [event("ann", k), event("ben", k)])
        .collect();
    let batch = Batch::from_event(fifo_event(&messages)).expect("fifo");
    let report = w.handle_batch(&batch, Deadline::none()).await;
    assert!(report.response.failed_ids().is_empty());
    // One update per customer, not one per message
    assert_eq!(updates.load(Ordering::SeqCst), 2);
}
