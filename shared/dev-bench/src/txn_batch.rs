//! `bench txn` part: one SQS batch of 100 independent two-account transfers through the
//! `tx-coordinator` pipeline (`Writer<Coordinator>`), on the fast path and on the lock path:
//! DynamoDB requests per transfer and the batch's wall time; then the same batch delivered
//! again (every transfer a duplicate).

use std::time::Instant;

use dev_testing::{client_with, template_tables, FaultInjector};
use dynamodb_exactly_once::txn::{Coordinator, TxConfig};
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::Writer;
use serde_json::{json, Value};

use crate::common::spawn_worker;

/// Transfers in the batch (one SQS batch takes up to 10,000 messages; 100 is the shape the
/// issue measured).
const TRANSFERS: usize = 100;

pub fn print() -> Result<(), String> {
    println!(
        "{:<34} {:>9} {:>14} {:>11} {:>12} {:>10}",
        "SQS batch of 100 transfers",
        "requests",
        "requests/xfer",
        "writes/xfer",
        "wall_ms",
        "failures"
    );
    for path in ["group", "fast", "native", "lock"] {
        let r = spawn_worker(&["txn".into(), "batch".into(), path.into()])?;
        let deliveries: &[&str] = if path == "native" {
            &["first"]
        } else {
            &["first", "again"]
        };
        for &delivery in deliveries {
            let d = &r[delivery];
            let num = |k: &str| d.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            let label = match (path, delivery) {
                ("group", "first") => "TX fast path, group commit",
                ("group", _) => "TX group commit, redelivered",
                ("fast", "first") => "TX fast path, one call each",
                ("fast", _) => "TX fast path, redelivered",
                ("native", _) => "TransactWriteItems, one each",
                (_, "first") => "TX lock path",
                _ => "TX lock path, redelivered",
            };
            println!(
                "{:<34} {:>9.0} {:>14.2} {:>11.2} {:>12.1} {:>10.0}",
                label,
                num("requests"),
                num("requests") / TRANSFERS as f64,
                num("write_calls") / TRANSFERS as f64,
                num("millis"),
                num("failures"),
            );
        }
    }
    println!("requests: every DynamoDB request of the batch (DescribeTable, once per process, included);");
    println!("8 transfers at a time (TX_CONCURRENCY's default).");
    Ok(())
}

fn transfer(table: &str, i: usize) -> Value {
    let update = |pk: String, delta: i64, guarded: bool| {
        let mut u = json!({"TableName":table,"Key":{"PK":pk},
            "UpdateExpression":"SET #b = #b + :d","ExpressionAttributeNames":{"#b":"balance"},
            "ExpressionAttributeValues":{":d":delta}});
        if guarded {
            u["ConditionExpression"] = json!("#b >= :need");
            u["ExpressionAttributeValues"][":need"] = json!(-delta);
        }
        json!({ "Update": u })
    };
    json!({"txId":format!("batch-{i}"),"requests":[
        update(format!("acc{}", 2 * i), -10, true),
        update(format!("acc{}", 2 * i + 1), 10, false)]})
}

pub async fn batch(path: &str) -> Result<Value, String> {
    let counting = FaultInjector::counting();
    let client = client_with(Some(counting.clone()), 3);
    let t = template_tables(&client, &["TxTable", "AccountsTable", "DeadLetterTable"]).await;
    let accounts = &t["AccountsTable"];
    for a in 0..2 * TRANSFERS {
        client
            .put_item()
            .table_name(accounts)
            .item(
                "PK",
                aws_sdk_dynamodb::types::AttributeValue::S(format!("acc{a}")),
            )
            .item(
                "balance",
                aws_sdk_dynamodb::types::AttributeValue::N("100".into()),
            )
            .send()
            .await
            .map_err(|e| format!("seed: {e}"))?;
    }
    if path == "native" {
        return native_batch(&client, accounts, &counting).await;
    }
    let config = TxConfig::builder(&t["TxTable"], [accounts])
        .fast_path(path != "lock")
        .group_commit(path == "group")
        .build()
        .expect("valid configuration");
    let coordinator = Coordinator::new(client.clone(), config);
    let writer = Writer::builder("tx-coordinator", coordinator)
        .dead_letters(DeadLetters::new(
            client,
            &t["DeadLetterTable"],
            "tx-coordinator",
        ))
        .build()
        .expect("valid writer");
    let bodies: Vec<Value> = (0..TRANSFERS).map(|i| transfer(accounts, i)).collect();
    let batch = dev_testing::events::sqs_batch(&bodies, 0);
    let mut out = json!({});
    for delivery in ["first", "again"] {
        let before = counting.calls();
        let started = Instant::now();
        let report = writer.handle_batch(&batch, Deadline::none()).await;
        out[delivery] = json!({
            "requests": counting.calls() - before,
            "write_calls": report.summary.write_calls,
            "millis": started.elapsed().as_secs_f64() * 1000.0,
            "failures": report.summary.reported_failures,
        });
    }
    Ok(out)
}

/// The same 100 transfers as one `TransactWriteItems` each, 8 at a time.
async fn native_batch(
    client: &aws_sdk_dynamodb::Client,
    accounts: &str,
    counting: &FaultInjector,
) -> Result<Value, String> {
    use futures::StreamExt;
    let before = counting.calls();
    let started = Instant::now();
    let runs = (0..TRANSFERS).map(|i| {
        let (from, to) = (format!("acc{}", 2 * i), format!("acc{}", 2 * i + 1));
        async move { crate::txn_native::transfer(client, accounts, &from, &to, 10, None).await }
    });
    let results: Vec<Result<(bool, u64, f64), String>> = futures::stream::iter(runs)
        .buffer_unordered(8)
        .collect()
        .await;
    let failures = results
        .iter()
        .filter(|r| !matches!(r, Ok((true, _, _))))
        .count();
    let requests = counting.calls() - before;
    Ok(json!({"first": {
        "requests": requests,
        "write_calls": requests,
        "millis": started.elapsed().as_secs_f64() * 1000.0,
        "failures": failures,
    }}))
}
