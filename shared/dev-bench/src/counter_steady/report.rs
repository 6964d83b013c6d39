//! What `bench counter-steady` prints.

use super::hot::Hot;
use super::inline::Prefill;
use super::setup::{Regime, Row};
use super::Options;

pub fn header(o: &Options) {
    println!(
        "counter steady state (issue 19), one run against DynamoDB Local ({})",
        dev_testing::endpoint()
    );
    println!("{}", crate::common::provenance());
    println!(
        "release build: {}",
        if cfg!(debug_assertions) {
            "NO (debug: figures of time are not comparable)"
        } else {
            "yes"
        }
    );
    println!("settings:");
    println!(
        "  declared rate {} new key/s per item; simulated clock (ddb::Clock::from_fn)",
        o.rate
    );
    println!("  project inline: CounterConfig::builder(table) (window 1 h, 2 buckets of 3600 s, cache on); cold = cache_keys 0");
    println!(
        "  project journal: CounterConfig::builder(table).journal(journal_table) (window 14 d, cache on); roll-up once per {} simulated s, i.e. {} keys per item per run at the declared rate; its cost per event is the runs' cost / keys rolled up",
        o.rollup_interval,
        (o.rate * o.rollup_interval as f64).round()
    );
    println!("  Powertools-equivalent: Powertools' idempotency algorithm re-implemented in Rust in this bench (not Powertools itself); local cache off (its default)");
    println!("  WCU billed as AWS bills: ceil(max(size before, size after) / 1 KB) per item written, a failed condition by the existing item (ALL_OLD), at least 1");
    println!();
}

pub fn prefill(p: &Prefill, rate: f64) {
    println!(
        "inline steady state: one item filled through the protocol with a moving clock, {} keys at {rate} key/s ({} writes of 10 keys each, {:.1} s of wall time), then copied to 222 items (a: 0..200, b: 200..220, c: 220..222)",
        p.keys, p.writes, p.seconds
    );
    println!(
        "  item {} bytes = {:.1} KB, buckets {}; regimes run in the next 150 simulated s (same bucket)",
        p.item_bytes,
        p.item_bytes as f64 / 1024.0,
        p.phase
    );
    println!();
}

fn per(x: f64, n: usize) -> f64 {
    x / n.max(1) as f64
}

/// Total WCU per event of a row (writer + roll-up share).
fn wcu(r: &Row) -> f64 {
    per(r.writer_wcu as f64, r.events) + r.rollup.as_ref().map_or(0.0, |s| s.wcu_per_key)
}

pub fn table(regimes: &[Regime], designs: &[Vec<Row>]) {
    println!("| regime | design | events | **WCU/event** | DynamoDB calls/event | events/s | writer WCU/event | writer calls (ops) | roll-up WCU/event | roll-up DynamoDB calls/event | roll-up stream calls/event | roll-up runs, keys, s | outcomes |");
    println!("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---|");
    for regime in regimes {
        for rows in designs {
            let Some(r) = rows.iter().find(|r| r.regime == regime.name) else {
                continue;
            };
            let calls = per(r.writer_calls as f64, r.events)
                + r.rollup.as_ref().map_or(0.0, |s| s.calls_per_key);
            let (rw, rc, rs, runs) = match &r.rollup {
                Some(s) => (
                    format!("{:.4}", s.wcu_per_key),
                    format!("{:.4}", s.calls_per_key),
                    format!("{:.4}", s.stream_calls_per_key),
                    format!("{}, {}, {:.2}", s.runs, s.keys, s.seconds),
                ),
                None => ("–".into(), "–".into(), "–".into(), "–".into()),
            };
            println!(
                "| {} {} | {} | {} | **{:.2}** | {:.3} | {:.0} | {:.2} | {} | {rw} | {rc} | {rs} | {runs} | {} |",
                r.regime,
                regime.what,
                r.design,
                r.events,
                wcu(r),
                calls,
                r.events as f64 / r.seconds.max(1e-9),
                per(r.writer_wcu as f64, r.events),
                if r.writer_calls == 0 { "0".to_string() } else { format!("{} ({})", r.writer_calls, r.writer_ops) },
                r.outcomes
            );
        }
    }
    println!();
    ratios(regimes, designs);
}

fn ratios(regimes: &[Regime], designs: &[Vec<Row>]) {
    let find = |design: &str, regime: &str| {
        designs
            .iter()
            .flatten()
            .find(|r| r.design.starts_with(design) && r.regime == regime)
            .map(wcu)
    };
    let mut parts = Vec::new();
    for regime in regimes {
        if let (Some(j), Some(i), Some(p)) = (
            find("project journal", regime.name),
            find("project inline", regime.name),
            find("Powertools", regime.name),
        ) {
            parts.push(format!(
                "{}: journal {:.2}×, inline {:.1}×",
                regime.name,
                j / p.max(1e-9),
                i / p.max(1e-9)
            ));
        }
    }
    println!(
        "WCU/event relative to the Powertools-equivalent: {}",
        parts.join("; ")
    );
    println!();
}

pub fn hot(h: &Hot, o: &Options) {
    println!(
        "hot counter (journal mode): {} events/s × {} simulated s = {} events, distinct keys, one counter item; roll-up run once at the end of the span (its schedule), in real time from then",
        o.hot_rate, o.hot_seconds, h.events
    );
    println!(
        "  journaled in {:.1} s of wall time ({:.0} events/s on DynamoDB Local; simulated time is set per invocation of 500); roll-up: {} run, {} counter item updates, {:.2} s; counter reads {} (expected {})",
        h.write_seconds,
        h.events as f64 / h.write_seconds.max(1e-9),
        h.rollup_runs,
        h.counter_updates,
        h.rollup_seconds,
        h.total,
        h.events
    );
    println!("| item kind | items | writes | highest WCU/s on one item (per simulated second) |");
    println!("|---|---:|---:|---:|");
    for (kind, (peak, items, writes)) in &h.peaks {
        println!("| {kind} | {items} | {writes} | {peak} |");
    }
    println!();
}
