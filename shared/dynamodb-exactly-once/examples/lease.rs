//! The fenced lease lock from a plain binary: a holder that pauses past its lease is taken
//! over, and its late writes are refused because they carry its older fencing token.
//!
//! ```sh
//! AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 AWS_REGION=us-east-1 \
//! AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \
//!   cargo run -p dynamodb-exactly-once --example lease
//! ```
//!
//! It creates two tables when they do not exist: `ExampleLocks` (hash key `LockId`) and
//! `ExampleReports` (hash key `PK`). Worker A acquires the lock and writes; A pauses (a GC, a
//! frozen container) without heart-beating; worker B sees the lock's record version unchanged
//! for a full lease on its own clock and takes over with a greater token; B writes; A wakes up
//! and, still believing it holds the lock, writes again: the ratchet (token as `ts`) and a
//! plain conditional write (`#fence <= :token`) both refuse it.

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::lease::{AcquireOutcome, Holding, Lease, LeaseConfig};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig, RatchetOutcome};

type Error = Box<dyn std::error::Error>;

/// Any conditional write can be fenced: refuse a token older than the newest one seen.
const CONDITION_FENCE: &str = "attribute_not_exists(#fence) OR #fence <= :token";

#[tokio::main]
async fn main() -> Result<(), Error> {
    let config = aws_config::load_from_env().await;
    let client = Client::new(&config);
    let (lease, ratchet) = setup(&client).await?;

    let a = holder(
        lease
            .acquire("nightly-report", "worker-a", Duration::from_secs(5))
            .await?,
    )?;
    println!("lease: worker-a acquired, fencing token {}", a.token());
    println!(
        "lease: worker-a writes       -> {:?}",
        report(&ratchet, &a).await?
    );
    println!("lease: worker-a pauses for 1.5 s (lease 1 s) without heart-beating ...");
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let b = take_over(&lease).await?;
    println!(
        "lease: worker-b writes       -> {:?}",
        report(&ratchet, &b).await?
    );
    println!(
        "lease: fenced update by b    -> {}",
        fenced_update(&client, &b).await?
    );

    println!(
        "lease: worker-a wakes up and writes without checking remaining() ({:?} left)",
        a.remaining()
    );
    let late = report(&ratchet, &a).await?;
    println!(
        "lease: worker-a writes late  -> {late:?} (token {} < {})",
        a.token(),
        b.token()
    );
    println!(
        "lease: fenced update by a    -> {}",
        fenced_update(&client, &a).await?
    );
    let mut a = a;
    println!(
        "lease: worker-a heartbeat    -> {:?}",
        lease.heartbeat(&mut a).await?
    );
    println!(
        "lease: worker-b releases     -> {:?}",
        lease.release(b).await?
    );
    Ok(())
}

/// The tables, a lock with a 1 s lease, and the ratchet on the reports.
async fn setup(client: &Client) -> Result<(Lease, Ratchet), Error> {
    ensure_table(client, "ExampleLocks", "LockId").await?;
    ensure_table(client, "ExampleReports", "PK").await?;
    let config = LeaseConfig::builder("ExampleLocks")
        .lease(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(100))
        .build()?;
    let ratchet = Ratchet::new(
        client.clone(),
        RatchetConfig::builder("ExampleReports").build()?,
    );
    Ok((Lease::new(client.clone(), config), ratchet))
}

/// Worker B waits for the lock: it takes over once A's record version stayed unchanged for a
/// full lease on B's own clock.
async fn take_over(lease: &Lease) -> Result<Holding, Error> {
    let started = tokio::time::Instant::now();
    let outcome = lease
        .acquire("nightly-report", "worker-b", Duration::from_secs(5))
        .await?;
    if let AcquireOutcome::Acquired { took_over_from, .. } = &outcome {
        println!(
            "lease: worker-b took over from {took_over_from:?} after watching the record version for {} ms",
            started.elapsed().as_millis()
        );
    }
    let b = holder(outcome)?;
    println!("lease: worker-b holds it, fencing token {}", b.token());
    Ok(b)
}

fn holder(outcome: AcquireOutcome) -> Result<Holding, Error> {
    match outcome {
        AcquireOutcome::Acquired { holding, .. } => Ok(holding),
        AcquireOutcome::Held { by, .. } => Err(format!("the lock is held by {by}").into()),
        other => Err(format!("not acquired: {other:?}").into()),
    }
}

/// The report, written through the ratchet with the fencing token as its timestamp.
async fn report(ratchet: &Ratchet, holding: &Holding) -> Result<RatchetOutcome, Error> {
    let body = serde_json::json!({
        "op": "put", "key": {"PK": "report"}, "ts": holding.fenced_ts(0),
        "item": {"writtenBy": holding.owner(), "token": holding.token()},
    });
    let record = ratchet.parse_record(body.to_string().as_bytes())?;
    Ok(ratchet.write(&record).await?)
}

/// A plain `UpdateItem` fenced by [`CONDITION_FENCE`].
async fn fenced_update(client: &Client, holding: &Holding) -> Result<&'static str, Error> {
    let token = AttributeValue::N(holding.token().to_string());
    let result = client
        .update_item()
        .table_name("ExampleReports")
        .key("PK", AttributeValue::S("config".into()))
        .update_expression("SET #fence = :token, #by = :by")
        .condition_expression(CONDITION_FENCE)
        .expression_attribute_names("#fence", "Fence")
        .expression_attribute_names("#by", "WrittenBy")
        .expression_attribute_values(":token", token)
        .expression_attribute_values(":by", AttributeValue::S(holding.owner().into()))
        .send()
        .await;
    // A failed condition is an expected result, decided while the typed error is in hand.
    match result {
        Ok(_) => Ok("applied"),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
        {
            Ok("refused (an older token)")
        }
        Err(e) => Err(e.into()),
    }
}

async fn ensure_table(client: &Client, name: &str, key: &str) -> Result<(), Error> {
    let tables = client.list_tables().send().await?;
    if tables.table_names().iter().any(|t| t == name) {
        return Ok(());
    }
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key)
                .attribute_type(ScalarAttributeType::S)
                .build()?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key)
                .key_type(KeyType::Hash)
                .build()?,
        )
        .send()
        .await?;
    Ok(())
}
