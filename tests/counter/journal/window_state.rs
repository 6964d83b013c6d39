//! The window's state as the roll-up reads and writes it (`Rollup::apply_window` called as
//! the mapping calls it): a state of the previous format is applied exactly, a state past
//! `APPLY_AT_BYTES` is applied in part at once (its items with the most keys), and a key that cannot count in a held state is one
//! dead letter while the rest counts.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use dev_testing::client;
use dynamodb_exactly_once::counter::journal::{
    Rollup, RollupBatchReport, RollupConfig, WindowOutcome, APPLY_AT_BYTES,
};
use dynamodb_exactly_once::counter::CounterConfig;
use dynamodb_exactly_once::{ChangeKind, ItemChange};

use crate::counter::journal::{key, tables};

const SHARD: &str = "shardId-00000001700000000000-0000000a";

/// The roll-up holding a window's keys in its state.
fn holding(client: Client, counters: &str, journal: &str) -> Rollup {
    let counter = CounterConfig::builder(counters).journal(journal).build();
    let config = RollupConfig::builder(counter.expect("counter config"))
        .hold_in_window(true)
        .build();
    Rollup::new(client, config.expect("config"))
}

/// The stream record of a journal `INSERT` of key `idem` adding `delta` to `n` of item `pk`.
fn insert(seq: u64, pk: &str, delta: &str, idem: &str) -> ItemChange {
    insert_hashed(seq, pk, delta, URL_SAFE_NO_PAD.encode(key_hash(idem)))
}

/// [`insert`] of a key whose journal sort key is `hash`.
fn insert_hashed(seq: u64, pk: &str, delta: &str, hash: String) -> ItemChange {
    let s = |v: &str| AttributeValue::S(v.to_string());
    let item = key(pk).to_item().expect("key");
    let keys = HashMap::from([
        ("pk".to_string(), s(&format!("tag-{pk}"))),
        ("sk".to_string(), s(&hash)),
    ]);
    let mut image = keys.clone();
    image.insert("k".into(), AttributeValue::M(item));
    let add = HashMap::from([("n".to_string(), AttributeValue::N(delta.into()))]);
    image.insert("add".into(), AttributeValue::M(add));
    let now = dynamodb_exactly_once::__private::epoch_millis();
    image.insert("at".into(), AttributeValue::N(now.to_string()));
    ItemChange::new(
        format!("e{seq}"),
        ChangeKind::Insert,
        keys,
        format!("{seq:021}"),
    )
    .with_images(Some(image), None)
}

/// 16 bytes standing for the hash of idempotency key `idem` (as random as the journal's).
fn key_hash(idem: &str) -> [u8; 16] {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let half = |salt: &str| {
        BuildHasherDefault::<DefaultHasher>::default()
            .hash_one((salt, idem))
            .to_be_bytes()
    };
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&half("0"));
    bytes[8..].copy_from_slice(&half("1"));
    bytes
}

/// `n` of item `pk` as stored (`None`: no item or no `n`).
async fn stored(client: &Client, counters: &str, pk: &str) -> Option<String> {
    let item = client
        .get_item()
        .table_name(counters)
        .set_key(Some(key(pk).to_item().expect("key")))
        .consistent_read(true)
        .send()
        .await
        .expect("get");
    match item.item?.get("n")? {
        AttributeValue::N(n) => Some(n.clone()),
        _ => None,
    }
}

/// The answer of an invocation that does not fail.
fn answer(outcome: WindowOutcome) -> (RollupBatchReport, Option<String>) {
    match outcome {
        WindowOutcome::Answer { report, state } => (report, state),
        other => panic!("not an answer: {other:?}"),
    }
}

