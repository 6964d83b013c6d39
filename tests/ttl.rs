//! Tombstone expiry through DynamoDB's TTL, on a DynamoDB Local of its own that holds only this
//! test's tables, so the TTL process (DynamoDB Local: about ten seconds after expiry) is not
//! slowed down by the other tests' tables.

use crate::common;

use common::*;
use dev_testing::{client_for, private_endpoint};
use serde_json::json;

#[tokio::test]
async fn tombstones_expire_through_the_tables_ttl() {
    // Given a table created from template.yaml (TTL enabled on `TTL`) and a one-second
    // tombstone lifetime
    let client = client_for(&private_endpoint(), None, 3);
    let (mut w, tables) = ratchet_writer(client.clone()).await;
    w = crate::common::with_protocol(
        &w,
        dynamodb_exactly_once::ratchet::Ratchet::new(
            client.clone(),
            w.protocol()
                .config()
                .to_builder()
                .tombstone_ttl(std::time::Duration::from_secs(1))
                .build()
                .expect("valid configuration"),
        ),
    );
    let _ = write_one(&w, put("u", "live", 1, json!({"v": 1}))).await;
    let _ = write_one(&w, delete("u", "gone", 1)).await;

    // When DynamoDB's TTL process runs (DynamoDB Local: within about ten seconds)
    let started = std::time::Instant::now();
    let mut items = scan(&client, &tables["RatchetTable"]).await;
    while items.contains_key("u|gone") && started.elapsed() < std::time::Duration::from_secs(90) {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        items = scan(&client, &tables["RatchetTable"]).await;
    }

    // Then the tombstone is gone and the live item stays
    assert!(
        !items.contains_key("u|gone"),
        "the expired tombstone was removed by TTL"
    );
    assert!(items.contains_key("u|live"));
}
