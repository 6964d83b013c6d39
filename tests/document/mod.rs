//! The document writer against DynamoDB Local: list appends and removals by value, string and
//! number sets (never stored empty), version-guarded replaces, nested paths through
//! placeholders, concurrent writers, lost responses, dead letters, and the handler on the
//! `events/` fixtures.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use common::*;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::batch::RecordFailure;
use dynamodb_exactly_once::document::{Document, DocumentConfig, DocumentOutcome};
use dynamodb_exactly_once::{Deadline, ErrorClass, ItemKey, RecordResult};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::{Batch, Writer};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Map, Value};

pub(crate) mod once;
mod pipeline;
pub(crate) mod property;
mod tokens;

// ------------------------------------------------------------------------------ helpers

async fn tables(client: &Client) -> BTreeMap<String, String> {
    dev_testing::template_tables(client, &["DocumentTable", "DeadLetterTable"]).await
}

fn writer_on(client: Client, tables: &BTreeMap<String, String>) -> Writer<Document> {
    Writer::builder(
        "document-writer",
        Document::new(
            client.clone(),
            DocumentConfig::builder(&tables["DocumentTable"])
                .build()
                .expect("valid configuration"),
        ),
    )
    .dead_letters(DeadLetters::new(
        client,
        &tables["DeadLetterTable"],
        "document-writer",
    ))
    .deadline_margin(Duration::from_secs(1))
    .build()
    .expect("valid writer")
}

async fn writer(client: &Client) -> (Writer<Document>, BTreeMap<String, String>) {
    let tables = tables(client).await;
    (writer_on(client.clone(), &tables), tables)
}

/// A record body on item `(pk, "d")`.
fn rec(op: &str, pk: &str, fields: Value) -> Value {
    let mut body = json!({"op": op, "key": {"PK": pk, "SK": "d"}});
    if let (Some(b), Value::Object(f)) = (body.as_object_mut(), fields) {
        b.extend(f);
    }
    body
}

async fn apply(docs: &Document, body: &Value) -> DocumentOutcome {
    let record = docs
        .parse_record(body.to_string().as_bytes())
        .expect("valid record");
    docs.write(&record).await.expect("write")
}

/// Apply until the record is decided, as redelivery would after a transient contention error.
async fn apply_until_decided(docs: &Document, body: &Value) -> DocumentOutcome {
    let record = docs
        .parse_record(body.to_string().as_bytes())
        .expect("valid record");
    for _ in 0..50 {
        match docs.write(&record).await {
            Ok(outcome) => return outcome,
            Err(e) if e.class() == ErrorClass::Transient => {}
            Err(e) => panic!("{body}: {e}"),
        }
    }
    panic!("{body}: still contended after 50 deliveries")
}

async fn stored(docs: &Document, pk: &str) -> Option<Map<String, Value>> {
    let key = ItemKey::from_json(&json!({"PK": pk, "SK": "d"})).expect("key");
    docs.get_json(&key).await.expect("get")
}

/// The document `pk`/`d` as stored; it must exist.
async fn stored_document(docs: &Document, pk: &str) -> Map<String, Value> {
    stored(docs, pk).await.expect("document")
}

