//! A key DynamoDB refuses — a number for a string key, a sort key
//! over 1,024 bytes, any key of a binary-keyed table — is checked against the table's real key
//! schema and refused `invalid_key` before any write, on both paths; a record stranded on such
//! a key by an earlier version is retired by the sweeper (no error, no lock left).

use crate::txn::env::*;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use dev_testing::{client, client_with, FaultInjector};
use dynamodb_exactly_once::txn::{Coordinator, TxError};
use dynamodb_exactly_once::{Deadline, RejectionCode};
use dynamodb_exactly_once_lambda::dead_letter::{DeadLetters, LetterFilter};
use dynamodb_exactly_once_lambda::settings::functions::TX_COORDINATOR;
use dynamodb_exactly_once_lambda::ReplayScope;
use serde_json::{json, Value};
use std::sync::Arc;

use crate::common::scan;

/// A table keyed by `keys` (name, type), hash first.
async fn table_keyed(client: &Client, keys: &[(&str, ScalarAttributeType)]) -> String {
    let name = format!("{}Keyed", dev_testing::unique_prefix());
    let mut create = client
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest);
    for (at, (key, kind)) in keys.iter().enumerate() {
        let key_type = if at == 0 {
            KeyType::Hash
        } else {
            KeyType::Range
        };
        create = create
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(*key)
                    .attribute_type(kind.clone())
                    .build()
                    .expect("definition"),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(*key)
                    .key_type(key_type)
                    .build()
                    .expect("key"),
            );
    }
    create.send().await.expect("create table");
    name
}

fn bump(table: &str, key: Value) -> Value {
    json!({"Update":{"TableName":table,"Key":key,"UpdateExpression":"SET #b = :one",
        "ExpressionAttributeNames":{"#b":"b"},"ExpressionAttributeValues":{":one":1}}})
}

fn coordinator_for(env: &Env, extra: &[&str], fast: bool, counting: &FaultInjector) -> Coordinator {
    let allowed = [env.accounts()].into_iter().chain(extra.iter().copied());
    let config = env
        .builder()
        .fast_path(fast)
        .allowed_tables(allowed)
        .build()
        .expect("valid configuration");
    Coordinator::new(client_with(Some(counting.clone()), 3), config)
}

fn assert_invalid_key(result: &Result<impl std::fmt::Debug, TxError>, what: &str) {
    assert!(
        matches!(result, Err(TxError::Rejected(r)) if r.code == RejectionCode::InvalidKey),
        "{what}: {result:?}"
    );
}

#[tokio::test]
async fn keys_the_table_refuses_are_invalid_key_before_any_write_on_both_paths() {
    let base = client();
    let env = Env::new(&base).await;
    let ledger = table_keyed(
        &base,
        &[
            ("PK", ScalarAttributeType::S),
            ("SK", ScalarAttributeType::S),
        ],
    )
    .await;
    let blobs = table_keyed(&base, &[("PK", ScalarAttributeType::B)]).await;
    let cases = [
        (
            "a number for a string key",
            bump(env.accounts(), json!({"PK": 7})),
        ),
        (
            "a sort key of 1,500 bytes",
            bump(&ledger, json!({"PK": "alice", "SK": "x".repeat(1500)})),
        ),
        ("a binary-keyed table", bump(&blobs, json!({"PK": "a"}))),
    ];
    for fast in [true, false] {
        for (n, (what, request)) in cases.iter().enumerate() {
            let counting = FaultInjector::counting();
            let c = coordinator_for(&env, &[&ledger, &blobs], fast, &counting);
            let body = json!({"txId": format!("t-key-{fast}-{n}"), "requests":[request]});
            let result = c.run(&message(&c, &body), Deadline::none()).await;
            assert_invalid_key(&result, what);
            let calls = counting.calls() - counting.calls_of("DescribeTable");
            assert_eq!(calls, 0, "{what}: no call but DescribeTable: {counting:?}");
        }
    }
    assert!(scan(&base, env.tx()).await.is_empty(), "no TX record");
}

