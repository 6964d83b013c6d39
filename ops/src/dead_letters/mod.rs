//! `dead-letters list|export|replay|forget-exported`: inspect and replay what the writers kept.
//!
//! Every action takes one function's letters, narrowed to one deployment (`--deployment`, the
//! Lambda function name the letters were kept by), one source kind (`--kind`) and one stream or
//! queue (`--source-arn`). Replay, export and forget-exported refuse letters of several
//! deployments at once.

use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::config::Configured;
use dynamodb_exactly_once::counter::Counter;
use dynamodb_exactly_once::document::Document;
use dynamodb_exactly_once::ratchet::Ratchet;
use dynamodb_exactly_once::txn::Coordinator;
use dynamodb_exactly_once::Protocol;
use dynamodb_exactly_once_lambda::client::client_from_env;
use dynamodb_exactly_once_lambda::dead_letter::{DeadLetter, DeadLetters, LetterFilter};
use dynamodb_exactly_once_lambda::mapping::RecordShape;
use dynamodb_exactly_once_lambda::settings::functions::{
    COUNTER_WRITER, DOCUMENT_WRITER, RATCHET_WRITER, TX_COORDINATOR,
};
use dynamodb_exactly_once_lambda::settings::FunctionSpec;
use dynamodb_exactly_once_lambda::source::SourceKind;
use dynamodb_exactly_once_lambda::{writer_from_env, ReplayReport, ReplayScope, Writer};
use serde_json::{json, Value};

mod export;

/// What to do with the dead letters.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Action {
    /// Print them as JSON lines, in source order.
    List,
    /// Print an event of their records as their source delivered them (for `cargo lambda
    /// invoke --data-file`): one source kind at a time, arrival times and FIFO attributes kept.
    /// The letters are marked exported: a replay leaves them alone.
    Export,
    /// Run them through the function's protocol again (settings from env), in source order;
    /// remove those that now succeed.
    Replay,
    /// Remove the exported letters (once their exported event was invoked).
    ForgetExported,
}

/// Which letters: the options every action shares.
#[derive(Debug, Clone, clap::Args)]
pub struct Scope {
    /// The dead-letter table.
    #[arg(long)]
    pub table: String,
    /// The function whose dead letters these are (`ratchet-writer`, `counter-writer`, ...).
    #[arg(long)]
    pub function: String,
    /// Only letters kept by this deployment (its Lambda function name, as in `list`).
    #[arg(long)]
    pub deployment: Option<String>,
    /// Only letters of this source kind: kinesis, sqs, dynamodb or kafka.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only letters of this stream or queue ARN.
    #[arg(long)]
    pub source_arn: Option<String>,
    /// Replay: apply records older than the protocol applies safely (`too_old`) too.
    #[arg(long)]
    pub force: bool,
    /// Replay: also letters an export wrote out.
    #[arg(long)]
    pub include_exported: bool,
}

impl Scope {
    fn filter(&self) -> Result<LetterFilter, String> {
        let kind = self
            .kind
            .as_deref()
            .map(str::parse::<SourceKind>)
            .transpose()
            .map_err(|e| format!("--kind {e}"))?;
        Ok(LetterFilter::all()
            .kind(kind)
            .source_arn(self.source_arn.clone()))
    }
}

pub async fn run(action: Action, scope: Scope) -> Result<(), String> {
    let client = client_from_env().await.map_err(|e| e.to_string())?;
    let letters = DeadLetters::new(client.clone(), &scope.table, &scope.function)
        .for_deployment(scope.deployment.clone());
    let filter = scope.filter()?;
    match action {
        Action::List => list(&letters, &filter, &scope).await,
        Action::Export => export::run(&letters, &filter).await,
        Action::ForgetExported => forget_exported(&letters, &filter).await,
        Action::Replay => {
            let replay = ReplayScope::all()
                .filter(filter)
                .forced(scope.force)
                .with_exported(scope.include_exported);
            match scope.function.as_str() {
                f if f == RATCHET_WRITER.name => {
                    replay_with::<Ratchet>(client, RATCHET_WRITER, letters, &replay).await
                }
                f if f == COUNTER_WRITER.name => {
                    replay_with::<Counter>(client, COUNTER_WRITER, letters, &replay).await
                }
                f if f == TX_COORDINATOR.name => {
                    replay_with::<Coordinator>(client, TX_COORDINATOR, letters, &replay).await
                }
                f if f == DOCUMENT_WRITER.name => {
                    replay_with::<Document>(client, DOCUMENT_WRITER, letters, &replay).await
                }
                other => Err(format!("replay does not know the function {other:?}")),
            }
        }
    }
}

