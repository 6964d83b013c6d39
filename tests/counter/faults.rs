//! Issue 9, beyond the window: a record DynamoDB refuses is isolated from its chunk (and on
//! replay), conflicting duplicates are reported as such, and a versioned write whose response
//! was lost is recognised as written by the SDK's retry.

use super::*;
use dynamodb_exactly_once::{Rejection, RejectionCode};
use dynamodb_exactly_once_lambda::source::SourceRecord;

/// Lose the response of the first `UpdateItem` (after DynamoDB applied it).
fn lose_first_update() -> FaultInjector {
    let updates = Arc::new(AtomicUsize::new(0));
    FaultInjector::new(move |_, op| {
        if op == "UpdateItem" && updates.fetch_add(1, Ordering::SeqCst) == 0 {
            Fault::LoseResponse
        } else {
            Fault::None
        }
    })
}

/// Item a|d with a string attribute `label`: adding to `label` is refused by DynamoDB.
async fn item_with_a_string_label(client: &Client, table: &str) {
    let mut item = item_key("a", "d").to_item().expect("key");
    item.insert("label".into(), AttributeValue::S("gold".into()));
    client
        .put_item()
        .table_name(table)
        .set_item(Some(item))
        .send()
        .await
        .expect("item with a label");
}

#[tokio::test]
async fn a_record_dynamodb_refuses_is_dead_lettered_alone_and_the_rest_of_its_chunk_applies() {
    let client = client();
    let (w, tables) = counter_writer(client.clone()).await;
    item_with_a_string_label(&client, &tables["CounterTable"]).await;
    // Given a batch whose third record adds to `label`, a string on the item (it parses fine,
    // but DynamoDB refuses the ADD with a ValidationException) ...
    let mut bodies: Vec<Value> = (0..5)
        .map(|i| record("a", "d", &format!("k{i}"), json!({"n": 1})))
        .collect();
    bodies[2] = record("a", "d", "poison", json!({"label": 1}));
    bodies.push(record("b", "d", "other", json!({"n": 1})));

    let report = w
        .handle_batch(&sqs_batch(&bodies, 0), Deadline::none())
        .await;

    // ... then only that record is dead-lettered; the others of its item count.
    let labels: Vec<&str> = report.results.iter().map(|r| r.label()).collect();
    assert_eq!(
        labels,
        ["applied", "applied", "invalid", "applied", "applied", "applied"]
    );
    let letters = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason.code, RejectionCode::RejectedByDynamodb);
    assert!(letters[0].reason.message.len() < 300);
    let got = counters(&client, &tables["CounterTable"]).await;
    assert_eq!(got["a|d"]["n"], 4);
    assert_eq!(got["b|d"]["n"], 1);
}

#[tokio::test]
async fn replaying_dead_letters_isolates_the_poison_record_again() {
    let client = client();
    let (w, tables) = counter_writer(client.clone()).await;
    item_with_a_string_label(&client, &tables["CounterTable"]).await;
    // Given dead letters as a whole refused chunk left them: two innocent records and the
    // one DynamoDB refuses ...
    let bodies = [
        record("a", "d", "r1", json!({"n": 1})),
        record("a", "d", "r2", json!({"n": 2})),
        record("a", "d", "r3", json!({"label": 1})),
    ];
    let reason = Rejection::new(RejectionCode::RejectedByDynamodb, "the chunk was refused");
    for r in &sqs_batch(&bodies, 100).records {
        w.dead_letter_table()
            .expect("a dead-letter table")
            .keep(r, &reason)
            .await
            .expect("keep");
    }

    // ... when they are replayed through the protocol ...
    let report = w
        .replay_dead_letters(
            w.dead_letter_table().expect("a dead-letter table"),
            &dynamodb_exactly_once_lambda::ReplayScope::all(),
        )
        .await
        .expect("replay");

    // ... the innocent ones apply and leave the table; only the poison record stays.
    assert_eq!(report.replayed.len(), 2, "{report:?}");
    assert_eq!(report.still_rejected.len(), 1, "{report:?}");
    assert!(report.failed.is_empty());
    let left = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    assert_eq!(left.len(), 1);
    let kept = SourceRecord::new(left[0].position.clone(), left[0].payload.clone());
    assert_eq!(kept.body, bodies[2].to_string().into_bytes());
    assert_eq!(
        counters(&client, &tables["CounterTable"]).await["a|d"]["n"],
        3
    );
}

