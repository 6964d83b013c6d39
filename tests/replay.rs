//! Dead-letter replay and export against DynamoDB Local: one deployment's letters only, in
//! source order, never applied twice when removing a letter fails, exported letters left
//! alone, incomplete letters set apart; and the producer's event time as a record's age.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use common::*;
use dev_testing::{client, client_with, template_tables, Fault, FaultInjector};
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::document::{Document, DocumentConfig};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
use dynamodb_exactly_once::{Protocol, Rejection, RejectionCode};
use dynamodb_exactly_once_lambda::__private::part_id;
use dynamodb_exactly_once_lambda::dead_letter::{DeadLetters, LetterFilter};
use dynamodb_exactly_once_lambda::event_time::EventTime;
use dynamodb_exactly_once_lambda::source::{SourceKind, SourcePosition, SourceRecord};
use dynamodb_exactly_once_lambda::{ReplayError, ReplayScope, Writer};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};

fn position(kind: SourceKind, arn: &str, id: &str) -> SourcePosition {
    {
        let mut position = SourcePosition::new(kind, id);
        position.source_arn = Some(arn.into());
        position.shard_id = (kind == SourceKind::Kinesis).then(|| "shardId-000".to_string());
        position.partition_key = (kind == SourceKind::Kinesis).then(|| "p".to_string());
        position
    }
}

fn record(position: SourcePosition, body: &Value) -> SourceRecord {
    SourceRecord::new(position, body.to_string().into_bytes())
}

fn writer<P: Protocol>(protocol: P, letters: DeadLetters) -> Writer<P> {
    Writer::builder("writer", protocol)
        .dead_letters(letters)
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer")
}

fn rejection() -> Rejection {
    Rejection::new(RejectionCode::InvalidItem, "rejected before a fix")
}

fn document_writer(
    client: Client,
    letters_client: Client,
    tables: &BTreeMap<String, String>,
) -> Writer<Document> {
    let protocol = Document::new(
        client,
        DocumentConfig::builder(&tables["DocumentTable"])
            .build()
            .expect("valid configuration"),
    );
    let letters = DeadLetters::new(
        letters_client,
        &tables["DeadLetterTable"],
        "document-writer",
    );
    writer(protocol, letters)
}

fn list(items: &BTreeMap<String, serde_json::Map<String, Value>>, pk: &str) -> Value {
    items
        .get(&format!("{pk}|d"))
        .and_then(|i| i.get("l"))
        .cloned()
        .unwrap_or(Value::Null)
}

fn append(pk: &str, value: &str) -> Value {
    json!({"op": "list_append", "key": {"PK": pk, "SK": "d"}, "path": "l", "values": [value]})
}

#[tokio::test]
async fn two_deployments_of_one_binary_replay_only_their_own_letters() {
    let c = client();
    let tables = template_tables(
        &c,
        &["RatchetTable", "OrdersReplicaTable", "DeadLetterTable"],
    )
    .await;
    let on = |table: &str, deployment: &str| {
        let protocol = Ratchet::new(
            c.clone(),
            RatchetConfig::builder(&tables[table])
                .build()
                .expect("valid configuration"),
        );
        let letters = DeadLetters::new(c.clone(), &tables["DeadLetterTable"], "ratchet-writer")
            .for_deployment(Some(deployment.into()));
        writer(protocol, letters)
    };
    let main = on("RatchetTable", "Stack-RatchetWriter-1");
    let replica = on("OrdersReplicaTable", "Stack-OrdersReplica-2");
    // Given one letter of each deployment, kept before a fix,
    let main_letter = record(
        position(SourceKind::Sqs, "arn:aws:sqs:us-east-1:1:ratchet", "m-1"),
        &put("main", "a", 1, json!({"v": 1})),
    );
    let replica_letter = record(
        position(
            SourceKind::Kinesis,
            "arn:aws:kinesis:us-east-1:1:stream/orders",
            "49",
        ),
        &put("replica", "a", 1, json!({"v": 2})),
    );
    main.dead_letter_table()
        .expect("a dead-letter table")
        .keep(&main_letter, &rejection())
        .await
        .expect("kept");
    replica
        .dead_letter_table()
        .expect("a dead-letter table")
        .keep(&replica_letter, &rejection())
        .await
        .expect("kept");
    // when the replica's letters are replayed with the replica's settings,
    let report = replica
        .replay_dead_letters(
            replica.dead_letter_table().expect("a dead-letter table"),
            &ReplayScope::all(),
        )
        .await
        .expect("replay");
    // then only the replica's letter is applied, into the replica's table,
    assert_eq!(report.replayed.len(), 1, "{report:?}");
    let replica_items = scan(&c, &tables["OrdersReplicaTable"]).await;
    assert!(replica_items.contains_key("replica|a"), "{replica_items:?}");
    assert!(!replica_items.contains_key("main|a"), "{replica_items:?}");
    // and the main deployment's letter is still there, for the main deployment to replay.
    assert_eq!(
        main.dead_letter_table()
            .expect("a dead-letter table")
            .list()
            .await
            .expect("list")
            .len(),
        1
    );
    // A replay that names no deployment while letters of two are kept is refused.
    main.dead_letter_table()
        .expect("a dead-letter table")
        .keep(&main_letter, &rejection())
        .await
        .expect("kept");
    replica
        .dead_letter_table()
        .expect("a dead-letter table")
        .keep(&replica_letter, &rejection())
        .await
        .expect("kept");
    let unnamed = on("RatchetTable", "x");
    let all = DeadLetters::new(c.clone(), &tables["DeadLetterTable"], "ratchet-writer");
    let refused = unnamed.replay_dead_letters(&all, &ReplayScope::all()).await;
    assert!(
        matches!(refused, Err(ReplayError::MixedDeployments(ref d)) if d.len() == 2),
        "{refused:?}"
    );
    let report = main
        .replay_dead_letters(
            main.dead_letter_table().expect("a dead-letter table"),
            &ReplayScope::all(),
        )
        .await
        .expect("replay");
    assert_eq!(report.replayed.len(), 1, "{report:?}");
    assert!(scan(&c, &tables["RatchetTable"])
        .await
        .contains_key("main|a"));
}