async fn list(letters: &DeadLetters, filter: &LetterFilter, scope: &Scope) -> Result<(), String> {
    let listing = letters.listing(filter).await.map_err(|e| e.to_string())?;
    for l in &listing.letters {
        println!("{}", letter_json(l));
    }
    for (id, missing) in &listing.incomplete {
        println!("{}", json!({"id": id, "incomplete": missing}));
    }
    eprintln!(
        "{} dead letter(s) of {} in {} ({} incomplete)",
        listing.letters.len(),
        scope.function,
        scope.table,
        listing.incomplete.len()
    );
    Ok(())
}

fn letter_json(l: &DeadLetter) -> Value {
    let payload = l
        .payload_text()
        .map(Value::from)
        .unwrap_or_else(|| json!(format!("<{} binary bytes>", l.payload.len())));
    json!({
        "id": l.id, "deployment": l.deployment, "reason": l.reason, "position": l.position,
        "rejectedAt": l.rejected_at, "exportedAt": l.exported_at, "replayedAt": l.replayed_at,
        "payload": payload,
    })
}

async fn forget_exported(letters: &DeadLetters, filter: &LetterFilter) -> Result<(), String> {
    let listing = letters.listing(filter).await.map_err(|e| e.to_string())?;
    export::forgettable(&listing.letters)?;
    let mut removed = 0;
    for letter in listing.letters.iter().filter(|l| l.exported_at.is_some()) {
        letters.remove(letter).await.map_err(|e| e.to_string())?;
        println!("removed         {}", letter.id);
        removed += 1;
    }
    println!("{removed} exported letter(s) removed");
    Ok(())
}

async fn replay_with<P: Protocol + Configured + RecordShape>(
    client: Client,
    spec: FunctionSpec,
    letters: DeadLetters,
    scope: &ReplayScope,
) -> Result<(), String> {
    let writer: Writer<P> = writer_from_env(client, spec)
        .await
        .map_err(|e| e.to_string())?;
    let report = writer
        .replay_dead_letters(&letters, scope)
        .await
        .map_err(|e| e.to_string())?;
    print_report(&report);
    if report.not_removed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} letter(s) applied but not removed: delete them before replaying again",
            report.not_removed.len()
        ))
    }
}

fn print_report(report: &ReplayReport) {
    let lines: [(&str, Vec<String>); 6] = [
        ("replayed       ", report.replayed.clone()),
        ("conflict (kept)", report.conflicted.clone()),
        ("not replayed   ", report.failed.clone()),
        ("exported (kept)", report.exported.clone()),
        ("removed        ", report.removed_applied_earlier.clone()),
        (
            "incomplete     ",
            report
                .incomplete
                .iter()
                .map(|(i, m)| format!("{i}: {m}"))
                .collect(),
        ),
    ];
    for (label, ids) in &lines {
        for id in ids {
            println!("{label} {id}");
        }
    }
    for (id, reason) in &report.still_rejected {
        println!("still rejected  {id}: {reason}");
    }
    for (id, error) in &report.not_removed {
        println!("NOT REMOVED     {id}: {error}");
    }
    println!(
        "{} replayed and removed, {} still rejected, {} conflicted, {} to retry, {} exported left alone",
        report.replayed.len(),
        report.still_rejected.len(),
        report.conflicted.len(),
        report.failed.len(),
        report.exported.len()
    );
}