#[tokio::test]
async fn the_sweeper_retires_a_record_stranded_on_a_refused_key() {
    let base = client();
    let env = Env::new(&base).await;
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    // Given a pending record of [a good debit, an update of the number key 7 on a string-keyed
    // table], as an earlier version left it (created, then its read failed)
    let c = env.coordinator(client());
    let body = json!({"txId":"t-stranded","requests":[debit(&table, "alice", 10),
        bump(&table, json!({"PK": 7}))]});
    let canonical = message(&c, &body).requests_json();
    put_pending(&base, &env, "t-stranded", &canonical).await;
    // When the sweeper, keeping dead letters as the coordinator does, runs twice
    let letters = DeadLetters::new(
        client(),
        &env.tables["DeadLetterTable"],
        TX_COORDINATOR.name,
    )
    .for_deployment(Some("tx-coordinator-fn".into()));
    let sweeper = env
        .sweeper(client(), 0, 3600)
        .keeping_retired(Arc::new(letters.clone()));
    let first = sweeper.sweep(Deadline::none()).await.expect("sweep");
    let second = sweeper.sweep(Deadline::none()).await.expect("sweep");
    // Then it rolls the record back and completes it, without an error, and nothing is left
    assert_eq!(
        (first.errors, first.rolled_back, first.dead_letters),
        (0, 1, 1),
        "{first:?}"
    );
    assert_eq!((second.errors, second.stale), (0, 0), "{second:?}");
    assert_clean(&base, &env).await;
    let now = items(&base, &table).await;
    assert_eq!(balance(&now, "alice"), Some(100));
    // in a final state that names the refused request (not `abandoned`, which a redelivery
    // would restart)
    let header = scan(&base, env.tx())
        .await
        .into_values()
        .find(|i| i["Part"] == json!("#"));
    let header = header.expect("the header");
    assert_eq!(
        (header.get("Reason"), header.get("FailedRequest")),
        (Some(&json!("invalid_request")), Some(&json!(1))),
        "{header:?}"
    );
    // and it kept one dead letter of the coordinator's deployment: the reason names the
    // refused request, the payload is the transaction's message (a replay through the
    // coordinator refuses it `invalid_key` again)
    let listing = letters
        .listing(&LetterFilter::all())
        .await
        .expect("listing");
    assert_eq!(listing.letters.len(), 1, "{listing:?}");
    let letter = &listing.letters[0];
    assert_eq!(letter.reason.code, RejectionCode::InvalidKey, "{letter:?}");
    assert!(letter.reason.message.contains("request 1"), "{letter:?}");
    assert!(
        letter
            .id
            .starts_with("tx-coordinator|sqs|tx-coordinator-fn|"),
        "{}",
        letter.id
    );
    assert!(letter.id.contains("t-stranded"), "{}", letter.id);
    let payload: Value = serde_json::from_slice(&letter.payload).expect("JSON payload");
    assert_eq!(payload["txId"], json!("t-stranded"));
    assert_eq!(payload["requests"].as_array().map(Vec::len), Some(2));
    let writer = coordinator_writer(&env, env.coordinator(client()));
    let replay = writer
        .replay_dead_letters(&letters, &ReplayScope::all())
        .await
        .expect("replay");
    let refused: Vec<_> = replay.still_rejected.iter().map(|(_, r)| r.code).collect();
    assert_eq!(refused, [RejectionCode::InvalidKey], "{replay:?}");
    let kept = letters
        .listing(&LetterFilter::all())
        .await
        .expect("listing");
    assert_eq!(kept.letters.len(), 1, "still kept: {kept:?}");
    // And the message, delivered again, is a dead letter with its reason, not a failure
    let again = c.run(&message(&c, &body), Deadline::none()).await;
    assert_invalid_key(&again, "redelivery");
}

#[tokio::test]
async fn a_retired_record_whose_letter_cannot_be_kept_is_kept_by_the_next_sweep() {
    let base = client();
    let env = Env::new(&base).await;
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    // Given a pending record stranded on a refused key
    let c = env.coordinator(client());
    let body = json!({"txId":"t-unkept","requests":[debit(&table, "alice", 10),
        bump(&table, json!({"PK": 7}))]});
    let canonical = message(&c, &body).requests_json();
    put_pending(&base, &env, "t-unkept", &canonical).await;
    // When a sweep cannot keep its letter (no such table), then one can
    let keeping = |table: &str| {
        let letters = DeadLetters::new(client(), table, TX_COORDINATOR.name);
        env.sweeper(client(), 0, 3600)
            .keeping_retired(Arc::new(letters))
    };
    let failed = keeping("NoSuchLetters").sweep(Deadline::none()).await;
    let failed = failed.expect("sweep");
    let kept = keeping(&env.tables["DeadLetterTable"])
        .sweep(Deadline::none())
        .await
        .expect("sweep");
    // Then the first counts an error and leaves the record rolled back in the index; the
    // second keeps the letter and completes it
    assert_eq!((failed.errors, failed.dead_letters), (1, 0), "{failed:?}");
    assert_eq!((kept.errors, kept.dead_letters), (0, 1), "{kept:?}");
    assert_clean(&base, &env).await;
    let letters = DeadLetters::new(
        client(),
        &env.tables["DeadLetterTable"],
        TX_COORDINATOR.name,
    );
    let listing = letters
        .listing(&LetterFilter::all())
        .await
        .expect("listing");
    assert_eq!(listing.letters.len(), 1, "{listing:?}");
}

#[tokio::test]
async fn a_record_naming_one_item_twice_under_older_rules_is_still_finished() {
    let base = client();
    let env = Env::new(&base).await;
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    // Given a pending record whose two requests name one item (what a version before the
    // exact number keys recorded for `{"id": 7}` and `{"id": 7.0}`)
    let body = json!({"txId":"t-twice","requests":[update(&table, "alice", 1),
        update(&table, "alice", 2)]});
    let requests_json = serde_json::to_string(&body["requests"]).expect("json");
    put_pending(&base, &env, "t-twice", &requests_json).await;
    // When the sweeper drives it
    let swept = sweep_all(&env, client()).await;
    // Then it is rolled back and completed: the check for two requests on one item is made
    // when a message is accepted, not again on what was recorded
    assert_eq!((swept.errors, swept.rolled_back), (0, 1), "{swept:?}");
    assert_clean(&base, &env).await;
    let now = items(&base, &table).await;
    assert_eq!(balance(&now, "alice"), Some(100));
}
