//! `ops counter ...`: the counter's journal mode.
//!
//! ```text
//! ops counter repair --from-queue URL | --messages FILE | --from YYYY-MM-DD --to YYYY-MM-DD
//!                     recount UTC days exactly from the journal: those of the batches the
//!                     roll-up's mapping gave up on, described by the on-failure destination's
//!                     messages (the queue's, deleted once repaired; or a file of their
//!                     bodies), or those given (see docs/operate.md,
//!                     CounterRollupStreamFailuresAlarm); counter-writer's COUNTER_* settings
//!                     from the environment
//! ops counter audit [--repair] [--from YYYY-MM-DD --to YYYY-MM-DD] [--max-items N] [--max-seconds S]
//!                     the journal's per-day sums against the counter items' day sums, for
//!                     the days no record of which the stream can still deliver (or those
//!                     given); every difference reported, and repaired with --repair
//! ops counter stream-events --table <journal table>
//!                     every INSERT of the journal's stream as Lambda's event source mapping
//!                     delivers it to counter-rollup: one tumbling window's event per shard,
//!                     one JSON line each (the demo feeds the roll-up with them; delivered
//!                     again, the watermarks turn away what was applied)
//! ```

use dynamodb_exactly_once::counter::journal::{
    AuditLimits, AuditOutcome, Repair, RepairDays, RepairOutcome, RepairProgress, RollupConfig,
    StreamFailure,
};
use dynamodb_exactly_once::counter::CounterConfig;
use dynamodb_exactly_once_lambda::client::client_from_env;
use dynamodb_exactly_once_lambda::settings::functions::COUNTER_WRITER;
use indicatif::{ProgressBar, ProgressStyle};

/// The counter's journal mode.
#[derive(Debug, clap::Subcommand)]
pub enum CounterCommand {
    /// Recount whole UTC days of journaled keys exactly, from the journal table: the days of
    /// the batches the roll-up's mapping gave up on (its on-failure destination's messages),
    /// or the days given. Safe while the roll-up runs; running it again changes nothing.
    Repair {
        /// The on-failure destination's queue: every message is read (hidden meanwhile) and
        /// deleted once its days were repaired (made visible again otherwise).
        #[arg(long, conflicts_with_all = ["messages", "from", "to"])]
        from_queue: Option<String>,
        /// A file of the destination's message bodies (a JSON list, `aws sqs
        /// receive-message` output, or one a line).
        #[arg(long, conflicts_with_all = ["from", "to"])]
        messages: Option<String>,
        /// The first day (UTC), `YYYY-MM-DD`.
        #[arg(long, requires = "to", required_unless_present_any = ["from_queue", "messages"])]
        from: Option<String>,
        /// The last day (UTC), `YYYY-MM-DD`: it must have ended an hour ago.
        #[arg(long, requires = "from")]
        to: Option<String>,
    },
    /// Compare the journal's per-day sums with the counter items' day sums (the days the
    /// stream can no longer deliver, or those given) and report every difference; with
    /// `--repair`, repair the item-days that differ. Fails while differences remain.
    Audit {
        /// Repair the item-days that differ (the exact day repair).
        #[arg(long)]
        repair: bool,
        /// The first day (UTC), `YYYY-MM-DD` (default: the first the audit can take).
        #[arg(long, requires = "to")]
        from: Option<String>,
        /// The last day (UTC), `YYYY-MM-DD`.
        #[arg(long, requires = "from")]
        to: Option<String>,
        /// Journal items read at most (the audit compares nothing if it stops before the end).
        #[arg(long, default_value_t = 100_000_000)]
        max_items: u64,
        /// Seconds of scanning at most.
        #[arg(long, default_value_t = 3600)]
        max_seconds: u64,
    },
    /// Print every INSERT of the journal table's stream as Lambda's event source mapping
    /// delivers it to counter-rollup: one tumbling window's event per shard, one JSON line each.
    StreamEvents {
        /// The journal table.
        #[arg(long)]
        table: String,
    },
}

pub async fn run(command: CounterCommand) -> Result<(), String> {
    match command {
        CounterCommand::Repair {
            from_queue: Some(url),
            ..
        } => repair_queue(&url).await,
        CounterCommand::Repair {
            messages: Some(file),
            ..
        } => repair_file(&file).await,
        CounterCommand::Repair {
            from: Some(from),
            to: Some(to),
            ..
        } => repair(RepairDays::parse(&from, &to).map_err(|e| e.to_string())?).await,
        CounterCommand::Repair { .. } => {
            Err("give --from-queue, --messages, or --from and --to".into())
        }
        CounterCommand::Audit {
            repair,
            from,
            to,
            max_items,
            max_seconds,
        } => {
            let days = audit_days(from, to)?;
            let limits = AuditLimits::new(max_items, std::time::Duration::from_secs(max_seconds))
                .map_err(|e| e.to_string())?;
            audit(days, limits, repair).await
        }
        CounterCommand::StreamEvents { table } => {
            for event in crate::stream_events::window_events(&table).await? {
                println!("{event}");
            }
            Ok(())
        }
    }
}

/// The days given, or those the audit can take now.
fn audit_days(from: Option<String>, to: Option<String>) -> Result<RepairDays, String> {
    match (from, to) {
        (Some(from), Some(to)) => RepairDays::parse(&from, &to).map_err(|e| e.to_string()),
        _ => {
            let now = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
            RepairDays::auditable(now).ok_or_else(|| {
                "no day to audit yet (the last one ends 25 hours after midnight)".into()
            })
        }
    }
}

