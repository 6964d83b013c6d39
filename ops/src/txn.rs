//! `ops tx ...`: demo helpers for transactions (settings from the environment, as the
//! functions read them). A coordinator that crashes on purpose is `bench crash-tx`.
//!
//! ```text
//! ops tx seed TABLE PK=BALANCE ...          put accounts {PK, balance} (plain items)
//! ops tx status TXID                        the TX record's header
//! ops tx open [--quiet-seconds S]           open transactions, oldest first (sweep index)
//! ```

use aws_sdk_dynamodb::types::AttributeValue;
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once::txn::sweep::{SweepConfig, Sweeper};
use dynamodb_exactly_once::StoreError;
use dynamodb_exactly_once_lambda::client::client_from_env;

/// Transaction helpers.
#[derive(Debug, clap::Subcommand)]
pub enum TxCommand {
    /// Put accounts `PK=BALANCE` into TABLE (for the demo).
    Seed {
        /// The accounts table.
        table: String,
        /// `PK=BALANCE` pairs.
        accounts: Vec<String>,
    },
    /// Print a TX record's state (the TX table from `TX_TABLE`).
    Status {
        /// The transaction id.
        tx_id: String,
    },
    /// List open transactions, oldest sign of life first (from the sweep index: no scan).
    Open {
        /// Only those without a heartbeat for this long.
        #[arg(long, default_value_t = 0)]
        quiet_seconds: u64,
    },
}

pub async fn run(command: TxCommand) -> Result<(), String> {
    match command {
        TxCommand::Seed { table, accounts } => seed(&table, &accounts).await,
        TxCommand::Status { tx_id } => status(&tx_id).await,
        TxCommand::Open { quiet_seconds } => open(quiet_seconds).await,
    }
}

async fn seed(table: &str, accounts: &[String]) -> Result<(), String> {
    let client = client_from_env().await.map_err(|e| e.to_string())?;
    for account in accounts {
        let (pk, balance) = account
            .split_once('=')
            .ok_or_else(|| format!("{account:?}: expected PK=BALANCE"))?;
        let balance: i64 = balance
            .parse()
            .map_err(|_| format!("{account:?}: the balance must be an integer"))?;
        client
            .put_item()
            .table_name(table)
            .item("PK", AttributeValue::S(pk.into()))
            .item("balance", AttributeValue::N(balance.to_string()))
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("PutItem", e).to_string())?;
        println!("{table}: {pk} balance={balance}");
    }
    Ok(())
}

async fn status(tx_id: &str) -> Result<(), String> {
    let table = std::env::var("TX_TABLE").map_err(|_| "TX_TABLE is not set")?;
    let client = client_from_env().await.map_err(|e| e.to_string())?;
    let config = SweepConfig::builder(table)
        .build()
        .map_err(|e| e.to_string())?;
    let sweeper = Sweeper::new(client, config);
    match sweeper.status(tx_id).await.map_err(|e| e.to_string())? {
        Some(s) => println!(
            "{tx_id}: state={} decision={} attempt={} version={} reason={}",
            s.state.as_str(),
            s.decision.map_or("-", |d| d.as_str()),
            s.attempt,
            s.version,
            s.reason.as_ref().map_or("-", |r| r.as_str())
        ),
        None => println!("{tx_id}: no TX record"),
    }
    Ok(())
}

async fn open(quiet_seconds: u64) -> Result<(), String> {
    let table = std::env::var("TX_TABLE").map_err(|_| "TX_TABLE is not set")?;
    let client = client_from_env().await.map_err(|e| e.to_string())?;
    let config = SweepConfig::builder(table)
        .build()
        .expect("valid configuration");
    let sweeper = Sweeper::new(client, config);
    let quiet = std::time::Duration::from_secs(quiet_seconds);
    let open = sweeper
        .open_transactions(quiet)
        .await
        .map_err(|e| e.to_string())?;
    let now = epoch_millis();
    for (tx_id, touched) in &open {
        let age = now.saturating_sub(*touched) / 1000;
        println!("{tx_id}: no sign of life for {age} s");
    }
    println!("{} open transaction(s)", open.len());
    Ok(())
}
