//! Record mappings: the ready writers on an event shape that already exists, by a setting
//! alone. The source's own id as the idempotency key makes redelivery a duplicate; a body that
//! does not fit is kept as a `mapping_failed` dead letter with its original bytes.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::client;
use dev_testing::events::{batch, sqs_batch};
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
use dynamodb_exactly_once::Item;
use dynamodb_exactly_once::{Deadline, Protocol};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::mapping::RecordMapping;
use dynamodb_exactly_once_lambda::source::SourceKind;
use dynamodb_exactly_once_lambda::Writer;
use serde_json::{json, Value};

use crate::common::raw_item;

fn mapped<P: Protocol>(
    client: &Client,
    tables: &BTreeMap<String, String>,
    name: &str,
    protocol: P,
    template: &str,
) -> Writer<P> {
    let letters = DeadLetters::new(client.clone(), &tables["DeadLetterTable"], name);
    Writer::builder(name, protocol)
        .dead_letters(letters)
        .deadline_margin(Duration::from_secs(1))
        .mapping(RecordMapping::new("X_RECORD_MAPPING", template).expect("template"))
        .build()
        .expect("valid writer")
}

fn key(pk: &str, sk: &str) -> Item {
    Item::from([
        ("PK".into(), AttributeValue::S(pk.into())),
        ("SK".into(), AttributeValue::S(sk.into())),
    ])
}

#[tokio::test]
async fn the_counter_counts_an_existing_event_shape_once_per_source_message() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &["CounterTable", "DeadLetterTable"]).await;
    let counter = Counter::new(
        client.clone(),
        CounterConfig::builder(&tables["CounterTable"])
            .build()
            .expect("valid configuration"),
    );
    let writer = mapped(
        &client,
        &tables,
        "counter-mapped",
        counter,
        r#"{"key":{"PK":"=customer#{/customer}","SK":"=totals"},
            "add":{"amount":"/amount","events":1},"idempotencyKey":"$id"}"#,
    );
    // Given events as an existing producer sends them, one without an amount
    let events = [
        json!({"customer": "c1", "eventTime": 1_700_000_000_000_u64, "amount": 250}),
        json!({"customer": "c1", "eventTime": 1_700_000_000_001_u64, "amount": 50}),
        json!({"customer": "c2", "eventTime": 1_700_000_000_002_u64, "amount": 7}),
        json!({"customer": "c2", "eventTime": 1_700_000_000_003_u64}),
    ];
    // When the batch is delivered twice (SQS redelivers the same message ids)
    for _ in 0..2 {
        let report = writer
            .handle_batch(&sqs_batch(&events, 0), Deadline::none())
            .await;
        assert!(
            report.response.failed_ids().is_empty(),
            "{:?}",
            report.summary
        );
    }
    // Then each message counts once, and the one that does not fit is kept with its reason
    let table = &tables["CounterTable"];
    let c1 = raw_item(&client, table, key("customer#c1", "totals"))
        .await
        .expect("c1");
    assert_eq!((&c1["amount"], &c1["events"]), (&json!(300), &json!(2)));
    let c2 = raw_item(&client, table, key("customer#c2", "totals"))
        .await
        .expect("c2");
    assert_eq!((&c2["amount"], &c2["events"]), (&json!(7), &json!(1)));
    let letters = writer
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("letters");
    let codes: Vec<&str> = letters.iter().map(|l| l.reason.code.as_str()).collect();
    assert_eq!(codes, ["mapping_failed"]);
    assert!(
        letters[0].reason.message.contains("/amount"),
        "{:?}",
        letters[0].reason
    );
    let kept: Value = serde_json::from_slice(&letters[0].payload).expect("original body");
    assert_eq!(kept, events[3]);
}

#[tokio::test]
async fn the_ratchet_keeps_the_newest_version_of_an_existing_event_shape() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &["RatchetTable", "DeadLetterTable"]).await;
    let ratchet = Ratchet::new(
        client.clone(),
        RatchetConfig::builder(&tables["RatchetTable"])
            .build()
            .expect("valid configuration"),
    );
    let writer = mapped(
        &client,
        &tables,
        "ratchet-mapped",
        ratchet,
        r#"{"op":"=put","key":{"PK":"=user#{/user}","SK":"=profile"},"ts":"/version",
            "item":{"name":"/name","source":"$id"}}"#,
    );
    // Given two versions of a profile on Kinesis, the newer first
    let events = [
        json!({"user": "u1", "version": 2, "name": "Ann B."}),
        json!({"user": "u1", "version": 1, "name": "Ann"}),
    ];
    let report = writer
        .handle_batch(&batch(SourceKind::Kinesis, &events, 0), Deadline::none())
        .await;
    assert!(
        report.response.failed_ids().is_empty(),
        "{:?}",
        report.summary
    );
    // Then the newer one is stored, with the sequence number it came with
    let item = raw_item(&client, &tables["RatchetTable"], key("user#u1", "profile"))
        .await
        .expect("item");
    assert_eq!(item["name"], json!("Ann B."));
    assert_eq!(item["source"], json!(format!("{:020}", 0)));
}
