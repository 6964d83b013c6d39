//! The project's inline mode (today's layout) in the steady state of its window: one item is
//! filled through the protocol with a moving clock at the declared rate, then copied to every
//! item the regimes write (the copy is the protocol's own item, its key changed).

use std::collections::BTreeMap;
use std::time::Instant;

use aws_sdk_dynamodb::types::AttributeValue;
use dynamodb_exactly_once::__private::item_size;
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::Item;
use serde_json::Value;

use super::journal::apply;
use super::setup::{count_labels, item_key, Env, Regime, Row, RANDOM_ITEMS};
use super::sim::SimClock;

/// Keys put into the template item per write while filling it (one write per this many
/// simulated seconds at 1 key/s).
const FILL_STEP: usize = 10;
/// Items the regimes write: (a) 0..200, (b) 200..220, (c) 220..222.
const ITEMS: usize = RANDOM_ITEMS + 22;
/// The template's customer index.
const TEMPLATE: usize = 9999;

/// What the pre-fill made.
#[derive(Debug, Clone)]
pub struct Prefill {
    pub keys: usize,
    pub item_bytes: usize,
    pub writes: usize,
    pub seconds: f64,
    pub phase: String,
}

/// Fill the template to `keys` keys at `rate` keys/s from `t0_s` (a bucket start), then
/// copy it to the regimes' items.
async fn prefill(
    env: &Env,
    config: &CounterConfig,
    sim: &SimClock,
    t0_s: u64,
    keys: usize,
    rate: f64,
) -> Result<Prefill, String> {
    let c = config.to_builder().cache_keys(0).build();
    let counter =
        Counter::new(env.ddb.clone(), c.map_err(|e| e.to_string())?).with_clock(sim.clock());
    let started = Instant::now();
    let mut writes = 0;
    for step in 0..keys.div_ceil(FILL_STEP) {
        let first = step * FILL_STEP;
        let at = t0_s as f64 + (first + FILL_STEP) as f64 / rate;
        sim.set((at * 1000.0) as u64);
        let events: Vec<_> = (first..(first + FILL_STEP).min(keys))
            .map(|k| (TEMPLATE, format!("prefill-{k}")))
            .collect();
        let labels = apply(&counter, &events).await?;
        if labels.iter().any(|l| *l != "applied") {
            return Err(format!("pre-fill step {step}: {}", count_labels(labels)));
        }
        writes += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    let template = get_raw(env, config.table(), TEMPLATE).await?;
    for i in 0..ITEMS {
        let mut item = template.clone();
        item.extend(item_key(i).to_item().map_err(|e| e.to_string())?);
        env.ddb
            .put_item()
            .table_name(config.table())
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| format!("copy: {e:?}"))?;
    }
    Ok(Prefill {
        keys: stored_keys(&template, config.attribute_prefix()),
        item_bytes: item_size(&template),
        writes,
        seconds,
        phase: layout(&template, config.attribute_prefix()),
    })
}

/// One item as stored.
async fn get_raw(env: &Env, table: &str, i: usize) -> Result<Item, String> {
    env.ddb
        .get_item()
        .table_name(table)
        .set_key(Some(item_key(i).to_item().map_err(|e| e.to_string())?))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| format!("get: {e:?}"))?
        .item
        .ok_or_else(|| "the template item is missing".to_string())
}

/// Key hashes stored in the item's buckets.
fn stored_keys(item: &Item, prefix: &str) -> usize {
    item.iter()
        .filter(|(name, _)| name.starts_with(&format!("{prefix}keys_")))
        .map(|(_, v)| match v {
            AttributeValue::Ss(keys) => keys.len(),
            AttributeValue::L(keys) => keys.len(),
            _ => 0,
        })
        .sum()
}

/// The item's buckets and their sizes, `<attribute>:<keys>`.
fn layout(item: &Item, prefix: &str) -> String {
    let mut parts: Vec<String> = item
        .iter()
        .filter(|(name, _)| name.starts_with(&format!("{prefix}keys_")))
        .map(|(name, v)| {
            let n = match v {
                AttributeValue::Ss(keys) => keys.len(),
                AttributeValue::L(keys) => keys.len(),
                _ => 0,
            };
            format!("{name}:{n}")
        })
        .collect();
    parts.sort();
    parts.join(" ")
}

