//! The document writer applies every record exactly once under the SDK's own retries, on the
//! item DynamoDB identifies: numeric keys follow DynamoDB's number rules, a plain append whose
//! response was lost is not appended again, and a blind replace that kept losing races is
//! delivered again instead of being acknowledged unapplied.

use super::stored_document as stored;
use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use common::*;
use dev_testing::{client, client_with, At, Fault, FaultInjector, Interleaving};
use dynamodb_exactly_once::__private::Backoff;
use dynamodb_exactly_once::document::{Document, DocumentConfig, DocumentOutcome};
use dynamodb_exactly_once::{
    Deadline, ErrorClass, ItemKey, Protocol, RecordResult, Rejection, RejectionCode,
};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use serde_json::{json, Value};

async fn document_table(client: &Client) -> String {
    dev_testing::template_tables(client, &["DocumentTable"]).await["DocumentTable"].clone()
}

fn docs(client: Client, table: &str) -> Document {
    Document::new(
        client,
        DocumentConfig::builder(table)
            .build()
            .expect("valid configuration"),
    )
}

fn rec(op: &str, pk: &str, fields: Value) -> Value {
    let mut body = json!({"op": op, "key": {"PK": pk, "SK": "d"}});
    if let (Some(b), Value::Object(f)) = (body.as_object_mut(), fields) {
        b.extend(f);
    }
    body
}

/// Apply raw bodies as one batch through the protocol.
async fn apply_bodies(docs: &Document, bodies: &[&str]) -> Vec<RecordResult<DocumentOutcome>> {
    let mut results: Vec<Option<RecordResult<DocumentOutcome>>> =
        bodies.iter().map(|_| None).collect();
    let mut records = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        match docs.parse_record(body.as_bytes()) {
            Ok(record) => records.push((i, record)),
            Err(rejection) => results[i] = Some(RecordResult::Rejected(rejection)),
        }
    }
    for (i, result) in docs.apply(records, Deadline::none()).await.results {
        results[i] = Some(result);
    }
    results
        .into_iter()
        .map(|r| r.expect("one result per record"))
        .collect()
}

