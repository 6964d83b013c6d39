//! `ops`: the operator CLI for the writers (no test or benchmark code; those live in
//! `shared/dev-bench`).
//!
//! ```text
//! ops create-tables [--template template.yaml] [--prefix P] [LogicalId ...]
//! ops scan TABLE                                   items as JSON lines
//! ops show TABLE                                   items as a readable table
//! ops dead-letters list   --table T --function F [--deployment D] [--kind K] [--source-arn A]
//! ops dead-letters export --table T --function F --kind K ...
//!                                                  the source's event, for `cargo lambda invoke`;
//!                                                  marks the letters exported
//! ops dead-letters replay --table T --function F [--deployment D] [--force] [--include-exported]
//!                                                  re-run kept records in source order (settings
//!                                                  from env), remove those that now succeed;
//!                                                  --force: too_old ones too
//! ops dead-letters forget-exported --table T --function F ...   remove exported letters
//! ops mapping try --function F --event E.json [--mapping TEMPLATE]
//!                                                  the records an event maps to, or the exact
//!                                                  error (nothing written)
//! ops counter repair --from-queue URL | --messages FILE | --from YYYY-MM-DD --to YYYY-MM-DD
//!                                                  recount UTC days of the counter journal
//!                                                  exactly: those of the roll-up mapping's
//!                                                  on-failure messages, or those given
//!                                                  (COUNTER_* settings from env)
//! ops counter audit [--repair] [--from D --to D]  the journal's day sums against the counter
//!                                                  items'; every difference (and repaired)
//! ops tx seed TABLE PK=BALANCE ...                 accounts for the transaction demo
//! ops tx status TXID                               a TX record's state (TX_TABLE from env)
//! ops tx open [--quiet-seconds S]                  open transactions, oldest first
//! ```
//!
//! Endpoint, region and credentials come from the standard AWS environment
//! (`AWS_ENDPOINT_URL_DYNAMODB` for DynamoDB Local).

