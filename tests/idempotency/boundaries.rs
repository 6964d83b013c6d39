//! The layer's boundaries on DynamoDB Local: a panic releases the key, and a claim
//! holds its key until its deadline however short `expires_after` is. (A run that
//! outlives its claim: `idempotency_interleave.rs`; a result too large for an item:
//! `idempotency_large.rs`.)

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use dev_testing::client;
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once_lambda::idempotency::{
    Claim, ClaimRequest, DynamoDbPersistence, Idempotency, IdempotencyConfig, Persistence, Run,
};
use futures::FutureExt;

use crate::idempotency::table;

fn layer(table: &str, expires_after: Duration) -> Idempotency<DynamoDbPersistence> {
    let config = IdempotencyConfig::builder("payments")
        .cache_keys(0)
        .expires_after(expires_after)
        .build()
        .expect("config");
    Idempotency::new(DynamoDbPersistence::new(client(), table), config)
}

#[tokio::test]
async fn a_function_that_panics_releases_its_key_and_an_immediate_retry_runs() {
    let table = table(&client()).await;
    let idem = layer(&table, Duration::from_secs(3600));
    let deadline = Some(epoch_millis() + 60_000);
    let panicked = AssertUnwindSafe(
        idem.call("charge", "o-1")
            .payload(&1)
            .deadline_ms(deadline)
            .run(|| async {
                if deadline.is_some() {
                    panic!("the charge panicked");
                }
                Ok::<u32, String>(0)
            }),
    )
    .catch_unwind()
    .await;
    assert!(panicked.is_err(), "the panic goes on to the caller");
    let retry = idem
        .call("charge", "o-1")
        .payload(&1)
        .deadline_ms(deadline)
        .run(|| async { Ok::<u32, String>(7) });
    assert_eq!(retry.await.ok(), Some(Run::Ran(7)));
    assert_eq!(idem.stats().failed, 1);
}

#[tokio::test]
async fn a_claim_outlives_a_shorter_expires_after_until_its_deadline() {
    // Given A, claimed with a 10 s deadline under expires_after 1 s, cut off (its future
    // dropped: the claim stays)
    let table = table(&client()).await;
    let idem = layer(&table, Duration::from_secs(1));
    let start = epoch_millis();
    let hung = tokio::time::timeout(
        Duration::from_millis(100),
        idem.call("charge", "o-1")
            .payload(&1)
            .deadline_ms(start + 10_000)
            .run(|| async { std::future::pending::<Result<u32, String>>().await }),
    )
    .await;
    assert!(hung.is_err(), "cut off");

    // When B claims 2.5 s later (past expires_after, before A's deadline)
    let b = ClaimRequest::new(
        "payments#charge#o-1",
        "charge",
        "b",
        start + 2_500,
        start + 12_500,
        1,
    );
    let found = DynamoDbPersistence::new(client(), &table)
        .claim(&b)
        .await
        .expect("answered");

    // Then the key is still A's
    assert!(matches!(found, Claim::Existing(_)), "{found:?}");
}

#[tokio::test]
async fn a_table_with_a_sort_key_keeps_records_under_a_static_partition_key() {
    let name = crate::common::string_key_table(&client(), "IdemSorted", "pk", Some("sk")).await;
    let persistence = DynamoDbPersistence::builder(client(), &name)
        .key_attr("pk")
        .sort_key_attr("sk")
        .static_partition_key("IDEMPOTENCY")
        .build()
        .expect("layout");
    let config = IdempotencyConfig::builder("payments")
        .cache_keys(0)
        .build()
        .expect("config");
    let idem = Idempotency::new(persistence, config);
    let first = idem
        .call("charge", "o-1")
        .payload(&1)
        .run(|| async { Ok::<u32, String>(1) });
    assert_eq!(first.await.ok(), Some(Run::Ran(1)));
    let again = idem
        .call("charge", "o-1")
        .payload(&1)
        .run(|| async { Ok::<u32, String>(2) });
    assert_eq!(again.await.ok(), Some(Run::Replayed(1)));
    let items = client()
        .scan()
        .table_name(&name)
        .send()
        .await
        .expect("scan");
    let item = &items.items()[0];
    assert_eq!(
        item["pk"].as_s().ok().map(String::as_str),
        Some("IDEMPOTENCY")
    );
    assert_eq!(
        item["sk"].as_s().ok().map(String::as_str),
        Some("payments#charge#o-1")
    );
    let same = DynamoDbPersistence::builder(client(), &name)
        .key_attr("sk")
        .sort_key_attr("sk");
    assert!(
        same.build().is_err(),
        "the key and the sort key must differ"
    );
}