// ----------------------------------------------------------------------- numeric keys

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numeric_keys_are_one_item_per_dynamodb_number_and_refused_numbers_are_kept() {
    // Given a table keyed by a number, and a writer whose first append to item 1 is slow
    let setup = client();
    let table = numeric_key_table(&setup, "NumericDocs", "PK").await;
    let il = Interleaving::new();
    il.delay_before(
        "A",
        At::op("UpdateItem").containing("\"first\""),
        Duration::from_millis(300),
    );
    let writer = docs(il.client("A", 1), &table);

    // When one batch appends to `1`, `1.0` and `1e0` (one DynamoDB key), and to two numbers
    // above 2^64 that an f64 cannot tell apart, and to numbers DynamoDB refuses
    let append = |pk: &str, v: &str| {
        format!(r#"{{"op":"list_append","key":{{"PK":{pk}}},"path":"l","values":["{v}"]}}"#)
    };
    let bodies = [
        append("1", "first"),
        append("1.0", "second"),
        append("1e0", "third"),
        append("12345678901234567890123", "big-a"),
        append("12345678901234567890124", "big-b"),
        append("1e126", "too-large"),
        append("1234567890123456789012345678901234567890", "too-precise"),
    ];
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let results = apply_bodies(&writer, &refs).await;

    // Then the three spellings of 1 are one item, appended in record order
    let key = ItemKey::from_json(&json!({"PK": 1})).expect("key");
    let item = writer.get_json(&key).await.expect("get").expect("item 1");
    assert_eq!(item["l"], json!(["first", "second", "third"]));
    // ... two numbers above 2^64 that an f64 cannot tell apart are two items, each exact,
    // and those DynamoDB refuses are rejected (kept as dead letters) with a bounded reason
    let labels: Vec<&str> = results.iter().map(RecordResult::label).collect();
    assert_eq!(
        labels,
        ["applied", "applied", "applied", "applied", "applied", "invalid", "invalid"]
    );
    for (pk, value) in [
        ("12345678901234567890123", "big-a"),
        ("12345678901234567890124", "big-b"),
    ] {
        let key: Value = serde_json::from_str(&format!(r#"{{"PK":{pk}}}"#)).expect("key");
        let key = ItemKey::from_json(&key).expect("key");
        let item = writer.get_json(&key).await.expect("get").expect(pk);
        assert_eq!(item["l"], json!([value]));
        assert_eq!(item["PK"].to_string(), pk);
    }
    for result in &results[5..] {
        let RecordResult::Rejected(r) = result else {
            panic!("expected a rejection: {result:?}");
        };
        assert_eq!(r.code.as_str(), "invalid_number", "{r}");
        assert!(r.message.len() < 300, "{r}");
    }
    let scan = setup.scan().table_name(&table).send().await.expect("scan");
    assert_eq!(scan.count, 3, "items 1 and the two large numbers");
}

// -------------------------------------------------------------- lost responses (SDK retry)

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
async fn a_lost_response_on_a_plain_append_or_set_op_is_applied_once() {
    let setup = client();
    let table = document_table(&setup).await;
    let plain = docs(setup.clone(), &table);
    for (n, body) in [
        rec("list_append", "u", json!({"path": "l", "values": ["a"]})),
        rec("set_add", "u", json!({"path": "s", "values": ["x"]})),
        rec("set_remove", "u", json!({"path": "s", "values": ["y"]})),
    ]
    .iter()
    .enumerate()
    {
        // Given a writer whose UpdateItem is applied but whose response is lost
        let faults = nth_update(0, Fault::LoseResponse);
        let faulty = docs(client_with(Some(faults.clone()), 3), &table);
        let record = faulty
            .parse_record(body.to_string().as_bytes())
            .expect("valid");

        // When the SDK sends it again
        let outcome = faulty.write(&record).await.expect("write");

        // Then it was applied once, and the writer knows it
        assert_eq!(faults.injected(), 1);
        assert_eq!(outcome, DocumentOutcome::Applied, "{body}");
        let item = stored(&plain, "u").await;
        assert_eq!(item["l"], json!(["a"]), "after {body}");
        assert_eq!(item["doc_version"], json!(n + 1), "after {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_append_retried_after_other_writes_landed_is_not_appended_again() {
    // Given writer A's append, applied with its response lost, and the SDK's retry held
    // until two other appends have landed on the item (A's token is then in slot 2)
    let setup = client();
    let table = document_table(&setup).await;
    let other = docs(setup.clone(), &table);
    let il = Interleaving::new();
    il.lose_response("A", At::op("UpdateItem").attempt(1));
    il.pause_before("A", At::op("UpdateItem").attempt(2));
    let a = docs(il.client("A", 3), &table);
    let append = |v: &str| rec("list_append", "u", json!({"path": "l", "values": [v]}));
    let record = a
        .parse_record(append("a").to_string().as_bytes())
        .expect("valid");
    let task = tokio::spawn(async move { a.write(&record).await });
    il.wait_paused("A").await.expect("A's retry is held");
    for v in ["b", "c"] {
        let r = other
            .parse_record(append(v).to_string().as_bytes())
            .expect("valid");
        assert_eq!(
            other.write(&r).await.expect("append"),
            DocumentOutcome::Applied
        );
    }

    // When the retry goes out
    il.release("A");
    let outcome = task.await.expect("task").expect("write");

    // Then A's append was applied once, and A knows it
    assert_eq!(outcome, DocumentOutcome::Applied);
    assert_eq!(stored(&other, "u").await["l"], json!(["a", "b", "c"]));
}

// ------------------------------------------------------------------- blind replace

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blind_replace_that_keeps_losing_races_is_delivered_again_not_acknowledged() {
    // Given a writer that retries a lost race once, and another writer appending to the item
    let setup = client();
    let table = document_table(&setup).await;
    let other = docs(setup.clone(), &table);
    let il = Interleaving::new();
    let defaults = DocumentConfig::builder(&table).build().expect("valid");
    let backoff = defaults.backoff();
    let config = defaults
        .to_builder()
        .backoff(Backoff::new(backoff.first, backoff.max, 1))
        .build()
        .expect("valid");
    let replacer = Document::new(il.client("A", 1), config);
    let append = other
        .parse_record(
            rec("list_append", "u", json!({"path": "l", "values": ["a"]}))
                .to_string()
                .as_bytes(),
        )
        .expect("valid");
    let _ = other.write(&append).await.expect("append");
    let replace = replacer
        .parse_record(
            rec("replace", "u", json!({"document": {"n": 1}}))
                .to_string()
                .as_bytes(),
        )
        .expect("valid");

    // When another append lands before each of the replace's two tries
    il.pause_before("A", At::op("PutItem"));
    il.pause_before("A", At::op("PutItem"));
    let task = {
        let replacer = replacer.clone();
        let replace = replace.clone();
        tokio::spawn(async move {
            replacer
                .apply(vec![(0, replace)], Deadline::none())
                .await
                .results
        })
    };
    for _ in 0..2 {
        il.wait_paused("A").await.expect("paused before a PutItem");
        let _ = other.write(&append).await.expect("append");
        il.release("A");
    }
    let results = task.await.expect("task");

    // Then the record is reported for redelivery (a transient contention), not acknowledged
    let [(0, result)] = results.as_slice() else {
        panic!("one result: {results:?}");
    };
    match result {
        RecordResult::Failed(f) => assert_eq!(f.class(), ErrorClass::Transient, "{f}"),
        other => panic!("expected a failure to deliver again, got {other:?}"),
    }
    // ... and its redelivery applies it
    let outcome = replacer.write(&replace).await.expect("redelivery");
    assert_eq!(outcome, DocumentOutcome::Applied);
    let item = stored(&other, "u").await;
    assert_eq!(item["n"], json!(1));
    assert!(!item.contains_key("l"));
}

#[tokio::test]
async fn a_dead_letter_whose_replay_ends_in_conflict_is_kept() {
    // Given a kept replace whose expected version the document does not have
    let client = client();
    let tables = dev_testing::template_tables(&client, &["DocumentTable", "DeadLetterTable"]).await;
    let writer = dynamodb_exactly_once_lambda::Writer::builder(
        "document-writer",
        docs(client.clone(), &tables["DocumentTable"]),
    )
    .dead_letters(DeadLetters::new(
        client.clone(),
        &tables["DeadLetterTable"],
        "document-writer",
    ))
    .deadline_margin(Duration::from_secs(1))
    .build()
    .expect("valid writer");
    let body = rec(
        "replace",
        "u",
        json!({"document": {"n": 1}, "expectedVersion": 3}),
    );
    let batch = sqs_batch(&[body], 0);
    let reason = Rejection::new(RejectionCode::ItemTooLarge, "kept for the test");
    writer
        .dead_letter_table()
        .expect("a dead-letter table")
        .keep(&batch.records[0], &reason)
        .await
        .expect("kept");

    // When it is replayed and ends in `conflict` (not applied)
    let report = writer
        .replay_dead_letters(
            writer.dead_letter_table().expect("a dead-letter table"),
            &dynamodb_exactly_once_lambda::ReplayScope::all(),
        )
        .await
        .expect("replay");

    // Then the letter stays, to be looked at, instead of being removed as replayed
    assert!(report.replayed.is_empty(), "{report:?}");
    assert_eq!(
        writer
            .dead_letter_table()
            .expect("a dead-letter table")
            .list()
            .await
            .expect("list")
            .len(),
        1
    );
}

#[tokio::test]
async fn a_replace_too_large_with_the_protocol_attributes_is_item_too_large() {
    // Given a document that fits DynamoDB's 400 KB alone, but not with doc_version and the
    // op slots the writer stores with it
    let setup = client();
    let table = document_table(&setup).await;
    let writer = docs(setup, &table);
    let big = "x".repeat(400 * 1024 - 6 - 3 - 50);
    let body = rec("replace", "u", json!({"document": {"big": big}})).to_string();

    // When it is applied
    let results = apply_bodies(&writer, &[body.as_str()]).await;

    // Then it is rejected before the write, with the size reason
    let [RecordResult::Rejected(r)] = results.as_slice() else {
        panic!("expected a rejection: {results:?}");
    };
    assert_eq!(r.code.as_str(), "item_too_large", "{r}");
}

/// A document writer without SDK retries whose first UpdateItem lands but loses its response.
fn losing_first_response(
    direct: &Client,
    tables: &std::collections::BTreeMap<String, String>,
) -> dynamodb_exactly_once_lambda::Writer<Document> {
    let flaky = client_with(Some(nth_update(0, Fault::LoseResponse)), 1);
    dynamodb_exactly_once_lambda::Writer::builder(
        "document-writer",
        docs(flaky, &tables["DocumentTable"]),
    )
    .dead_letters(DeadLetters::new(
        direct.clone(),
        &tables["DeadLetterTable"],
        "document-writer",
    ))
    .deadline_margin(Duration::from_secs(1))
    .build()
    .expect("valid writer")
}

#[tokio::test]
async fn a_delivery_whose_write_landed_unanswered_is_recognised_when_it_comes_again() {
    // Given a document writer without SDK retries whose first UpdateItem lands but loses its
    // response (what a write cut off at the deadline, or a response lost on the last SDK
    // attempt, leaves behind)
    let direct = client();
    let tables = dev_testing::template_tables(&direct, &["DocumentTable", "DeadLetterTable"]).await;
    let writer = losing_first_response(&direct, &tables);
    let batch = sqs_batch(
        &[rec(
            "list_append",
            "landed",
            json!({"path": "l", "values": ["x"]}),
        )],
        0,
    );
    // When the delivery fails (the write applied) and the source delivers the record again
    let first = writer.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(first.response.failed_ids().len(), 1);
    let again = writer.handle_batch(&batch, Deadline::none()).await;
    assert!(again.response.failed_ids().is_empty());
    // Then the value is in the list once: the redelivery carries the same op token (derived
    // from the delivery's source identity) and finds it in the item's op slots
    let item = stored(&docs(direct, &tables["DocumentTable"]), "landed").await;
    assert_eq!(item["l"], json!(["x"]));
    assert_eq!(again.results[0].label(), "applied");
}

#[tokio::test]
async fn a_remove_whose_write_landed_unanswered_removes_one_element_when_it_comes_again() {
    // Given a list holding "x" twice, and a writer without SDK retries whose first UpdateItem
    // lands but loses its response
    let direct = client();
    let tables = dev_testing::template_tables(&direct, &["DocumentTable", "DeadLetterTable"]).await;
    let plain = docs(direct.clone(), &tables["DocumentTable"]);
    let append = rec(
        "list_append",
        "twice",
        json!({"path": "l", "values": ["x", "x"]}),
    );
    let record = plain
        .parse_record(append.to_string().as_bytes())
        .expect("valid record");
    assert_eq!(
        plain.write(&record).await.expect("write"),
        DocumentOutcome::Applied
    );
    let writer = losing_first_response(&direct, &tables);
    let batch = sqs_batch(
        &[rec(
            "list_remove",
            "twice",
            json!({"path": "l", "value": "x"}),
        )],
        0,
    );
    // When the delivery fails (the remove applied) and the source delivers the record again
    let first = writer.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(first.response.failed_ids().len(), 1);
    let again = writer.handle_batch(&batch, Deadline::none()).await;
    assert!(again.response.failed_ids().is_empty());
    // Then one "x" is left: the redelivery reads its own op token in the item and does not
    // remove the second occurrence
    let item = stored(&plain, "twice").await;
    assert_eq!(item["l"], json!(["x"]), "{item:?}");
    assert_eq!(again.results[0].label(), "applied");
}

// ----------------------------------------------------------------- renamed attribute prefix

/// A document writer whose protocol attributes start with `prefix`.
fn docs_with_prefix(client: Client, table: &str, prefix: &str) -> Document {
    let config = DocumentConfig::builder(table)
        .attribute_prefix(prefix)
        .build()
        .expect("valid configuration");
    Document::new(client, config)
}

/// Apply one body delivered as `delivery`: its result.
async fn deliver(docs: &Document, body: &Value, delivery: &str) -> RecordResult<DocumentOutcome> {
    let record = docs
        .parse_delivered(body.to_string().as_bytes(), delivery)
        .expect("valid record");
    let mut applied = docs.apply(vec![(0, record)], Deadline::none()).await;
    applied.results.remove(0).1
}

fn code_of(result: &RecordResult<DocumentOutcome>) -> &str {
    match result {
        RecordResult::Rejected(r) => r.code.as_str(),
        other => other.label(),
    }
}

#[tokio::test]
async fn a_renamed_document_prefix_is_refused_on_first_contact_not_applied_twice() {
    let setup = client();
    let table = document_table(&setup).await;
    let before = docs(setup.clone(), &table);
    let after = docs_with_prefix(setup.clone(), &table, "d_");
    let append = rec("list_append", "u", json!({"path": "l", "values": ["a"]}));

    // Given an append that landed under `doc_` while its delivery failed
    let first = deliver(&before, &append, "queue/m1").await;
    assert_eq!(code_of(&first), "applied");
    // When the function is redeployed with DOCUMENT_ATTRIBUTE_PREFIX=d_ and the record
    // comes again, it is refused (kept as a dead letter), not appended again
    let again = deliver(&after, &append, "queue/m1").await;
    assert_eq!(code_of(&again), "layout_mismatch", "{again:?}");
    assert_eq!(stored(&before, "u").await["l"], json!(["a"]));
    // ... and a replace under the new prefix does not take the old version for 0
    let replace = rec(
        "replace",
        "u",
        json!({"document": {"x": 1}, "expectedVersion": 0}),
    );
    assert_eq!(
        code_of(&deliver(&after, &replace, "queue/m2").await),
        "layout_mismatch"
    );

    // An item first written under `d_` is refused to a writer of the default prefix
    let other = rec("list_append", "v", json!({"path": "l", "values": ["b"]}));
    assert_eq!(
        code_of(&deliver(&after, &other, "queue/m3").await),
        "applied"
    );
    assert_eq!(
        code_of(&deliver(&before, &other, "queue/m4").await),
        "layout_mismatch"
    );
    assert_eq!(
        code_of(&deliver(&after, &other, "queue/m5").await),
        "applied"
    );
    assert_eq!(stored(&after, "v").await["l"], json!(["b", "b"]));
}
