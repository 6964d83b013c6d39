//! Two protocols per record: each order event adds to its customer's totals (the counter,
//! once per event) and keeps the order's newest state (the ratchet, newest `version` wins).
//!
//! **Partial success.** Both steps are idempotent, so the rule is simple: run them in order,
//! and report the record if any step fails (`?` on a `StoreError` retries it, unless DynamoDB
//! refused the request as invalid, which can never succeed). The source delivers it
//! again; the steps that were done answer `duplicate` / `stale` (no second count, no older
//! state), the failed one runs again. A record one of the protocols refuses (`Rejection`) can
//! never succeed: it is rejected (kept as a dead letter) whatever the other step did; the
//! dead letter's replay runs both steps again, each idempotent.
//!
//! Settings: `TOTALS_TABLE` (the counter), `ORDERS_TABLE` (the ratchet), optional
//! `ORDERS_DEAD_LETTER_TABLE`.

use std::sync::Arc;

use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
use dynamodb_exactly_once::ItemKey;
use dynamodb_exactly_once_lambda::client::client_from_env;
use dynamodb_exactly_once_lambda::dead_letter::{DeadLetters, ReportOnly};
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError};
use serde::{Deserialize, Serialize};

const FUNCTION: &str = "orders";

/// What producers send.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderEvent {
    event_id: String,
    order_id: String,
    customer: String,
    version: u64,
    status: String,
    amount_cents: i64,
}

#[derive(Debug)]
struct Protocols {
    totals: Counter,
    orders: Ratchet,
}

async fn handle(p: Arc<Protocols>, record: Record<OrderEvent>) -> Result<(), RecordError> {
    let e = &record.body;
    // `?` converts: a `Rejection` keeps its code (a dead letter), a `StoreError` is retried
    // unless the request can never succeed (`rejected_by_dynamodb`).
    let key =
        |pk: String| ItemKey::partition("PK", pk).map_err(|k| RecordError::reject(k.to_string()));
    // 1. The customer's totals, once per event.
    let count = p.totals.record(
        key(format!("customer#{}", e.customer))?,
        [("orders", 1), ("amountCents", e.amount_cents)],
        e.event_id.as_str(),
    )?;
    // `Duplicate` is not an error: the event was counted once already.
    let _outcome = p.totals.add(&count).await?;
    // 2. The order's newest state.
    let state = p
        .orders
        .put_record(key(format!("order#{}", e.order_id))?, e.version, e)?;
    // `Stale` or `Duplicate` is not an error: a newer (or the same) state is stored.
    let _outcome = p.orders.write(&state).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dynamodb_exactly_once_lambda::telemetry::init();
    let client = client_from_env().await?;
    let protocols = Arc::new(Protocols {
        totals: Counter::new(
            client.clone(),
            CounterConfig::builder(std::env::var("TOTALS_TABLE")?).build()?,
        ),
        orders: Ratchet::new(
            client.clone(),
            RatchetConfig::builder(std::env::var("ORDERS_TABLE")?).build()?,
        ),
    });
    let builder = Processor::builder(FUNCTION, move |r| handle(Arc::clone(&protocols), r));
    let builder = match std::env::var("ORDERS_DEAD_LETTER_TABLE") {
        Ok(table) => builder.dead_letters(DeadLetters::new(client, table, FUNCTION)),
        // No table: rejected records are reported for the source's own DLQ (chosen
        // explicitly: on a stream, the records held back behind one share its fate).
        Err(_) => builder.dead_letters(ReportOnly),
    };
    lambda_runtime::run(builder.build()?).await
}