mod counter;
mod counter_messages;
mod dead_letters;
mod mapping;
mod stream_events;
mod tables;
mod txn;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Operator tools for the DynamoDB stream writers.
#[derive(Debug, Parser)]
#[command(name = "ops", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the template's DynamoDB tables (all, or the logical ids given).
    CreateTables {
        /// The SAM template.
        #[arg(long, default_value = "template.yaml")]
        template: PathBuf,
        /// Prefix of the table names.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Logical ids of the tables to create (default: every table).
        only: Vec<String>,
    },
    /// Every item of a table as JSON lines.
    Scan {
        /// The table.
        table: String,
    },
    /// Every item of a table, readable.
    Show {
        /// The table.
        table: String,
    },
    /// Dead letters of one function (one deployment): list, export, replay, forget exported.
    DeadLetters {
        /// What to do.
        #[arg(value_enum)]
        action: dead_letters::Action,
        #[command(flatten)]
        scope: dead_letters::Scope,
    },
    /// Record mappings: `try` one on an event file, nothing written.
    Mapping {
        #[command(subcommand)]
        command: mapping::MappingCommand,
    },
    /// The counter's journal mode: `repair` days the roll-up could not read.
    Counter {
        #[command(subcommand)]
        command: counter::CounterCommand,
    },
    /// Transaction helpers.
    Tx {
        #[command(subcommand)]
        command: txn::TxCommand,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::CreateTables {
            template,
            prefix,
            only,
        } => tables::create(&template, &prefix, &only).await,
        Command::Scan { table } => tables::scan(&table, false).await,
        Command::Show { table } => tables::scan(&table, true).await,
        Command::DeadLetters { action, scope } => dead_letters::run(action, scope).await,
        Command::Mapping { command } => mapping::run(command),
        Command::Counter { command } => counter::run(command).await,
        Command::Tx { command } => txn::run(command).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("ops: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `ops mapping try` on an SQS event: each record's mapped body, or the exact error; a
    /// misspelled field refuses before any record is read.
    #[test]
    fn mapping_try_prints_each_mapped_record_or_the_exact_error() {
        let event = json!({"Records": [
            {"messageId": "m-1", "eventSource": "aws:sqs", "body": "{\"customer\":1.0,\"amount\":\"250\"}",
             "attributes": {"SentTimestamp": "1700000000000"}, "eventSourceARN": "arn:aws:sqs:eu-west-1:1:q"},
            {"messageId": "m-2", "eventSource": "aws:sqs", "body": "{\"amount\":1}",
             "attributes": {}, "eventSourceARN": "arn:aws:sqs:eu-west-1:1:q"},
            {"messageId": "m-3", "eventSource": "aws:sqs",
             "body": json!({"customer": "c".repeat(3000), "amount": "1.5"}).to_string(),
             "attributes": {}, "eventSourceARN": "arn:aws:sqs:eu-west-1:1:q"}
        ]});
        // The counter's settings, so that each mapped record is parsed by it too (this test's
        // process reads no other COUNTER_ variable).
        std::env::set_var("COUNTER_TABLE", "counters");
        let path =
            std::env::temp_dir().join(format!("ops-mapping-try-{}.json", std::process::id()));
        std::fs::write(&path, event.to_string()).expect("event file");
        let template = r#"{"key":{"PK":"=customer#{/customer}"},"add":{"n":"/amount|number"},"idempotencyKey":"$id"}"#;
        let args = |template: &str| {
            let path = path.to_string_lossy().to_string();
            let cli = Cli::try_parse_from([
                "ops",
                "mapping",
                "try",
                "--function",
                "counter-writer",
                "--event",
                &path,
                "--mapping",
                template,
            ])
            .expect("arguments");
            match cli.command {
                Command::Mapping { command } => mapping::outcome(command),
                other => panic!("{other:?}"),
            }
        };
        let outcome = args(template).expect("tried");
        assert_eq!(outcome.misfits, 2);
        assert_eq!(
            outcome.lines[0]["record"],
            json!({"key":{"PK":"customer#1"},"add":{"n":250},"idempotencyKey":"m-1"})
        );
        assert_eq!(
            outcome.lines[1]["rejected"]["code"],
            json!("mapping_failed")
        );
        assert_eq!(
            outcome.lines[1]["rejected"]["message"],
            json!("the body has no value at `/customer`")
        );
        // Mapped (a decimal delta, exactly), then refused by the counter: its key is over
        // DynamoDB's 2,048 bytes.
        assert_eq!(outcome.lines[2]["record"]["add"], json!({"n": 1.5}));
        assert_eq!(outcome.lines[2]["rejected"]["code"], json!("invalid_key"));
        let wrong = template.replace("idempotencyKey", "idempotency_key");
        let err = args(&wrong).expect_err("misspelled");
        assert!(err.contains("did you mean `idempotencyKey`"), "{err}");
        std::fs::remove_file(&path).ok();
    }

    /// The runbook's repair commands (`docs/operate.md`, `CounterRollupStreamFailuresAlarm`)
    /// are ones this CLI takes as written (the integration tests `counter_journal_repair` and
    /// `counter_journal_audit` run what they do).
    #[test]
    fn the_runbooks_repair_commands_parse_as_written() {
        let page = include_str!("../../docs/operate.md");
        let lines: Vec<&str> = page
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("ops counter repair "))
            .collect();
        assert!(lines.len() >= 2, "{lines:?}");
        for line in lines {
            let args = line
                .replace("<QUEUE_URL>", "https://sqs.eu-west-1.amazonaws.com/1/q")
                .replace("<FILE>", "messages.json")
                .replace("<FIRST_DAY>", "2026-11-25")
                .replace("<LAST_DAY>", "2026-11-26");
            let cli = Cli::try_parse_from(args.split_whitespace()).expect("arguments");
            match cli.command {
                Command::Counter {
                    command:
                        counter::CounterCommand::Repair {
                            from_queue,
                            messages,
                            from,
                            to,
                        },
                } => {
                    let given = [from_queue.is_some(), messages.is_some(), from.is_some()];
                    assert_eq!(given.iter().filter(|g| **g).count(), 1, "{line}");
                    assert_eq!(from.is_some(), to.is_some(), "{line}");
                }
                other => panic!("{other:?}"),
            }
        }
        let audits: Vec<&str> = page
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("ops counter audit"))
            .collect();
        assert!(!audits.is_empty());
        for line in audits {
            let args = line
                .replace("<FIRST_DAY>", "2026-11-25")
                .replace("<LAST_DAY>", "2026-11-26");
            let cli = Cli::try_parse_from(args.split_whitespace()).expect("arguments");
            assert!(
                matches!(
                    cli.command,
                    Command::Counter {
                        command: counter::CounterCommand::Audit { .. }
                    }
                ),
                "{line}"
            );
        }
        let both = "ops counter repair --from-queue q --from 2026-11-25 --to 2026-11-26";
        assert!(Cli::try_parse_from(both.split_whitespace()).is_err());
        let half = "ops counter repair --from 2026-11-25";
        assert!(Cli::try_parse_from(half.split_whitespace()).is_err());
        assert!(Cli::try_parse_from(["ops", "counter", "repair"]).is_err());
    }
}