#[tokio::test]
async fn a_fifo_group_is_replayed_in_its_sequence_order() {
    let c = client();
    let tables = template_tables(&c, &["DocumentTable", "DeadLetterTable"]).await;
    let w = document_writer(c.clone(), c.clone(), &tables);
    // Three appends of one FIFO group, kept; their message ids sort against the group order.
    for (value, message_id, sequence) in [
        ("1", "m-c", "18850000000000000002"),
        ("2", "m-a", "18850000000000000010"),
        ("3", "m-b", "18850000000000000100"),
    ] {
        let mut p = position(
            SourceKind::Sqs,
            "arn:aws:sqs:us-east-1:1:docs.fifo",
            message_id,
        );
        p.message_group_id = Some("g".into());
        p.sqs_sequence_number = Some(sequence.into());
        w.dead_letter_table()
            .expect("a dead-letter table")
            .keep(&record(p, &append("fifo", value)), &rejection())
            .await
            .expect("kept");
    }
    let report = w
        .replay_dead_letters(
            w.dead_letter_table().expect("a dead-letter table"),
            &ReplayScope::all(),
        )
        .await
        .expect("replay");
    assert_eq!(report.replayed.len(), 3, "{report:?}");
    let items = scan(&c, &tables["DocumentTable"]).await;
    assert_eq!(list(&items, "fifo"), json!(["1", "2", "3"]));
}

#[tokio::test]
async fn a_replay_whose_removals_fail_goes_on_and_never_applies_a_letter_twice() {
    let c = client();
    let tables = template_tables(&c, &["DocumentTable", "DeadLetterTable"]).await;
    // Every DeleteItem on the dead-letter table fails (after the appends applied).
    let no_deletes = FaultInjector::by_request(|op, _| match op {
        "DeleteItem" => Fault::Refuse,
        _ => Fault::None,
    });
    let w = document_writer(c.clone(), client_with(Some(no_deletes), 1), &tables);
    for (pk, id) in [("r1", "m-1"), ("r2", "m-2")] {
        let p = position(SourceKind::Sqs, "arn:aws:sqs:us-east-1:1:docs", id);
        w.dead_letter_table()
            .expect("a dead-letter table")
            .keep(&record(p, &append(pk, "x")), &rejection())
            .await
            .expect("kept");
    }
    let first = w
        .replay_dead_letters(
            w.dead_letter_table().expect("a dead-letter table"),
            &ReplayScope::all(),
        )
        .await;
    let first = first.expect("the replay goes on past failed removals");
    assert_eq!(first.replayed.len(), 2, "{first:?}");
    // A second replay, removals working again, removes them without applying them again.
    let healthy = document_writer(c.clone(), c.clone(), &tables);
    let second = healthy
        .replay_dead_letters(
            healthy.dead_letter_table().expect("a dead-letter table"),
            &ReplayScope::all(),
        )
        .await
        .expect("replay");
    assert_eq!(second.removed_applied_earlier.len(), 2, "{second:?}");
    assert!(second.replayed.is_empty(), "{second:?}");
    let items = scan(&c, &tables["DocumentTable"]).await;
    assert_eq!(
        (list(&items, "r1"), list(&items, "r2")),
        (json!(["x"]), json!(["x"]))
    );
    assert!(healthy
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("list")
        .is_empty());
}

