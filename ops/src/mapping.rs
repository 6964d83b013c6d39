//! `mapping try`: a function's record mapping tried on an event file, nothing written.
//!
//! ```text
//! ops mapping try --function counter-writer --event events/orders.json [--mapping TEMPLATE]
//! ```
//!
//! The template is `--mapping` or the function's `<PREFIX>_RECORD_MAPPING`, checked against
//! the protocol's record shape as at start-up. Each record prints as one JSON line: its id and
//! the record the writer would read (`record`), or the exact rejection (`rejected`: code and
//! message, as the dead letter would keep it). When the protocol's settings are in the
//! environment too, each mapped record is also parsed by the protocol (its verdict is part of
//! `rejected`). Exit status 1 when a record does not fit.

use std::path::PathBuf;

use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::config::Configured;
use dynamodb_exactly_once::counter::Counter;
use dynamodb_exactly_once::document::Document;
use dynamodb_exactly_once::ratchet::Ratchet;
use dynamodb_exactly_once::txn::Coordinator;
use dynamodb_exactly_once::{Protocol, Rejection};
use dynamodb_exactly_once_lambda::mapping::{RecordMapping, RecordShape, Tried};
use dynamodb_exactly_once_lambda::settings::functions::{
    COUNTER_WRITER, DOCUMENT_WRITER, RATCHET_WRITER, TX_COORDINATOR,
};
use dynamodb_exactly_once_lambda::settings::FunctionSpec;
use serde_json::{json, Value};

/// Record mapping tools.
#[derive(Debug, clap::Subcommand)]
pub enum MappingCommand {
    /// Print the records an event's bodies map to, or the exact error.
    Try {
        /// The writer function (`counter-writer`, `ratchet-writer`, `document-writer`,
        /// `tx-coordinator`): its record shape and settings.
        #[arg(long)]
        function: String,
        /// A Lambda event (SQS or Kinesis) as JSON.
        #[arg(long)]
        event: PathBuf,
        /// The template (default: the function's `<PREFIX>_RECORD_MAPPING`).
        #[arg(long)]
        mapping: Option<String>,
    },
}

/// What `mapping try` prints: one JSON line per record, and how many do not fit.
#[derive(Debug)]
pub struct Outcome {
    pub lines: Vec<Value>,
    pub misfits: usize,
}

pub fn run(command: MappingCommand) -> Result<(), String> {
    let outcome = outcome(command)?;
    for line in &outcome.lines {
        println!("{line}");
    }
    let fit = outcome.lines.len() - outcome.misfits;
    eprintln!(
        "{} record(s): {fit} fit, {} do not",
        outcome.lines.len(),
        outcome.misfits
    );
    match outcome.misfits {
        0 => Ok(()),
        n => Err(format!("{n} record(s) do not fit the mapping")),
    }
}

pub fn outcome(command: MappingCommand) -> Result<Outcome, String> {
    let MappingCommand::Try {
        function,
        event,
        mapping,
    } = command;
    let text = std::fs::read_to_string(&event)
        .map_err(|e| format!("cannot read {}: {e}", event.display()))?;
    let event: Value =
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", event.display()))?;
    let mapping = mapping.as_deref();
    match function.as_str() {
        f if f == RATCHET_WRITER.name => try_with::<Ratchet>(RATCHET_WRITER, mapping, event),
        f if f == COUNTER_WRITER.name => try_with::<Counter>(COUNTER_WRITER, mapping, event),
        f if f == DOCUMENT_WRITER.name => try_with::<Document>(DOCUMENT_WRITER, mapping, event),
        f if f == TX_COORDINATOR.name => try_with::<Coordinator>(TX_COORDINATOR, mapping, event),
        other => Err(format!(
            "mapping try does not know the function {other:?} (ratchet-writer, counter-writer, \
             document-writer, tx-coordinator)"
        )),
    }
}

fn try_with<P: Protocol + Configured + RecordShape>(
    spec: FunctionSpec,
    template: Option<&str>,
    event: Value,
) -> Result<Outcome, String> {
    let setting = spec.var("RECORD_MAPPING");
    let template = match template {
        Some(t) => t.to_string(),
        None => std::env::var(&setting)
            .ok()
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| format!("no template: give --mapping or set {setting}"))?,
    };
    let mapping =
        RecordMapping::for_protocol::<P>(&setting, &template).map_err(|e| e.to_string())?;
    // Parsing makes no DynamoDB call: a client that is never used.
    let client = Client::from_conf(
        aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build(),
    );
    let protocol = spec
        .from_env::<P>(client)
        .inspect_err(|e| {
            eprintln!(
                "(not parsed by {}: its settings are not in the environment: {e})",
                spec.name
            )
        })
        .ok();
    let tried = mapping
        .try_event(event, protocol.as_ref())
        .map_err(|e| e.to_string())?;
    Ok(Outcome {
        lines: tried.iter().map(line).collect(),
        misfits: tried.iter().filter(|t| !t.fits()).count(),
    })
}

fn line(tried: &Tried) -> Value {
    let rejected = |r: &Rejection| json!({"code": r.code.to_string(), "message": r.message});
    let id = &tried.position.id;
    match (&tried.mapped, &tried.parsed) {
        (Err(r), _) => json!({"id": id, "rejected": rejected(r)}),
        (Ok(record), Some(Err(r))) => json!({"id": id, "record": record, "rejected": rejected(r)}),
        (Ok(record), _) => json!({"id": id, "record": record}),
    }
}
