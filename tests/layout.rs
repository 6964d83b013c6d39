//! Renaming the ratchet's protocol attributes or the counter's attribute prefix after data
//! exists: an item written under other names is recognised on first contact and refused
//! (`layout_mismatch`), never overwritten by an older record, read as live, or counted twice;
//! items of unchanged settings keep working.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::client;
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::ratchet::{
    Ratchet, RatchetConfig, RatchetConfigBuilder, RatchetOutcome,
};
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once::{Item, ItemKey, Read};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::Writer;
use serde_json::{json, Value};

use crate::common::{delete, put, raw_item, sqs_batch, write_one};

fn writer(
    client: &Client,
    tables: &BTreeMap<String, String>,
    configure: impl FnOnce(RatchetConfigBuilder) -> RatchetConfigBuilder,
) -> Writer<Ratchet> {
    let config = configure(RatchetConfig::builder(&tables["RatchetTable"]))
        .build()
        .expect("valid configuration");
    Writer::builder("ratchet-writer", Ratchet::new(client.clone(), config))
        .dead_letters(DeadLetters::new(
            client.clone(),
            &tables["DeadLetterTable"],
            "ratchet-writer",
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer")
}

fn key(sk: &str) -> Item {
    Item::from([
        ("PK".into(), AttributeValue::S("u".into())),
        ("SK".into(), AttributeValue::S(sk.into())),
    ])
}

/// The dead-letter codes after one batch of `bodies` (message ids from `offset`; nothing
/// reported for redelivery).
async fn codes_after<P: dynamodb_exactly_once::Protocol>(
    writer: &Writer<P>,
    bodies: &[Value],
    offset: usize,
) -> Vec<String> {
    let report = writer
        .handle_batch(&sqs_batch(bodies, offset), Deadline::none())
        .await;
    assert!(
        report.response.failed_ids().is_empty(),
        "{:?}",
        report.summary
    );
    let kept = writer
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    kept.iter()
        .map(|l| l.reason.code.as_str().to_string())
        .collect()
}

#[tokio::test]
async fn renamed_ratchet_attributes_are_refused_on_first_contact_not_overwritten() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &["RatchetTable", "DeadLetterTable"]).await;
    let table = tables["RatchetTable"].clone();
    // Given items written under the default names: a put at ts 10, a tombstone at ts 10.
    let defaults = writer(&client, &tables, |c| c);
    let v10 = put("u", "a", 10, json!({"v": "ten"}));
    assert_eq!(write_one(&defaults, v10).await, RatchetOutcome::Applied);
    assert_eq!(
        write_one(&defaults, delete("u", "b", 10)).await,
        RatchetOutcome::Applied
    );

    // When the timestamp attribute is renamed and an older record arrives
    let renamed_ts = writer(&client, &tables, |c| c.ts_attribute("V"));
    let older = put("u", "a", 5, json!({"v": "five"}));
    // Then it is refused, and the newer item is untouched.
    assert_eq!(
        codes_after(&renamed_ts, &[older], 0).await,
        ["layout_mismatch"]
    );
    let stored = raw_item(&client, &table, key("a")).await.expect("item");
    assert_eq!(stored["v"], json!("ten"));

    // When the tombstone flag is renamed, the old tombstone does not read as a live item.
    let renamed_flag = writer(&client, &tables, |c| c.deleted_attribute("Gone"));
    let b = ItemKey::from_json(&json!({"PK": "u", "SK": "b"})).expect("key");
    let read = renamed_flag.protocol().get_json(&b, Read::Consistent).await;
    assert!(read.is_err(), "a tombstone of other names read as {read:?}");

    // Items written under one non-default layout are refused under another.
    let under_w = writer(&client, &tables, |c| c.ts_attribute("W"));
    assert_eq!(
        write_one(&under_w, put("u", "c", 10, json!({"v": 1}))).await,
        RatchetOutcome::Applied
    );
    let under_x = writer(&client, &tables, |c| c.ts_attribute("X"));
    let codes = codes_after(&under_x, &[put("u", "c", 5, json!({"v": 2}))], 1).await;
    assert_eq!(codes, ["layout_mismatch", "layout_mismatch"]);
    assert_eq!(
        raw_item(&client, &table, key("c")).await.expect("item")["v"],
        json!(1)
    );

    // An item without a marker under non-default names is of another layout: every
    // release writes the marker, so only the defaults (or a foreign writer) leave none.
    let unmarked = Item::from([
        ("PK".into(), AttributeValue::S("u".into())),
        ("SK".into(), AttributeValue::S("d".into())),
        ("W".into(), AttributeValue::N("10".into())),
        (
            "TieBreak".into(),
            AttributeValue::S(format!("0{}", "a".repeat(64))),
        ),
    ]);
    client
        .put_item()
        .table_name(&table)
        .set_item(Some(unmarked))
        .send()
        .await
        .expect("put");
    let codes = codes_after(&under_w, &[put("u", "d", 11, json!({"v": 3}))], 2).await;
    assert_eq!(codes, ["layout_mismatch"; 3]);
    // A ratchet that renamed only the tombstone flag creates new items.
    assert_eq!(
        write_one(&renamed_flag, put("u", "e", 1, json!({"v": 4}))).await,
        RatchetOutcome::Applied
    );
    assert_eq!(
        write_one(&defaults, put("u", "a", 11, json!({"v": "eleven"}))).await,
        RatchetOutcome::Applied
    );
}

