//! A replica's source items whose attribute names are the replica's own protocol attributes
//! (`Timestamp`, `TieBreak`, `Deleted`, `TTL` by default): refused and kept as dead letters,
//! never dropped or read as a tombstone; a ratchet-written source still replicates.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dev_testing::client;
use dev_testing::events::stream_batch;
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once::Item;

use crate::streams::{replica_writer, s, stream_record, typed_scan, TABLES};

#[tokio::test]
async fn source_attributes_named_like_replica_attributes_are_refused_not_reinterpreted() {
    let client = client();
    let tables = dev_testing::template_tables(&client, &TABLES).await;
    let writer = replica_writer(client.clone(), &tables);
    let key = |sk: &str| -> Item { HashMap::from([("PK".into(), s("c")), ("SK".into(), s(sk))]) };
    let with = |sk: &str, name: &str, value: AttributeValue| -> Item {
        let mut item = key(sk);
        item.insert(name.into(), value);
        item
    };
    // Given source items that use the replica's protocol names for their own data: a
    // soft-delete flag, a business timestamp, an expiry.
    let soft_deleted = with("o1", "Deleted", AttributeValue::Bool(true));
    let stamped = with("o2", "Timestamp", AttributeValue::N("5".into()));
    let expiring = with("o3", "TTL", AttributeValue::N("1900000000".into()));
    let records = [
        stream_record(
            "100000000000000000001",
            "INSERT",
            &key("o1"),
            Some(&soft_deleted),
            None,
        ),
        stream_record(
            "100000000000000000002",
            "INSERT",
            &key("o2"),
            Some(&stamped),
            None,
        ),
        stream_record(
            "100000000000000000003",
            "MODIFY",
            &key("o3"),
            Some(&expiring),
            None,
        ),
    ];
    // When they are replicated
    let report = writer
        .handle_batch(&stream_batch(&records), Deadline::none())
        .await;
    // Then each is refused as reserved_attribute (kept, naming the attribute and its setting),
    // and nothing reaches the replica: no tombstone, no silently dropped attribute.
    assert!(
        report.response.failed_ids().is_empty(),
        "{:?}",
        report.summary
    );
    assert_eq!(
        report.summary.outcomes.get("invalid"),
        Some(&3),
        "{:?}",
        report.summary
    );
    let kept = writer
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    assert_eq!(kept.len(), 3);
    for letter in &kept {
        assert_eq!(
            letter.reason.code.as_str(),
            "reserved_attribute",
            "{letter:?}"
        );
        assert!(
            letter.reason.message.contains("RATCHET_"),
            "names the setting: {}",
            letter.reason.message
        );
    }
    let replica = typed_scan(&client, &tables["OrdersReplicaTable"]).await;
    assert!(replica.is_empty(), "{replica:?}");
}