fn list_of(item: &Map<String, Value>, name: &str) -> Vec<Value> {
    item.get(name)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn version(item: &Map<String, Value>) -> u64 {
    item["doc_version"].as_u64().expect("doc_version")
}

// -------------------------------------------------------------------------------- lists

#[tokio::test]
async fn list_remove_takes_one_occurrence_and_a_missing_value_is_absent() {
    let client = client();
    let (w, _) = writer(&client).await;
    let docs = w.protocol();
    let append = rec(
        "list_append",
        "u",
        json!({"path": "friends", "values": ["a", "b", "a", "c"]}),
    );
    let remove_a = rec("list_remove", "u", json!({"path": "friends", "value": "a"}));

    assert_eq!(apply(docs, &append).await, DocumentOutcome::Applied);
    assert_eq!(apply(docs, &remove_a).await, DocumentOutcome::Applied);
    let item = stored(docs, "u").await.expect("document");
    assert_eq!(
        list_of(&item, "friends"),
        [json!("b"), json!("a"), json!("c")]
    );
    assert_eq!(apply(docs, &remove_a).await, DocumentOutcome::Applied);
    assert_eq!(apply(docs, &remove_a).await, DocumentOutcome::Absent);

    let item = stored(docs, "u").await.expect("document");
    assert_eq!(list_of(&item, "friends"), [json!("b"), json!("c")]);
    assert_eq!(
        version(&item),
        3,
        "one version per applied write, none for `absent`"
    );
    let nobody = rec(
        "list_remove",
        "nobody",
        json!({"path": "friends", "value": "a"}),
    );
    assert_eq!(apply(docs, &nobody).await, DocumentOutcome::Absent);
    assert!(stored(docs, "nobody").await.is_none(), "no item is created");
}

#[tokio::test]
async fn unique_append_adds_only_missing_values_and_is_idempotent() {
    let client = client();
    let (w, _) = writer(&client).await;
    let docs = w.protocol();
    let first = rec(
        "list_append",
        "u",
        json!({"path": "l", "values": ["a", "b"], "unique": true}),
    );
    let more = rec(
        "list_append",
        "u",
        json!({"path": "l", "values": ["b", "c", "c"], "unique": true}),
    );

    assert_eq!(apply(docs, &first).await, DocumentOutcome::Applied);
    assert_eq!(apply(docs, &first).await, DocumentOutcome::Duplicate);
    assert_eq!(apply(docs, &more).await, DocumentOutcome::Applied);
    assert_eq!(apply(docs, &more).await, DocumentOutcome::Duplicate);

    let item = stored(docs, "u").await.expect("document");
    assert_eq!(list_of(&item, "l"), [json!("a"), json!("b"), json!("c")]);
    let nothing = rec("list_append", "u", json!({"path": "l", "values": []}));
    assert_eq!(apply(docs, &nothing).await, DocumentOutcome::Unchanged);
}

#[tokio::test]
async fn nested_paths_and_reserved_words_go_through_placeholders() {
    let client = client();
    let (w, _) = writer(&client).await;
    let docs = w.protocol();
    let doc = json!({"profile": {"city": "Lyon"}, "lists": [["x"], ["y", "z", "y"]], "size": []});
    assert_eq!(
        apply(docs, &rec("replace", "u", json!({"document": doc}))).await,
        DocumentOutcome::Applied
    );

    use DocumentOutcome::{Absent, Applied};
    let cases = [
        (
            "set_add",
            json!({"path": "profile.tags", "values": ["b", "a"]}),
            Applied,
        ),
        (
            "list_remove",
            json!({"path": "lists[1]", "value": "y"}),
            Applied,
        ),
        (
            "list_append",
            json!({"path": "lists[0]", "values": [{"deep": [1]}]}),
            Applied,
        ),
        (
            "list_remove",
            json!({"path": "lists[0]", "value": {"deep": [1]}}),
            Applied,
        ),
        // `size` is a DynamoDB reserved word: only a placeholder can name it.
        (
            "list_append",
            json!({"path": "size", "values": [1, 2]}),
            Applied,
        ),
        (
            "list_remove",
            json!({"path": "profile.missing", "value": 1}),
            Absent,
        ),
    ];
    for (op, fields, outcome) in cases {
        let body = rec(op, "u", fields);
        assert_eq!(apply(docs, &body).await, outcome, "{body}");
    }

    let item = stored(docs, "u").await.expect("document");
    assert_eq!(item["profile"], json!({"city": "Lyon", "tags": ["a", "b"]}));
    assert_eq!(item["lists"], json!([["x"], ["z", "y"]]));
    assert_eq!(item["size"], json!([1, 2]));
}

// --------------------------------------------------------------------------------- sets

#[tokio::test]
async fn sets_are_never_stored_empty() {
    let client = client();
    let (w, tables) = writer(&client).await;
    let docs = w.protocol();
    let set = |op: &str, values: Value| rec(op, "u", json!({"path": "tags", "values": values}));

    // Adding nothing writes nothing: no empty set, not even an item.
    assert_eq!(
        apply(docs, &set("set_add", json!([]))).await,
        DocumentOutcome::Unchanged
    );
    assert!(scan(&client, &tables["DocumentTable"]).await.is_empty());
    // Removing from a missing item does not create one.
    assert_eq!(
        apply(docs, &set("set_remove", json!(["x"]))).await,
        DocumentOutcome::Absent
    );
    assert!(scan(&client, &tables["DocumentTable"]).await.is_empty());

    assert_eq!(
        apply(docs, &set("set_add", json!(["x", "y", "x"]))).await,
        DocumentOutcome::Applied
    );
    assert_eq!(
        apply(docs, &set("set_add", json!(["y"]))).await,
        DocumentOutcome::Applied
    );
    assert_eq!(
        apply(docs, &set("set_remove", json!(["x", "nope"]))).await,
        DocumentOutcome::Applied
    );
    assert_eq!(stored(docs, "u").await.expect("doc")["tags"], json!(["y"]));
    assert_eq!(
        apply(docs, &set("set_remove", json!([]))).await,
        DocumentOutcome::Unchanged
    );

    // Removing the last element: DynamoDB drops the attribute itself.
    assert_eq!(
        apply(docs, &set("set_remove", json!(["y"]))).await,
        DocumentOutcome::Applied
    );
    let item = stored(docs, "u").await.expect("the item stays");
    assert!(!item.contains_key("tags"), "no empty set: {item:?}");

    // Number sets: 1, 1.0 and 1e0 are one element.
    let numbers = rec(
        "set_add",
        "u",
        json!({"path": "scores", "values": [1, 1.0, 1e0, 2.5]}),
    );
    assert_eq!(apply(docs, &numbers).await, DocumentOutcome::Applied);
    assert_eq!(
        stored(docs, "u").await.expect("doc")["scores"],
        json!([1, 2.5])
    );
}

// ------------------------------------------------------------------------------ replace

#[tokio::test]
async fn replace_is_guarded_by_the_version() {
    let client = client();
    let (w, _) = writer(&client).await;
    let docs = w.protocol();
    let create = rec(
        "replace",
        "u",
        json!({"document": {"name": "Ann"}, "expectedVersion": 0}),
    );
    let stale = rec(
        "replace",
        "u",
        json!({"document": {"name": "Bob"}, "expectedVersion": 0}),
    );

    assert_eq!(apply(docs, &create).await, DocumentOutcome::Applied);
    assert_eq!(
        apply(docs, &create).await,
        DocumentOutcome::Duplicate,
        "a redelivery"
    );
    assert_eq!(
        apply(docs, &stale).await,
        DocumentOutcome::Conflict { current: 1 }
    );

    // A list change moves the version: a replace computed from version 1 cannot erase it.
    let append = rec(
        "list_append",
        "u",
        json!({"path": "friends", "values": ["c"]}),
    );
    assert_eq!(apply(docs, &append).await, DocumentOutcome::Applied);
    let from_v1 = rec(
        "replace",
        "u",
        json!({"document": {"name": "Ann B."}, "expectedVersion": 1}),
    );
    assert_eq!(
        apply(docs, &from_v1).await,
        DocumentOutcome::Conflict { current: 2 }
    );
    let item = stored(docs, "u").await.expect("doc");
    assert_eq!(list_of(&item, "friends"), [json!("c")]);

    // Without an expected version the replace applies over whatever version it reads.
    let blind = rec("replace", "u", json!({"document": {"name": "Cy"}}));
    assert_eq!(apply(docs, &blind).await, DocumentOutcome::Applied);
    let item = stored(docs, "u").await.expect("doc");
    assert_eq!(item["name"], json!("Cy"));
    assert!(
        !item.contains_key("friends"),
        "a replace replaces the whole document"
    );
    assert_eq!(version(&item), 3);
}

#[tokio::test]
async fn concurrent_blind_replaces_each_apply_over_a_distinct_version() {
    let client = client();
    let (w, _) = writer(&client).await;
    let docs = Arc::new(w.protocol().clone());
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let docs = Arc::clone(&docs);
            tokio::spawn(async move {
                apply(
                    &docs,
                    &rec("replace", "u", json!({"document": {"writer": t}})),
                )
                .await
            })
        })
        .collect();
    let mut applied = 0;
    for task in tasks {
        match task.await.expect("task") {
            DocumentOutcome::Applied => applied += 1,
            DocumentOutcome::Conflict { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let item = stored(&docs, "u").await.expect("doc");
    assert_eq!(
        version(&item),
        applied,
        "every applied replace made exactly one version"
    );
    assert!(applied >= 1);
}

// -------------------------------------------------------------------------- concurrency

/// Remover `r`: ten of v0…v29 (each value is some two removers' target), then one `dup`.
async fn remover(docs: Arc<Document>, r: usize) -> Vec<(String, DocumentOutcome)> {
    let mut outcomes = Vec::new();
    let targets = (0..10).map(|k| format!("v{}", (r * 5 + k) % 30));
    for value in targets.chain(["dup".to_string()]) {
        let body = rec("list_remove", "u", json!({"path": "l", "value": value}));
        outcomes.push((value, apply_until_decided(&docs, &body).await));
    }
    outcomes
}

/// Appender `a`: appends a{a}-0…7 (every other one unique), and adds then removes `t{a}`.
async fn appender(docs: Arc<Document>, a: usize) -> Vec<(String, DocumentOutcome)> {
    for k in 0..8 {
        let value = format!("a{a}-{k}");
        let unique = k % 2 == 0;
        let append = rec(
            "list_append",
            "u",
            json!({"path": "l", "values": [value], "unique": unique}),
        );
        let _ = apply_until_decided(&docs, &append).await;
        let tag = json!({"path": "tags", "values": [format!("t{a}")]});
        let _ = apply_until_decided(&docs, &rec("set_add", "u", tag.clone())).await;
        let _ = apply_until_decided(&docs, &rec("set_remove", "u", tag)).await;
    }
    Vec::new()
}

/// Given one list holding v0…v29 once and `dup` three times, when 6 removers (each value
/// targeted by two of them, `dup` by all) race 3 appenders and set writers, then every value
/// was removed exactly once (one `applied`, the other `absent`), exactly three `dup` removals
/// applied, every appended value is there exactly once, and the set is never stored empty.
#[tokio::test]
async fn concurrent_removers_and_adders_never_remove_twice_or_lose_an_element() {
    let client = client();
    let (w, _) = writer(&client).await;
    let docs = Arc::new(w.protocol().clone());
    let mut initial: Vec<String> = (0..30).map(|i| format!("v{i}")).collect();
    initial.extend(["dup".to_string(), "dup".to_string(), "dup".to_string()]);
    let seed = rec("list_append", "u", json!({"path": "l", "values": initial}));
    assert_eq!(apply(&docs, &seed).await, DocumentOutcome::Applied);

    let mut tasks = Vec::new();
    for r in 0..6usize {
        tasks.push(tokio::spawn(remover(Arc::clone(&docs), r)));
    }
    for a in 0..3 {
        tasks.push(tokio::spawn(appender(Arc::clone(&docs), a)));
    }
    let mut applied: BTreeMap<String, usize> = BTreeMap::new();
    for task in tasks {
        for (value, outcome) in task.await.expect("task") {
            if outcome == DocumentOutcome::Applied {
                *applied.entry(value).or_default() += 1;
            }
        }
    }

    for i in 0..30 {
        assert_eq!(
            applied.get(&format!("v{i}")),
            Some(&1),
            "v{i} removed exactly once"
        );
    }
    assert_eq!(applied.get("dup"), Some(&3), "three copies, three removals");
    let item = stored(&docs, "u").await.expect("doc");
    let left: Vec<String> = list_of(&item, "l")
        .iter()
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    let expected: BTreeSet<String> = (0..3)
        .flat_map(|a| (0..8).map(move |k| format!("a{a}-{k}")))
        .collect();
    assert_eq!(
        left.len(),
        expected.len(),
        "nothing lost, nothing doubled: {left:?}"
    );
    assert_eq!(left.into_iter().collect::<BTreeSet<_>>(), expected);
    assert!(
        !item.contains_key("tags"),
        "the set went away with its last element"
    );
}

// ------------------------------------------------------------------------- lost response

/// `fault` on the `n`-th UpdateItem (from 0) of a client, nothing on other calls.
fn nth_update(n: usize, fault: Fault) -> FaultInjector {
    let updates = Arc::new(AtomicUsize::new(0));
    FaultInjector::new(move |_, op| {
        if op == "UpdateItem" && updates.fetch_add(1, Ordering::SeqCst) == n {
            fault
        } else {
            Fault::None
        }
    })
}

#[tokio::test]
async fn a_lost_response_on_a_guarded_remove_does_not_remove_a_second_element() {
    // Given a list holding `x` twice
    let setup = client();
    let tables = tables(&setup).await;
    let plain = writer_on(setup.clone(), &tables);
    let append = rec(
        "list_append",
        "u",
        json!({"path": "l", "values": ["x", "x", "y"]}),
    );
    let _ = apply(plain.protocol(), &append).await;

    // When the remove is applied but its response is lost, and the SDK sends it again
    let faults = nth_update(0, Fault::LoseResponse);
    let faulty = writer_on(client_with(Some(faults.clone()), 3), &tables);
    let remove = rec("list_remove", "u", json!({"path": "l", "value": "x"}));
    let outcome = apply(faulty.protocol(), &remove).await;

    // Then exactly one `x` is gone, and the writer knows its write was applied
    assert_eq!(faults.injected(), 1);
    assert_eq!(outcome, DocumentOutcome::Applied);
    let item = stored(plain.protocol(), "u").await.expect("doc");
    assert_eq!(list_of(&item, "l"), [json!("x"), json!("y")]);
    assert_eq!(version(&item), 2);
}

#[tokio::test]
async fn a_lost_response_on_a_replace_or_a_set_add_applies_once() {
    let setup = client();
    let tables = tables(&setup).await;
    let plain = writer_on(setup.clone(), &tables);
    // The first PutItem and the first UpdateItem are applied, their responses lost.
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let faults = FaultInjector::new(move |_, op| {
        let first = seen
            .lock()
            .map(|mut s| s.insert(op.to_string()))
            .unwrap_or(false);
        if first && (op == "PutItem" || op == "UpdateItem") {
            Fault::LoseResponse
        } else {
            Fault::None
        }
    });
    let faulty = writer_on(client_with(Some(faults.clone()), 3), &tables);

    let replace = rec(
        "replace",
        "u",
        json!({"document": {"n": 1}, "expectedVersion": 0}),
    );
    assert_eq!(
        apply(faulty.protocol(), &replace).await,
        DocumentOutcome::Applied
    );
    let add = rec("set_add", "u", json!({"path": "s", "values": ["a"]}));
    assert_eq!(
        apply(faulty.protocol(), &add).await,
        DocumentOutcome::Applied
    );

    assert_eq!(faults.injected(), 2);
    let item = stored(plain.protocol(), "u").await.expect("doc");
    assert_eq!(item["n"], json!(1));
    assert_eq!(item["s"], json!(["a"]));
    // The replace made version 1, the set_add version 2: the SDK's retry of each found its
    // own token and applied nothing.
    assert_eq!(version(&item), 2);
}
