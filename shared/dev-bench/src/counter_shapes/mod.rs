//! `bench counter-shapes`: the counter's journal mode at the stream shapes DynamoDB has and
//! DynamoDB Local does not (many shards, rollover every 4 h), through the Streams test double
//! (`dev_testing::StreamsDouble`). Two parts, figures only (nothing is asserted):
//!
//! 1. **Cost in the steady state** ([`steady`]): journal puts by the writer into DynamoDB Local,
//!    the double re-partitioning its stream into N shards with rollover, a roll-up per minute
//!    of a simulated clock over days; billed write units per event, watermarks per item, item
//!    size, `GetRecords` per run.
//! 2. **Throughput and lag** ([`flow`]): synthetic journal records (captured from the writer
//!    itself, [`capture`]) injected into the double at a rate per clock second, the clock
//!    moving in real time, the roll-up as the mapping's handler polled continuously; keys
//!    applied per second, lag, backlog, and the catch-up after the load in batching windows.
//! 3. **Issue 39's cost goals** ([`goals`], `--part goals`, not in `both`): 30 simulated
//!    days, one shard lineage of 30 at the production per-shard rate, without and with a
//!    15-minute tumbling window (`--quick`: 3 days, a tenth of the items, for checking).

mod capture;
mod flow;
mod flow_report;
mod goals;
mod goals_report;
mod journal;
mod meter;
mod report;
mod steady;
mod tables;

/// Options of `bench counter-shapes`.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Which parts: `steady`, `flow`, `both` (those two) or `goals`.
    #[arg(long, default_value = "both")]
    part: String,
    /// Shard counts of part 1.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 4, 30])]
    shards: Vec<usize>,
    /// Per-item rates of part 1: `s` (1 key/s), `m` (1 key/min), `h` (6 keys/h).
    #[arg(long, value_delimiter = ',', default_values = ["s", "m", "h"])]
    rates: Vec<String>,
    /// Also part 1's 1 key/min at 30 shards with `journal_spread = 16`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    spread: bool,
    /// Simulated days of part 1 (warm-up + measured window; 30 min more, so that each
    /// window ends 30 min after a rollover).
    #[arg(long, default_value_t = 3.0)]
    days: f64,
    /// Measured hours at 1 key/s (the end of the span; the rest is warm-up).
    #[arg(long, default_value_t = 1.0)]
    fast_hours: f64,
    /// Measured hours at 1 key/min (the end of the span; the rest is warm-up).
    #[arg(long, default_value_t = 1.0)]
    minute_hours: f64,
    /// Measured hours at 6 keys/h (the end of the span; the rest is warm-up).
    #[arg(long, default_value_t = 8.0)]
    slow_hours: f64,
    /// Counter items at 1 key/s, 1 key/min and 6 keys/h.
    #[arg(long, value_delimiter = ',', default_values_t = [2usize, 5, 10])]
    items: Vec<usize>,
    /// Warm-up: one key per item and one roll-up every this many simulated minutes.
    #[arg(long, default_value_t = 240)]
    warmup_step_min: u64,
    /// Part 1: the double reads DynamoDB Local's stream (slow: ~30 ms an upstream pull per
    /// request) instead of mirroring the journal table's puts.
    #[arg(long)]
    upstream: bool,
    /// Part 1: printed only: the scheduled roll-up's hold is gone (the roll-up runs through
    /// the mapping emulator; the tumbling window is to take the hold's place).
    #[arg(long, default_value_t = 0)]
    hold_secs: u64,
    /// Roll-up runs without any new key measured at the end of each configuration.
    #[arg(long, default_value_t = 3)]
    idle_runs: usize,
    /// Part 2: seconds (of clock = wall time) each rate is fed.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Part 2: the backlog counts as growing when it ends 1.5 times its median and above
    /// this many seconds of the rate.
    #[arg(long, default_value_t = 6)]
    interval: u64,
    /// Part 2: the mapping's `MaximumBatchingWindowInSeconds` (the stack's default: 60).
    #[arg(long, default_value_t = 60)]
    batching_window: i64,
    /// Part 2 (a): rates (events per clock second) into many cold items, tried in order
    /// until one is not sustained.
    #[arg(long, value_delimiter = ',', default_values_t = [200usize, 800])]
    cold_rates: Vec<usize>,
    /// Part 2 (a): distinct counter items.
    #[arg(long, default_value_t = 100_000)]
    cold_items: usize,
    /// Part 2 (b): rates into one hot counter (`journal_spread = 16`), tried in order until
    /// one is not sustained.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000usize, 20_000])]
    hot_rates: Vec<usize>,
    /// Part 2: latency of each answer of the double (AWS answers in 10–50 ms).
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    /// Goals: simulated days before the measured segment.
    #[arg(long, default_value_t = 30.0)]
    goal_days: f64,
    /// Goals: measured minutes at the production rate (from a 15-minute boundary).
    #[arg(long, default_value_t = 30)]
    goal_minutes: u64,
    /// Goals: items followed over the days (one key each every 2 hours).
    #[arg(long, default_value_t = 20)]
    goal_tracked: usize,
    /// Goals: 3 days, 15 minutes, a tenth of the items (a check, not the figure).
    #[arg(long)]
    quick: bool,
}

pub async fn run(options: Options) -> Result<(), String> {
    report::header(&options);
    let part = options.part.as_str();
    if part == "goals" {
        return goals::run(&options).await;
    }
    if !["steady", "flow", "both"].contains(&part) {
        return Err(format!("--part {part}: steady, flow, both or goals"));
    }
    if part != "flow" {
        steady::run(&options).await?;
    }
    if part != "steady" {
        flow::run(&options).await?;
    }
    Ok(())
}
