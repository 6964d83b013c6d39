//! `ops counter ...`: the counter's journal mode.
//!
//! ```text
//! ops counter repair --from YYYY-MM-DD --to YYYY-MM-DD
//!                     recount those UTC days exactly from the journal (after a gap the
//!                     roll-up reported: see docs/operate.md, CounterRollupTrimmedAlarm);
//!                     counter-writer's COUNTER_* settings from the environment
//! ops counter stream-events --table <journal table>
//!                     every INSERT of the journal's stream as Lambda's event source mapping
//!                     delivers it to counter-rollup: one tumbling window's event per shard,
//!                     one JSON line each (the demo feeds the roll-up with them; delivered
//!                     again, the watermarks turn away what was applied)
//! ```

use dynamodb_exactly_once::counter::journal::{
    Repair, RepairDays, RepairOutcome, RepairProgress, RollupConfig,
};
use dynamodb_exactly_once::counter::CounterConfig;
use dynamodb_exactly_once_lambda::client::client_from_env;
use dynamodb_exactly_once_lambda::settings::functions::COUNTER_WRITER;
use indicatif::{ProgressBar, ProgressStyle};

/// The counter's journal mode.
#[derive(Debug, clap::Subcommand)]
pub enum CounterCommand {
    /// Recount whole UTC days of journaled keys exactly, from the journal table (after a gap
    /// the roll-up reported). Safe while the roll-up runs; running it again changes nothing.
    Repair {
        /// The first day (UTC), `YYYY-MM-DD`.
        #[arg(long)]
        from: String,
        /// The last day (UTC), `YYYY-MM-DD`: it must have ended an hour ago.
        #[arg(long)]
        to: String,
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
        CounterCommand::Repair { from, to } => repair(&from, &to).await,
        CounterCommand::StreamEvents { table } => {
            for event in crate::stream_events::window_events(&table).await? {
                println!("{event}");
            }
            Ok(())
        }
    }
}

async fn repair(from: &str, to: &str) -> Result<(), String> {
    let days = RepairDays::parse(from, to).map_err(|e| e.to_string())?;
    let counter: CounterConfig = COUNTER_WRITER
        .config_from_env()
        .map_err(|e| e.to_string())?;
    let config = RollupConfig::builder(counter)
        .build()
        .map_err(|e| e.to_string())?;
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