/// The inline design in every regime: start times (s after `t0_s`) keep all of them inside
/// the same bucket as the pre-fill's end.
pub async fn run(
    env: &Env,
    regimes: &[Regime],
    rate: f64,
    t0_s: u64,
    keys: usize,
) -> Result<(Vec<Row>, Prefill, Vec<String>), String> {
    let table = env.table("icounters", &["PK", "SK"], false).await?;
    let config = CounterConfig::builder(&table)
        .build()
        .map_err(|e| e.to_string())?;
    let sim = SimClock::at(t0_s * 1000);
    let pre = prefill(env, &config, &sim, t0_s, keys, rate).await?;
    let warm = counter(env, &config, &sim, None)?;
    let cold = counter(env, &config, &sim, Some(0))?;
    let mut expected: BTreeMap<usize, i64> = (0..ITEMS).map(|i| (i, pre_total(keys))).collect();
    let mut rows = Vec::new();
    let mut start = t0_s as f64 + keys as f64 / rate;
    let a_at = start;
    for regime in regimes {
        let counter = match regime.redelivery {
            Some(false) => &cold,
            _ => &warm,
        };
        let mut row = measure(env, counter, &sim, regime, start, &mut expected).await?;
        if regime.redelivery.is_some() {
            row.outcomes += &format!(" ({:.0} simulated s after (a))", start - a_at);
        }
        start += regime.offsets.last().copied().unwrap_or(0.0) + 1.0;
        rows.push(row);
    }
    let checks = verify(&warm, &expected, &pre, start, t0_s, &config).await?;
    Ok((rows, pre, checks))
}

fn counter(
    env: &Env,
    config: &CounterConfig,
    sim: &SimClock,
    cache_keys: Option<usize>,
) -> Result<Counter, String> {
    let mut config = config.to_builder();
    if let Some(keys) = cache_keys {
        config = config.cache_keys(keys);
    }
    let config = config.build().map_err(|e| e.to_string())?;
    Ok(Counter::new(env.ddb.clone(), config).with_clock(sim.clock()))
}

/// One regime's invocations from simulated second `start`, timed, with calls and units.
async fn measure(
    env: &Env,
    counter: &Counter,
    sim: &SimClock,
    regime: &Regime,
    start: f64,
    expected: &mut BTreeMap<usize, i64>,
) -> Result<Row, String> {
    let before = env.meter.tally();
    let mut labels = Vec::new();
    let mut elapsed = 0.0;
    for (inv, offset) in regime.invocations.iter().zip(&regime.offsets) {
        sim.set(((start + offset) * 1000.0) as u64);
        let started = Instant::now();
        labels.extend(apply(counter, inv).await?);
        elapsed += started.elapsed().as_secs_f64();
        if regime.redelivery.is_none() {
            for (item, _) in inv {
                *expected.entry(*item).or_default() += 1;
            }
        }
    }
    let tally = env.meter.tally().since(&before);
    Ok(Row {
        design: "project inline",
        regime: regime.name,
        events: regime.events(),
        writer_wcu: tally.wcu,
        writer_calls: tally.total_calls(),
        writer_ops: tally.ops(),
        seconds: elapsed,
        rollup: None,
        outcomes: count_labels(labels),
    })
}

/// The counter's `n` after the pre-fill (each pre-fill key added 1 to the template, copied).
fn pre_total(keys: usize) -> i64 {
    keys as i64
}

async fn verify(
    counter: &Counter,
    expected: &BTreeMap<usize, i64>,
    pre: &Prefill,
    end_s: f64,
    t0_s: u64,
    config: &CounterConfig,
) -> Result<Vec<String>, String> {
    let mut checks = Vec::new();
    for (item, want) in expected {
        let got: Option<Value> = counter
            .get(&item_key(*item))
            .await
            .map_err(|e| e.to_string())?;
        let got = got
            .and_then(|v| v.get("n").and_then(Value::as_i64))
            .unwrap_or(0);
        if got != *want {
            checks.push(format!(
                "inline: cust#{item:04} reads {got}, expected {want}"
            ));
        }
    }
    if checks.is_empty() {
        checks.push(format!(
            "inline: all {} counters read exactly pre-fill + new keys",
            expected.len()
        ));
    }
    let bucket = config.bucket_seconds() as f64;
    if (end_s - t0_s as f64) >= 2.0 * bucket {
        checks.push(format!(
            "inline: the regimes ran past the bucket in which the pre-fill ended ({} keys)",
            pre.keys
        ));
    }
    Ok(checks)
}
