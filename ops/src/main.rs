//! `ops`: operator and developer tools for the writers.
//!
//! ```text
//! ops create-tables [--template template.yaml] [--prefix P] [LogicalId ...]
//! ops scan TABLE                                   items as JSON lines
//! ops show TABLE                                   items as a readable table
//! ops dead-letters list   --table T --function F
//! ops dead-letters export --table T --function F   an SQS-shaped event, for `cargo lambda invoke`
//! ops dead-letters replay --table T --function F   re-run kept records (settings from env), remove
//!                                                  those that now succeed
//! ops bench ratchet [--records N --keys K]         benchmark against DynamoDB Local
//! ops bench counter                                counter writer vs one UpdateItem per record
//! ops bench txn [--transfers N]                    transaction protocol vs TransactWriteItems
//! ops tx seed|abandon|status ...                   transaction demo helpers (ops/src/txn.rs)
//! ```
//!
//! Endpoint, region and credentials come from the standard AWS environment
//! (`AWS_ENDPOINT_URL_DYNAMODB` for DynamoDB Local).

mod args;
mod bench;
mod dead_letters;
mod tables;
mod txn;

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = args::Args::from_env();
    let result = match args.next_positional().as_deref() {
        Some("create-tables") => tables::create(args).await,
        Some("scan") => tables::scan(args, false).await,
        Some("show") => tables::scan(args, true).await,
        Some("dead-letters") => dead_letters::run(args).await,
        Some("tx") => txn::run(args).await,
        Some("bench") => bench::run(args).await,
        Some("bench-worker") => bench::worker(args).await,
        other => Err(format!(
            "unknown command {other:?}; see the usage in ops/src/main.rs or the README"
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("ops: {message}");
            ExitCode::FAILURE
        }
    }
}