#[tokio::test]
async fn exported_letters_are_replayed_only_when_asked() {
    let c = client();
    let tables = template_tables(&c, &["DocumentTable", "DeadLetterTable"]).await;
    let w = document_writer(c.clone(), c.clone(), &tables);
    let p = position(SourceKind::Sqs, "arn:aws:sqs:us-east-1:1:docs", "m-1");
    w.dead_letter_table()
        .expect("a dead-letter table")
        .keep(&record(p, &append("e", "x")), &rejection())
        .await
        .expect("kept");
    let letter = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("list")
        .remove(0);
    // Given a letter an export wrote out (its event may have been invoked since),
    w.dead_letter_table()
        .expect("a dead-letter table")
        .mark_exported(&letter)
        .await
        .expect("marked");
    // a replay leaves it alone,
    let report = w
        .replay_dead_letters(
            w.dead_letter_table().expect("a dead-letter table"),
            &ReplayScope::all(),
        )
        .await
        .expect("replay");
    assert_eq!(report.exported, vec![letter.id.clone()], "{report:?}");
    assert_eq!(
        list(&scan(&c, &tables["DocumentTable"]).await, "e"),
        Value::Null
    );
    // unless asked to take exported letters too.
    let all = ReplayScope::all().with_exported(true);
    let report = w
        .replay_dead_letters(w.dead_letter_table().expect("a dead-letter table"), &all)
        .await
        .expect("replay");
    assert_eq!(report.replayed, vec![letter.id], "{report:?}");
    assert_eq!(
        list(&scan(&c, &tables["DocumentTable"]).await, "e"),
        json!(["x"])
    );
}

#[tokio::test]
async fn a_letter_with_a_missing_part_does_not_hide_the_others() {
    let c = client();
    let tables = template_tables(&c, &["DocumentTable", "DeadLetterTable"]).await;
    let w = document_writer(c.clone(), c.clone(), &tables);
    let big = json!({"op": "list_append", "key": {"PK": "b", "SK": "d"}, "path": "l", "values": ["y".repeat(400 * 1024)]});
    let big = record(position(SourceKind::Sqs, "arn:q", "m-big"), &big);
    let small = record(
        position(SourceKind::Sqs, "arn:q", "m-small"),
        &append("s", "x"),
    );
    w.dead_letter_table()
        .expect("a dead-letter table")
        .keep(&big, &rejection())
        .await
        .expect("kept");
    w.dead_letter_table()
        .expect("a dead-letter table")
        .keep(&small, &rejection())
        .await
        .expect("kept");
    // Given the big letter's second payload part lost (orphaned, or a listing racing a keep),
    let big_id = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("list")[0]
        .id
        .clone();
    c.delete_item()
        .table_name(&tables["DeadLetterTable"])
        .key("Id", AttributeValue::S(part_id(&big_id, 1)))
        .send()
        .await
        .expect("deleted");
    // the listing still has the small one, and names the big one as incomplete.
    let listing = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .listing(&LetterFilter::all())
        .await
        .expect("listing");
    assert_eq!(listing.letters.len(), 1);
    assert_eq!(listing.incomplete.len(), 1, "{:?}", listing.incomplete);
    let report = w
        .replay_dead_letters(
            w.dead_letter_table().expect("a dead-letter table"),
            &ReplayScope::all(),
        )
        .await
        .expect("replay");
    assert_eq!(
        (report.replayed.len(), report.incomplete.len()),
        (1, 1),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_reinjected_record_is_as_old_as_its_event_time() {
    let c = client();
    let tables = template_tables(&c, &["CounterTable", "DeadLetterTable"]).await;
    let protocol = Counter::new(
        c.clone(),
        CounterConfig::builder(&tables["CounterTable"])
            .build()
            .expect("valid configuration"),
    );
    let letters = DeadLetters::new(c.clone(), &tables["DeadLetterTable"], "counter-writer");
    let w = Writer::builder("writer", protocol)
        .dead_letters(letters)
        .deadline_margin(Duration::from_secs(1))
        .event_time(EventTime::new("COUNTER_EVENT_TIME_POINTER", "/eventTime").expect("pointer"))
        .build()
        .expect("valid writer");
    // A record produced two windows ago, moved back from a redrive queue: SQS gives it a new
    // message id and a new SentTimestamp (now).
    let now = dynamodb_exactly_once::__private::epoch_millis();
    let body = json!({
        "key": {"PK": "acct"}, "add": {"n": 1}, "idempotencyKey": "evt-1",
        "eventTime": now - 2 * 3600 * 1000,
    });
    let event = json!({"Records": [{
        "eventSource": "aws:sqs", "messageId": "redriven-1", "body": body.to_string(),
        "eventSourceARN": "arn:aws:sqs:us-east-1:1:counter",
        "attributes": {"SentTimestamp": now.to_string()},
    }]});
    let response = w
        .handle(LambdaEvent::new(event, Context::default()))
        .await
        .expect("handled");
    // It is kept as too old, not counted a second time.
    let response = serde_json::to_value(&response).expect("json");
    assert_eq!(response["batchItemFailures"], json!([]));
    let letters = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("list");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason.code, RejectionCode::TooOld);
    assert!(scan(&c, &tables["CounterTable"]).await.is_empty());
}
