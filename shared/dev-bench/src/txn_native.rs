//! The peer: a transfer as a user writes it with native `TransactWriteItems`.

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;

/// One transfer through `TransactWriteItems`: `(committed, write calls, WCU)`; transaction
/// conflicts are retried with backoff.
pub(crate) async fn transfer(
    client: &Client,
    table: &str,
    from: &str,
    to: &str,
    amount: i64,
    record: Option<(&str, String)>,
) -> Result<(bool, u64, f64), String> {
    let item = |pk: &str, expr: &str, condition: bool| -> Result<TransactWriteItem, String> {
        let mut u = Update::builder()
            .table_name(table)
            .key("PK", AttributeValue::S(pk.into()))
            .update_expression(expr)
            .expression_attribute_names("#b", "balance")
            .expression_attribute_values(":a", AttributeValue::N(amount.to_string()));
        if condition {
            u = u.condition_expression("#b >= :a");
        }
        Ok(TransactWriteItem::builder()
            .update(u.build().map_err(|e| e.to_string())?)
            .build())
    };
    let debit = item(from, "SET #b = #b - :a", true)?;
    let credit = item(to, "SET #b = #b + :a", false)?;
    // The peer a careful user writes for idempotency beyond the token's 10 minutes: a record
    // of the transfer put in the same call, only if new.
    let record = match record {
        Some((tx_table, tx_id)) => {
            let put = aws_sdk_dynamodb::types::Put::builder()
                .table_name(tx_table)
                .item("TxId", AttributeValue::S(tx_id))
                .item("Part", AttributeValue::S("#".into()))
                .item("State", AttributeValue::S("completed".into()))
                .condition_expression("attribute_not_exists(TxId)")
                .build()
                .map_err(|e| e.to_string())?;
            Some(TransactWriteItem::builder().put(put).build())
        }
        None => None,
    };
    let mut calls = 0u64;
    let mut backoff = Duration::from_millis(2);
    loop {
        calls += 1;
        let mut entries = vec![debit.clone(), credit.clone()];
        entries.extend(record.clone());
        let result = client
            .transact_write_items()
            .set_transact_items(Some(entries))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => {
                let units = out
                    .consumed_capacity
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|c| c.capacity_units)
                    .sum();
                return Ok((true, calls, units));
            }
            Err(err) => {
                let reasons: Vec<String> = err
                    .as_service_error()
                    .and_then(|e| match e {
                        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c) => Some(c),
                        _ => None,
                    })
                    .map(|e| {
                        e.cancellation_reasons()
                            .iter()
                            .filter_map(|r| r.code().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                if reasons.iter().any(|c| c == "ConditionalCheckFailed") {
                    return Ok((false, calls, 0.0));
                }
                let retryable = reasons.iter().any(|c| c == "TransactionConflict")
                    || err
                        .as_service_error()
                        .is_some_and(|e| e.is_transaction_in_progress_exception());
                if !retryable || calls > 200 {
                    return Err(format!("TransactWriteItems: {err:?}"));
                }
                tokio::time::sleep(backoff + Duration::from_micros(rand::random_range(0..2000)))
                    .await;
                backoff = (backoff * 2).min(Duration::from_millis(50));
            }
        }
    }
}
