//! **Powertools-equivalent**: the algorithm of Powertools for AWS Lambda's idempotency utility
//! (Python `idempotent_function` over each record, DynamoDB persistence, default settings),
//! re-implemented in Rust in this bench; not Powertools itself. Per record:
//!
//! 1. `PutItem` of an `INPROGRESS` record `id = <function>.<handler>#md5(idempotency key)`,
//!    on `attribute_not_exists(#id) OR #expiry < :now OR (#status = :inprogress AND
//!    attribute_exists(#in_progress_expiry) AND #in_progress_expiry < :now_in_millis)` with
//!    `ReturnValuesOnConditionCheckFailure=ALL_OLD`;
//! 2. the handler: `UpdateItem ADD n :one` on the counter item (`UPDATED_NEW`);
//! 3. `UpdateItem` of the record: `SET #data = :data, #expiry = :expiry, #status = :completed`.
//!
//! A redelivery's put fails its condition (billed by the record's size) and the stored result
//! is returned. Powertools' local cache (`use_local_cache`) is off by default: a warm process
//! makes the same call as a cold one.

use std::time::Instant;

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use dynamodb_exactly_once::__private::{epoch_millis, epoch_seconds};
use md5::{Digest, Md5};

use super::setup::{count_labels, item_key, Env, Event, Regime, Row};

/// Powertools' default `expires_after_seconds`.
const EXPIRES_AFTER: u64 = 3600;
/// How long an `INPROGRESS` record blocks others (Powertools: the Lambda's remaining time).
const IN_PROGRESS_MS: u64 = 60_000;
const CONDITION: &str = "attribute_not_exists(#id) OR #expiry < :now OR (#status = :inprogress \
                         AND attribute_exists(#in_progress_expiry) AND #in_progress_expiry < :now_in_millis)";

struct Tables {
    records: String,
    counters: String,
}

/// Powertools' record key of an idempotency key.
fn record_id(key: &str) -> String {
    let digest = Md5::digest(serde_json::to_string(key).unwrap_or_default().as_bytes());
    format!("counter-writer.handler#{}", hex::encode(digest))
}

/// One record through the idempotency utility: its outcome label.
async fn process(env: &Env, t: &Tables, (item, key): &Event) -> Result<&'static str, String> {
    let id = record_id(key);
    let (now, now_ms) = (epoch_seconds(), epoch_millis());
    let put = env
        .ddb
        .put_item()
        .table_name(&t.records)
        .item("id", AttributeValue::S(id.clone()))
        .item(
            "expiration",
            AttributeValue::N((now + EXPIRES_AFTER).to_string()),
        )
        .item(
            "in_progress_expiration",
            AttributeValue::N((now_ms + IN_PROGRESS_MS).to_string()),
        )
        .item("status", AttributeValue::S("INPROGRESS".into()))
        .condition_expression(CONDITION)
        .expression_attribute_names("#id", "id")
        .expression_attribute_names("#expiry", "expiration")
        .expression_attribute_names("#status", "status")
        .expression_attribute_names("#in_progress_expiry", "in_progress_expiration")
        .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
        .expression_attribute_values(":now_in_millis", AttributeValue::N(now_ms.to_string()))
        .expression_attribute_values(":inprogress", AttributeValue::S("INPROGRESS".into()))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await;
    match put {
        Ok(_) => {}
        Err(err) => {
            return match err.into_service_error() {
                PutItemError::ConditionalCheckFailedException(c) => {
                    let status = c
                        .item()
                        .and_then(|i| i.get("status"))
                        .and_then(|s| s.as_s().ok());
                    match status.map(String::as_str) {
                        // The stored result is returned: `data` is already in the item.
                        Some("COMPLETED") => Ok("duplicate"),
                        _ => Ok("in_progress"),
                    }
                }
                other => Err(format!("put record: {other:?}")),
            };
        }
    }
    let result = handler(env, t, *item).await?;
    env.ddb
        .update_item()
        .table_name(&t.records)
        .key("id", AttributeValue::S(id))
        .update_expression("SET #data = :data, #expiry = :expiry, #status = :completed")
        .expression_attribute_names("#data", "data")
        .expression_attribute_names("#expiry", "expiration")
        .expression_attribute_names("#status", "status")
        .expression_attribute_values(":data", AttributeValue::S(result))
        .expression_attribute_values(
            ":expiry",
            AttributeValue::N((now + EXPIRES_AFTER).to_string()),
        )
        .expression_attribute_values(":completed", AttributeValue::S("COMPLETED".into()))
        .send()
        .await
        .map_err(|e| format!("save result: {e:?}"))?;
    Ok("applied")
}

/// The handler: add 1 to the counter item; its result is the new value, as JSON.
async fn handler(env: &Env, t: &Tables, item: usize) -> Result<String, String> {
    let out = env
        .ddb
        .update_item()
        .table_name(&t.counters)
        .set_key(Some(item_key(item).to_item().map_err(|e| e.to_string())?))
        .update_expression("ADD #n :one")
        .expression_attribute_names("#n", "n")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .return_values(ReturnValue::UpdatedNew)
        .send()
        .await
        .map_err(|e| format!("handler: {e:?}"))?;
    let n = out
        .attributes()
        .and_then(|a| a.get("n"))
        .and_then(|n| n.as_n().ok())
        .cloned()
        .unwrap_or_default();
    Ok(format!("{{\"n\":{n}}}"))
}

/// The Powertools-equivalent in every regime (records of an invocation one after another, as
/// Powertools' batch processor handles them).
pub async fn run(env: &Env, regimes: &[Regime]) -> Result<Vec<Row>, String> {
    let t = Tables {
        records: env.table("pt_records", &["id"], false).await?,
        counters: env.table("pt_counters", &["PK", "SK"], false).await?,
    };
    let mut rows = Vec::new();
    for regime in regimes {
        let before = env.meter.tally();
        let mut labels = Vec::new();
        let started = Instant::now();
        for inv in &regime.invocations {
            for event in inv {
                labels.push(process(env, &t, event).await?);
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        let tally = env.meter.tally().since(&before);
        rows.push(Row {
            design: "Powertools-equivalent (Rust)",
            regime: regime.name,
            events: regime.events(),
            writer_wcu: tally.wcu,
            writer_calls: tally.total_calls(),
            writer_ops: tally.ops(),
            seconds,
            rollup: None,
            outcomes: count_labels(labels),
        });
    }
    Ok(rows)
}
