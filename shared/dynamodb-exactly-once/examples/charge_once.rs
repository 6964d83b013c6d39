//! "Charge once per order" in a queue consumer that is no Lambda function (a container on ECS
//! reading Kafka or SQS): the library's idempotency, without the Lambda runtime.
//!
//! ```sh
//! cargo run -p dynamodb-exactly-once --features idempotency --example charge_once
//! ```
//!
//! The store here is in memory, so the example runs offline; a consumer with more than one
//! process uses `DynamoDbPersistence::new(client, "Idempotency")` (a table with the string
//! hash key `Id` and TTL on `ExpiresAt`) instead.

use std::sync::atomic::{AtomicU32, Ordering};

use dynamodb_exactly_once::idempotency::{Idempotency, IdempotencyConfig, InMemory, Run};
use serde_json::json;

type Error = Box<dyn std::error::Error>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let config = IdempotencyConfig::builder("payments-consumer").build()?;
    let idempotency = Idempotency::new(InMemory::new(), config);
    let charges = AtomicU32::new(0);
    // The broker delivers order o-1 twice (a consumer restarted before committing its offset).
    let messages = [
        json!({"orderId": "o-1", "amount": 250}),
        json!({"orderId": "o-2", "amount": 90}),
        json!({"orderId": "o-1", "amount": 250}),
    ];
    for message in &messages {
        let order = message["orderId"].as_str().ok_or("no orderId")?;
        let run = idempotency
            .call("charge", order)
            .payload(message)
            .run(|| async {
                let n = charges.fetch_add(1, Ordering::SeqCst) + 1;
                Ok::<_, std::io::Error>(format!("receipt-{n}"))
            })
            .await?;
        match run {
            Run::Ran(receipt) => println!("{order}: charged, {receipt}"),
            Run::Replayed(receipt) => println!("{order}: a duplicate, charged before: {receipt}"),
            other => println!("{order}: {other:?}"),
        }
    }
    assert_eq!(charges.load(Ordering::SeqCst), 2, "each order charged once");
    Ok(())
}