#[tokio::test]
async fn a_key_delivered_again_with_other_deltas_is_a_conflicting_duplicate() {
    let client = client();
    let (w, tables) = counter_writer(client.clone()).await;
    // Given the same idempotency key three times in one batch, once with other deltas ...
    let first = [
        record("a", "d", "k1", json!({"n": 1})),
        record("a", "d", "k1", json!({"n": 1})),
        record("a", "d", "k1", json!({"n": 5})),
    ];

    let report = w
        .handle_batch(&sqs_batch(&first, 0), Deadline::none())
        .await;

    // ... the first counts, the equal copy is a duplicate, the other one is reported apart.
    let labels: Vec<&str> = report.results.iter().map(|r| r.label()).collect();
    assert_eq!(labels, ["applied", "duplicate", "conflicting_duplicate"]);
    assert_eq!(report.summary.count("conflicting_duplicate"), 1);
    // Across deliveries the item keeps only the key's hash: a later delivery with other
    // deltas cannot be told apart (documented) and is a duplicate.
    let later = [record("a", "d", "k1", json!({"n": 7}))];
    let report = w
        .handle_batch(&sqs_batch(&later, 10), Deadline::none())
        .await;
    assert_eq!(report.results[0].label(), "duplicate");
    assert_eq!(
        counters(&client, &tables["CounterTable"]).await["a|d"]["n"],
        1
    );
}

#[tokio::test]
async fn a_versioned_write_whose_response_was_lost_is_written_not_a_conflict() {
    let injector = lose_first_update();
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &TABLES).await;
    let w = writer_on(client_with(Some(injector.clone()), 3), &tables, |c| c, None);
    let key = item_key("acct#1", "profile");

    let outcome = w
        .protocol()
        .put_versioned(
            &key,
            None,
            &Map::from_iter([("plan".into(), json!("free"))]),
        )
        .await
        .expect("put");

    assert_eq!(
        injector.injected(),
        1,
        "the response was lost, the SDK retried"
    );
    assert_eq!(outcome, VersionOutcome::Written { version: 1 });
    let item = w
        .protocol()
        .get_json(&key)
        .await
        .expect("get")
        .expect("item");
    assert_eq!(item["ctr_version"], json!(1));
}

#[tokio::test]
async fn read_modify_write_applies_its_change_once_when_a_response_is_lost() {
    let injector = lose_first_update();
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &TABLES).await;
    let w = writer_on(client_with(Some(injector.clone()), 3), &tables, |c| c, None);
    let key = item_key("acct#1", "settings");
    let mut changes = 0;

    let outcome = w
        .protocol()
        .read_modify_write(&key, 5, |current| {
            changes += 1;
            let seen = current
                .and_then(|c| c.get("edits"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            Map::from_iter([("edits".into(), json!(seen + 1))])
        })
        .await
        .expect("rmw");

    assert_eq!(injector.injected(), 1);
    assert_eq!(
        outcome,
        RmwOutcome::Written {
            version: 1,
            attempts: 1
        }
    );
    assert_eq!(changes, 1, "the change was computed and applied once");
    let item = w
        .protocol()
        .get_json(&key)
        .await
        .expect("get")
        .expect("item");
    assert_eq!(item["edits"], json!(1));
    assert_eq!(item["ctr_version"], json!(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_modify_write_applies_its_change_once_when_another_writer_lands_before_the_sdk_retry()
{
    // Given a writer A whose first UpdateItem is applied but whose response is lost, and whose
    // SDK retry is held
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &TABLES).await;
    let other = writer_on(setup.clone(), &tables, |c| c, None);
    let il = dev_testing::Interleaving::new();
    il.lose_response("A", dev_testing::At::op("UpdateItem"));
    il.pause_before("A", dev_testing::At::op("UpdateItem").attempt(2));
    let a = Arc::new(writer_on(il.client("A", 3), &tables, |c| c, None));
    let key = item_key("acct#1", "settings");
    let task = {
        let (a, key) = (Arc::clone(&a), key.clone());
        tokio::spawn(async move {
            a.protocol()
                .read_modify_write(&key, 5, |current| {
                    let seen = current
                        .and_then(|c| c.get("edits"))
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    Map::from_iter([("edits".into(), json!(seen + 1))])
                })
                .await
        })
    };

    // When another writer moves the version before the retry is sent
    il.wait_paused("A").await.expect("A's retry is held");
    let label = Map::from_iter([("label".into(), json!("gold"))]);
    let moved = other
        .protocol()
        .put_versioned(&key, Some(1), &label)
        .await
        .expect("other write");
    assert_eq!(moved, VersionOutcome::Written { version: 2 });
    il.release("A");
    let outcome = task.await.expect("task").expect("rmw");

    // Then A's change was applied once (its own write, version 1), not again on top
    assert!(
        matches!(outcome, RmwOutcome::Written { version: 1, .. }),
        "{outcome:?}"
    );
    let item = other
        .protocol()
        .get_json(&key)
        .await
        .expect("get")
        .expect("item");
    assert_eq!(item["edits"], json!(1), "{item:?}");
    assert_eq!(item["ctr_version"], json!(2));
}
