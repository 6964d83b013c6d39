//! `bench counter-steady`: the counter in the steady state of a long-running deployment, one
//! run against DynamoDB Local (issue 19's measurement). Three designs in five regimes:
//!
//! * **project journal** (`CounterConfig::builder(table).journal(journal_table)`): journal
//!   puts by the process under test, the roll-up on its schedule ([`journal`]);
//! * **project inline** (`CounterConfig::builder(table)`, the library's default): items
//!   pre-filled to the window's steady state through the protocol with a moving clock
//!   ([`inline`]);
//! * **Powertools-equivalent**: Powertools' idempotency algorithm in Rust ([`powertools`]).
//!
//! Write units are billed as AWS bills them by the bench's own SDK interceptor ([`meter`]);
//! then a hot counter ([`hot`]). Nothing here is timed as a test: it prints figures.

mod hot;
mod inline;
mod journal;
mod meter;
mod powertools;
mod report;
mod setup;
mod sim;

use aws_sdk_dynamodb::types::AttributeValue;
use dynamodb_exactly_once::__private::item_size;
use dynamodb_exactly_once::__private::{epoch_millis, epoch_seconds};

use setup::Env;

/// Options of `bench counter-steady`.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Declared new keys per second and item (the inline capacity rule's rate).
    #[arg(long, default_value_t = 1.0)]
    rate: f64,
    /// The roll-up's schedule: one run per this many simulated seconds.
    #[arg(long, default_value_t = 60)]
    rollup_interval: u64,
    /// Events per second into the hot counter.
    #[arg(long, default_value_t = 10_000)]
    hot_rate: usize,
    /// Simulated seconds of the hot counter (DynamoDB Local's streams slow down as records
    /// accumulate: a few seconds of 10,000/s already take minutes of wall time).
    #[arg(long, default_value_t = 2)]
    hot_seconds: usize,
    /// Keys in a pre-filled inline item (7,050 at 1 key/s: 3,600 in the full bucket, 3,450 in
    /// the current one, near the top of the 1 h / 2-bucket cycle).
    #[arg(long, default_value_t = 7050)]
    inline_keys: usize,
    /// Only the hot counter.
    #[arg(long)]
    only_hot: bool,
}

pub async fn run(options: Options) -> Result<(), String> {
    report::header(&options);
    let env = Env::new();
    warm_local(&env).await?;
    let check = check_local_billing(&env).await?;
    println!("{check}");
    println!();
    // Simulated time starts at a bucket start a few hours before now (times stay in the past).
    let bucket = dynamodb_exactly_once::counter::CounterConfig::builder("analysis")
        .build()
        .map_err(|e| e.to_string())?
        .bucket_seconds();
    let t0 = (epoch_seconds() / bucket - 4) * bucket;
    // The journal designs' clock starts at the real time instead: the roll-up reads each shard
    // up to its run's start, and DynamoDB Local stamps stream records with the real time (a
    // clock hours behind it found no record to roll up).
    let journal_t0_ms = epoch_millis();
    let mut checks = Vec::new();
    if !options.only_hot {
        checks = regimes(&env, &options, t0, journal_t0_ms).await?;
    }
    let hot = hot::run(&env, options.hot_rate, options.hot_seconds, journal_t0_ms).await?;
    report::hot(&hot, &options);
    for line in hot::inline_analysis(options.hot_rate as f64, 100) {
        println!("{line}");
    }
    println!();
    let t = env.meter.tally();
    if t.failed_without_item > 0 {
        checks.push(format!(
            "{} failed conditions came without their item: billed 1 WCU each (a floor)",
            t.failed_without_item
        ));
    }
    println!("checks:");
    for c in &checks {
        println!("  {c}");
    }
    // A counter that reads other than its keys makes every figure above meaningless.
    let wrong = checks.iter().filter(|c| c.contains(": cust#")).count()
        + usize::from(hot.total != hot.events as i64);
    if wrong > 0 {
        return Err(format!(
            "{wrong} count check(s) failed (above): the figures are not valid"
        ));
    }
    Ok(())
}