/// Repair the days of a file's messages.
async fn repair_file(file: &str) -> Result<(), String> {
    let messages = crate::counter_messages::from_file(file)?;
    match days_of(&named(&messages))? {
        Some(days) => repair(days).await,
        None => {
            println!("no messages: nothing to repair");
            Ok(())
        }
    }
}

/// The repair's settings: counter-writer's, from the environment.
fn config() -> Result<RollupConfig, String> {
    let counter: CounterConfig = COUNTER_WRITER
        .config_from_env()
        .map_err(|e| e.to_string())?;
    RollupConfig::builder(counter)
        .build()
        .map_err(|e| e.to_string())
}

fn named(messages: &[crate::counter_messages::Message]) -> Vec<(String, StreamFailure)> {
    messages
        .iter()
        .map(|m| (m.name.clone(), m.failure.clone()))
        .collect()
}

/// The days of the messages (of the configured journal's stream), printed on stderr.
fn days_of(failures: &[(String, StreamFailure)]) -> Result<Option<RepairDays>, String> {
    let config = config()?;
    let days =
        RepairDays::of_failures(config.journal_table(), failures).map_err(|e| e.to_string())?;
    if let Some(d) = days {
        let records: u64 = failures.iter().map(|(_, f)| f.batch_size).sum();
        eprintln!(
            "{} message(s), {records} record(s) given up on: days {} to {}",
            failures.len(),
            d.first(),
            d.last()
        );
    }
    Ok(days)
}

/// Repair the days of the queue's messages; delete them once repaired.
async fn repair_queue(url: &str) -> Result<(), String> {
    let queue = crate::counter_messages::Queue::from_env(url).await?;
    let messages = queue.receive().await?;
    let receipts: Vec<String> = messages.iter().filter_map(|m| m.receipt.clone()).collect();
    let repaired = match days_of(&named(&messages)) {
        Ok(Some(days)) => repair(days).await,
        Ok(None) => {
            println!("no messages: nothing to repair");
            return Ok(());
        }
        Err(e) => Err(e),
    };
    if let Err(e) = repaired {
        return Err(match queue.release(&receipts).await {
            Ok(()) => format!("{e} (the messages are back in the queue)"),
            Err(r) => format!("{e}; {r}"),
        });
    }
    match queue.delete(&receipts).await? {
        0 => {
            eprintln!("{} message(s) deleted", receipts.len());
            Ok(())
        }
        n => Err(format!(
            "repaired, but {n} message(s) could not be deleted: they come back; repairing again changes nothing"
        )),
    }
}

async fn repair(days: RepairDays) -> Result<(), String> {
    let config = config()?;
    let client = client_from_env().await.map_err(|e| e.to_string())?;
    let bar = ProgressBar::new_spinner();
    let show = |p: RepairProgress| show(&bar, p);
    let outcome = Repair::new(client, config)
        .run(days, &show)
        .await
        .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    match outcome {
        RepairOutcome::Repaired(report) => {
            let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
            println!("{json}");
            match report.refused_items.is_empty() {
                true => Ok(()),
                false => Err(format!(
                    "{} counter item(s) refused: fix them and run the same command again",
                    report.refused_items.len()
                )),
            }
        }
        RepairOutcome::Refused(reason) => Err(format!("nothing repaired: {reason}")),
        other => Err(format!("{other:?}")),
    }
}

async fn audit(days: RepairDays, limits: AuditLimits, repair: bool) -> Result<(), String> {
    let client = client_from_env().await.map_err(|e| e.to_string())?;
    let bar = ProgressBar::new_spinner();
    let show = |p: RepairProgress| show(&bar, p);
    let outcome = Repair::new(client, config()?)
        .audit(days, limits, repair, &show)
        .await
        .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    let report = match outcome {
        AuditOutcome::Audited(report) => report,
        AuditOutcome::Refused(reason) => return Err(format!("nothing audited: {reason}")),
        other => return Err(format!("{other:?}")),
    };
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    println!("{json}");
    let differences = report.short + report.over;
    let refused = report
        .repaired
        .as_ref()
        .map_or(0, |r| r.refused_items.len());
    if !report.complete {
        Err("the audit stopped at its limits before the journal's end: nothing was compared (raise --max-items / --max-seconds, or audit fewer days)".into())
    } else if refused > 0 {
        Err(format!(
            "{refused} counter item(s) refused the repair: fix them and run again"
        ))
    } else if differences > 0 && !repair {
        Err(format!(
            "{differences} difference(s): `ops counter audit --repair` repairs them"
        ))
    } else {
        Ok(())
    }
}

/// The progress on stderr: the scan against DynamoDB's estimate of the table's items, then
/// the counter items recounted.
fn show(bar: &ProgressBar, progress: RepairProgress) {
    match progress {
        RepairProgress::Scanned { items, of } => {
            if bar.length() != of {
                let style = "{spinner} scanning the journal {human_pos}/~{human_len} items [{bar:30}] {elapsed}";
                bar.set_style(
                    ProgressStyle::with_template(style)
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                bar.set_length(of.unwrap_or(items).max(items));
            }
            bar.set_position(items);
        }
        RepairProgress::Recounted { done, of } => {
            let of = u64::try_from(of).unwrap_or(u64::MAX);
            if bar.length() != Some(of) {
                let style = "{spinner} recounting {human_pos}/{human_len} counter item-days [{bar:30}] {elapsed}";
                bar.set_style(
                    ProgressStyle::with_template(style)
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                bar.set_length(of);
            }
            bar.set_position(u64::try_from(done).unwrap_or(u64::MAX));
        }
        _ => {}
    }
}
