//! `ops tx ...`: demo helpers for transactions (settings from the environment, as the
//! functions read them).
//!
//! ```text
//! ops tx seed TABLE PK=BALANCE ...          put accounts {PK, balance} (plain items)
//! ops tx abandon --fail-after K EVENT.json  run the first message of an SQS event with a
//!                                           coordinator that dies after its K-th DynamoDB call
//! ops tx status TXID                        the TX record's header
//! ```

use aws_sdk_dynamodb::types::AttributeValue;
use shared::source::{Batch, Deadline};
use shared::testing::{client_with, FaultInjector};
use shared::txn::{Coordinator, TxConfig};

use crate::args::Args;

pub async fn run(mut args: Args) -> Result<(), String> {
    match args.next_positional().as_deref() {
        Some("seed") => seed(args).await,
        Some("abandon") => abandon(args).await,
        Some("status") => status(args).await,
        other => Err(format!(
            "tx: unknown command {other:?} (seed, abandon, status)"
        )),
    }
}

async fn seed(mut args: Args) -> Result<(), String> {
    let table = args
        .next_positional()
        .ok_or("tx seed TABLE PK=BALANCE ...")?;
    let client = shared::store::client_from_env().await;
    for account in args.positionals() {
        let (pk, balance) = account
            .split_once('=')
            .ok_or_else(|| format!("{account:?}: expected PK=BALANCE"))?;
        let balance: i64 = balance
            .parse()
            .map_err(|_| format!("{account:?}: the balance must be an integer"))?;
        client
            .put_item()
            .table_name(&table)
            .item("PK", AttributeValue::S(pk.into()))
            .item("balance", AttributeValue::N(balance.to_string()))
            .send()
            .await
            .map_err(|e| shared::error::StoreError::from_sdk("PutItem", e).to_string())?;
        println!("{table}: {pk} balance={balance}");
    }
    Ok(())
}

async fn abandon(mut args: Args) -> Result<(), String> {
    let k: usize = args.parsed("fail-after", 5)?;
    let path = args
        .next_positional()
        .ok_or("tx abandon --fail-after K EVENT.json")?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let event: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let batch = Batch::from_event(event).map_err(|e| e.to_string())?;
    let record = batch.records.first().ok_or("the event has no record")?;
    let config = TxConfig::from_env().map_err(|e| e.to_string())?;
    let coordinator = Coordinator::new(client_with(Some(FaultInjector::fail_from(k)), 1), config);
    let message = coordinator
        .parse_message(&record.body)
        .map_err(|e| e.to_string())?;
    match coordinator.run(&message, Deadline::none()).await {
        Ok(report) => println!(
            "transaction {} finished before call {k}: {:?}",
            message.tx_id, report.outcome
        ),
        Err(err) => println!(
            "coordinator of transaction {} died after {k} DynamoDB calls ({err})",
            message.tx_id
        ),
    }
    Ok(())
}

async fn status(mut args: Args) -> Result<(), String> {
    let tx_id = args.next_positional().ok_or("tx status TXID")?;
    let table = std::env::var("TX_TABLE").map_err(|_| "TX_TABLE is not set")?;
    let client = shared::store::client_from_env().await;
    let tx = shared::txn::record::TxTable::new(client, table);
    match tx.get(&tx_id).await.map_err(|e| e.to_string())? {
        Some(h) => println!(
            "{tx_id}: state={} decision={} attempt={} version={} reason={}",
            h.state.as_str(),
            h.decision().map_or("-", |d| d.as_str()),
            h.attempt,
            h.version,
            h.reason.as_deref().unwrap_or("-")
        ),
        None => println!("{tx_id}: no TX record"),
    }
    Ok(())
}