/// The five regimes in the three designs: the table; the checks made.
async fn regimes(
    env: &Env,
    options: &Options,
    t0: u64,
    journal_t0_ms: u64,
) -> Result<Vec<String>, String> {
    let regimes = setup::regimes(options.rate);
    let (inline_rows, pre, mut checks) =
        inline::run(env, &regimes, options.rate, t0, options.inline_keys).await?;
    report::prefill(&pre, options.rate);
    let (journal_rows, journal_checks) = journal::run(
        env,
        &regimes,
        options.rate,
        options.rollup_interval,
        journal_t0_ms,
    )
    .await?;
    checks.extend(journal_checks);
    let pt_rows = powertools::run(env, &regimes).await?;
    report::table(&regimes, &[journal_rows, inline_rows, pt_rows]);
    Ok(checks)
}

/// DynamoDB Local is a JVM: a few hundred small writes first, so the first regime does not
/// pay for its JIT.
async fn warm_local(env: &Env) -> Result<(), String> {
    let table = env.table("warmup", &["PK", "SK"], false).await?;
    for i in 0..300 {
        env.ddb
            .update_item()
            .table_name(&table)
            .key("PK", AttributeValue::S(format!("w{}", i % 10)))
            .key("SK", AttributeValue::S("w".into()))
            .update_expression("ADD n :one")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .send()
            .await
            .map_err(|e| format!("warm-up: {e:?}"))?;
    }
    Ok(())
}

/// Does DynamoDB Local bill an `UpdateItem` on a ~150 KB item by `max(size before, size
/// after)`? Three writes on one item, sizes computed from the item read before and after.
async fn check_local_billing(env: &Env) -> Result<String, String> {
    let table = env.table("billing", &["PK", "SK"], false).await?;
    let big = "x".repeat(150 * 1024);
    let steps = [
        "SET a 150 KB string",
        "ADD n 1 on it",
        "REMOVE the 150 KB string",
    ];
    let mut lines = vec![
        "DynamoDB Local billing check (UpdateItem, ReturnConsumedCapacity=TOTAL):".to_string(),
    ];
    let mut all_match = true;
    for (i, what) in steps.iter().enumerate() {
        let before = size_of(env, &table).await?;
        let update = env
            .ddb
            .update_item()
            .table_name(&table)
            .key("PK", AttributeValue::S("big".into()))
            .key("SK", AttributeValue::S("x".into()));
        let update = match i {
            0 => update
                .update_expression("SET big = :b")
                .expression_attribute_values(":b", AttributeValue::S(big.clone())),
            1 => update
                .update_expression("ADD n :one")
                .expression_attribute_values(":one", AttributeValue::N("1".into())),
            _ => update.update_expression("REMOVE big"),
        };
        update
            .send()
            .await
            .map_err(|e| format!("billing check: {e:?}"))?;
        let after = size_of(env, &table).await?;
        let expected = meter::units_of(before.max(after));
        let reported = env.meter.last_reported();
        all_match &= expected == reported;
        lines.push(format!(
            "  {what}: item {before} → {after} bytes; ceil(max/1 KB) = {expected}, reported {reported}"
        ));
    }
    lines.push(match all_match {
        true => "  → reported units equal max(before, after): the bench uses DynamoDB Local's reports for successful writes".into(),
        false => "  → MISMATCH: DynamoDB Local's reports are NOT max(before, after); figures below are its reports".into(),
    });
    Ok(lines.join("\n"))
}

async fn size_of(env: &Env, table: &str) -> Result<usize, String> {
    let item = env
        .ddb
        .get_item()
        .table_name(table)
        .key("PK", AttributeValue::S("big".into()))
        .key("SK", AttributeValue::S("x".into()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| format!("billing check read: {e:?}"))?
        .item
        .unwrap_or_default();
    Ok(if item.is_empty() { 0 } else { item_size(&item) })
}
