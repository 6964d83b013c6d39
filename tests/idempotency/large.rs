//! Results too large for one item, on DynamoDB Local.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once_lambda::idempotency::{
    DynamoDbPersistence, Idempotency, IdempotencyConfig, NoValue, Run,
};

use crate::idempotency::table;

#[tokio::test]
async fn a_result_too_large_for_an_item_is_recorded_completed_and_never_runs_again() {
    let client = dev_testing::client();
    let table = table(&client).await;
    let config = IdempotencyConfig::builder("reports")
        .cache_keys(0)
        .build()
        .expect("config");
    let idem = Idempotency::new(DynamoDbPersistence::new(client, &table), config);
    let runs = AtomicUsize::new(0);
    let big = || async {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok::<String, String>("x".repeat(450_000))
    };
    let first = idem
        .call("report", "k")
        .payload(&1)
        .deadline_ms(epoch_millis() + 500)
        .run(big)
        .await;
    assert!(matches!(first, Ok(Run::Ran(_))), "{first:?}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let again = idem
        .call("report", "k")
        .payload(&1)
        .deadline_ms(epoch_millis() + 500)
        .run(big)
        .await;
    assert_eq!(
        again.ok(),
        Some(Run::ReplayedWithoutValue(NoValue::NotKept)),
        "completed, its result not kept"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the function ran again");
}