#[tokio::test]
async fn a_state_of_the_previous_format_is_applied_exactly() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let rollup = holding(c.clone(), &counters, &journal);
    // Given a state as the previous version answered it (format 1: JSON): 1 + 2 on a, 4 on b.
    let at = dynamodb_exactly_once::__private::epoch_millis();
    let group = |pk: &str, keys: &str| {
        format!(r#"{{"p":"tag-{pk}","i":{{"PK":"{pk}","SK":"day"}},"k":[{keys}]}}"#)
    };
    let v1 = format!(
        r#"{{"v":1,"g":[{},{}]}}"#,
        group(
            "a",
            &format!(r#"["100","h1",[["n","1"]],{at},null],["200","h2",[["n","2"]],{at},null]"#)
        ),
        group("b", &format!(r#"["150","h3",[["n","4"]],{at},1700000000]"#)),
    );
    // When a batch comes with it, then the window ends.
    let (report, state) = answer(
        rollup
            .apply_window(SHARD, &[insert(300, "a", "8", "k300")], Some(&v1), false)
            .await,
    );
    assert_eq!((report.held, report.applied), (4, 0), "{report:?}");
    let v2 = state.expect("held");
    assert!(v2.starts_with("2."), "written in format 2: {v2}");
    assert_eq!(stored(&c, &counters, "a").await, None);
    let (report, state) = answer(rollup.apply_window(SHARD, &[], Some(&v2), true).await);
    assert_eq!((report.applied, state), (4, None), "{report:?}");
    // Then each key counts once, also when either state is applied again.
    for (again, keys) in [(&v1, 3), (&v2, 4)] {
        let (report, _) = answer(rollup.apply_window(SHARD, &[], Some(again), true).await);
        assert_eq!((report.applied, report.duplicates), (0, keys), "{report:?}");
    }
    assert_eq!(stored(&c, &counters, "a").await.as_deref(), Some("11"));
    assert_eq!(stored(&c, &counters, "b").await.as_deref(), Some("4"));
}

#[tokio::test]
async fn a_state_past_the_threshold_applies_its_largest_items_at_once_and_keeps_the_rest() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let rollup = holding(c.clone(), &counters, &journal);
    const BATCH: u64 = 200;
    // Keys of 880-character sort keys (about 890 bytes each in the state, where a real key
    // takes 25 to 37: the threshold is reached with 25 times fewer keys).
    let batch = |from: u64| -> Vec<ItemChange> {
        (from..from + BATCH)
            .map(|i| {
                let hash = (0..40).map(|j| URL_SAFE_NO_PAD.encode(key_hash(&format!("{i}.{j}"))));
                let item = ["a", "b"][usize::from(i % 2 == 1)];
                insert_hashed(1_000 + i, item, "1", hash.collect())
            })
            .collect()
    };
    // Batches held until the state would pass the threshold.
    let mut state: Option<String> = None;
    let mut sent = 0;
    let (applied_early, state_after_early) = loop {
        let (report, next) = answer(
            rollup
                .apply_window(SHARD, &batch(sent), state.as_deref(), false)
                .await,
        );
        sent += BATCH;
        assert!(
            report.state_bytes < APPLY_AT_BYTES,
            "{}",
            report.state_bytes
        );
        if report.applied > 0 {
            break (report, next);
        }
        assert_eq!(report.held, sent as usize);
        state = next;
        assert!(sent < 100_000, "never applied early");
    };
    // Half the keys were applied: those of one item (the item with the most keys), with one
    // update; the other's are kept, and the state answered is under the threshold.
    assert_eq!(
        applied_early.applied,
        (sent / 2) as usize,
        "{applied_early:?}"
    );
    assert_eq!(applied_early.item_updates, 1);
    assert_eq!(applied_early.held, (sent / 2) as usize);
    assert!(applied_early.state_bytes < APPLY_AT_BYTES / 2 + 100_000);
    let stored_now = (
        stored(&c, &counters, "a").await,
        stored(&c, &counters, "b").await,
    );
    let half = Some((sent / 2).to_string());
    assert!(
        stored_now == (half.clone(), None) || stored_now == (None, half),
        "{stored_now:?}"
    );
    // The window goes on from the kept keys; its end applies them and the later ones.
    let kept = state_after_early.expect("the other item's keys kept");
    let (report, state) = answer(
        rollup
            .apply_window(SHARD, &batch(sent), Some(&kept), false)
            .await,
    );
    assert_eq!(report.held, (sent / 2 + BATCH) as usize);
    let (report, _) = answer(
        rollup
            .apply_window(SHARD, &[], state.as_deref(), true)
            .await,
    );
    assert_eq!(report.applied, (sent / 2 + BATCH) as usize);
    let total = Some(((sent + BATCH) / 2).to_string());
    assert_eq!(stored(&c, &counters, "a").await, total);
    assert_eq!(stored(&c, &counters, "b").await, total);
}

#[tokio::test]
async fn a_key_that_cannot_count_in_a_held_state_is_one_dead_letter_and_the_rest_counts() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let rollup = holding(c.clone(), &counters, &journal);
    let nines = "9".repeat(38);
    // Held: 38 nines on a, 1 on b; the final batch: 38 nines again on a (the sum would need
    // 39 digits: DynamoDB refuses it), 2 on b.
    let held = [insert(100, "a", &nines, "x1"), insert(200, "b", "1", "y1")];
    let (_, state) = answer(rollup.apply_window(SHARD, &held, None, false).await);
    let last = [insert(300, "a", &nines, "x2"), insert(400, "b", "2", "y2")];
    let (report, state) = answer(
        rollup
            .apply_window(SHARD, &last, state.as_deref(), true)
            .await,
    );
    assert_eq!(state, None);
    assert_eq!((report.applied, report.dead_letters), (3, 1), "{report:?}");
    let letter = &report.letters[0];
    assert_eq!(letter.seq, format!("{:021}", 300));
    assert!(!letter.reason.is_empty(), "{letter:?}");
    assert_eq!(stored(&c, &counters, "a").await, Some(nines));
    assert_eq!(stored(&c, &counters, "b").await.as_deref(), Some("3"));
    // The letter is kept in the journal table, once.
    let dead = c
        .query()
        .table_name(&journal)
        .key_condition_expression("pk = :p")
        .expression_attribute_values(":p", AttributeValue::S("~dead".into()))
        .send()
        .await
        .expect("query");
    assert_eq!(dead.count(), 1, "{:?}", dead.items());
}