/// A counter writer of `prefix`, keeping its dead letters under its own `name`.
fn counter_writer(
    client: &Client,
    tables: &BTreeMap<String, String>,
    prefix: &str,
    name: &str,
) -> Writer<Counter> {
    let config = CounterConfig::builder(&tables["CounterTable"])
        .attribute_prefix(prefix)
        .build()
        .expect("valid configuration");
    Writer::builder(name, Counter::new(client.clone(), config))
        .dead_letters(DeadLetters::new(
            client.clone(),
            &tables["DeadLetterTable"],
            name,
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer")
}

fn count(sk: &str, idempotency_key: &str) -> Value {
    json!({"key": {"PK": "c", "SK": sk}, "add": {"n": 1}, "idempotencyKey": idempotency_key})
}

async fn total(client: &Client, table: &str, sk: &str) -> Value {
    let key = Item::from([
        ("PK".into(), AttributeValue::S("c".into())),
        ("SK".into(), AttributeValue::S(sk.into())),
    ]);
    raw_item(client, table, key).await.expect("item")["n"].clone()
}

#[tokio::test]
async fn a_renamed_counter_prefix_is_refused_on_first_contact_not_counted_twice() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &["CounterTable", "DeadLetterTable"]).await;
    let table = tables["CounterTable"].clone();
    // Given an item counted under the default prefix
    let defaults = counter_writer(&client, &tables, "ctr_", "defaults");
    assert!(codes_after(&defaults, &[count("a", "k1")], 0)
        .await
        .is_empty());

    // When the prefix is renamed and the same record is delivered again
    let renamed = counter_writer(&client, &tables, "c2_", "renamed");
    // Then it is refused (its key is in a bucket of the other names), not counted again.
    assert_eq!(
        codes_after(&renamed, &[count("a", "k1")], 1).await,
        ["layout_mismatch"]
    );
    assert_eq!(total(&client, &table, "a").await, json!(1));

    // An item counted under a non-default prefix is refused under the defaults and under
    // another non-default prefix.
    let renamed_b = counter_writer(&client, &tables, "c2_", "renamed-b");
    assert!(codes_after(&renamed_b, &[count("b", "k2")], 2)
        .await
        .is_empty());
    assert_eq!(
        codes_after(&defaults, &[count("b", "k2")], 3).await,
        ["layout_mismatch"]
    );
    let other = counter_writer(&client, &tables, "c3_", "other");
    assert_eq!(
        codes_after(&other, &[count("b", "k2")], 4).await,
        ["layout_mismatch"]
    );
    assert_eq!(total(&client, &table, "b").await, json!(1));

    // Unchanged settings keep working: a new key and a redelivery, on both items.
    let defaults_a = counter_writer(&client, &tables, "ctr_", "defaults-a");
    assert!(
        codes_after(&defaults_a, &[count("a", "k3"), count("a", "k1")], 5)
            .await
            .is_empty()
    );
    assert!(
        codes_after(&renamed_b, &[count("b", "k4"), count("b", "k2")], 7)
            .await
            .is_empty()
    );
    assert_eq!(total(&client, &table, "a").await, json!(2));
    assert_eq!(total(&client, &table, "b").await, json!(2));
}
