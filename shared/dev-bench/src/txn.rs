//! Transaction benchmark against DynamoDB Local, or DynamoDB itself when
//! `AWS_ENDPOINT_URL_DYNAMODB` is a region's endpoint (one child process per scenario):
//!
//! * `writes fast|lock N`: one transaction of N `Update` requests on the fast path (one
//!   `TransactWriteItems`) or the lock path; requests, round trips, write requests and write
//!   units as AWS bills them, for N = 1, 2, 10, 99, 150;
//! * `fast|lock spread|contended`: 8 concurrent coordinators run 2-item transfers (debit
//!   conditional on `balance >= amount`), each on its own accounts (`spread`) or all among 10
//!   accounts (`contended`);
//! * `native spread|contended`: the same transfers as one `TransactWriteItems` each
//!   (conflicts retried with backoff);
//! * `batch group|fast|lock`: 100 independent transfers in one SQS batch through the
//!   `tx-coordinator` pipeline (`txn_batch`).

use std::sync::Arc;
use std::time::Instant;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::{client_with, template_tables, FaultInjector};
use dynamodb_exactly_once::txn::{Coordinator, TxConfig, TxError};
use dynamodb_exactly_once::Deadline;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::common::{next_arg, peak_rss_kib, spawn_worker};

const COORDINATORS: usize = 8;
const CONTENDED_ACCOUNTS: usize = 10;
/// The simulated round trips of the transfer rows "+N ms": 10 ms (DynamoDB Local's CPU still
/// bounds the rate) and 40 ms (the round trip does, as on DynamoDB, where a call's latency
/// hardly depends on its number of actions).
const LATENCIES_MS: [u64; 2] = [10, 40];
const INITIAL_BALANCE: i64 = 1_000_000;

pub async fn run(transfers: usize) -> Result<(), String> {
    let endpoint = dev_testing::endpoint();
    // Children use the same endpoint.
    std::env::set_var("AWS_ENDPOINT_URL_DYNAMODB", &endpoint);
    let local = dev_testing::is_local(&endpoint);
    let target = if local { "DynamoDB Local" } else { "DynamoDB" };
    println!("transaction benchmark against {target} ({endpoint})");
    println!();
    // Warm the JVM (or the connections) up.
    for kind in ["fast", "lock", "native"] {
        spawn_worker(&["txn".into(), kind.into(), "spread".into(), "200".into()])?;
    }
    print_writes()?;
    // On DynamoDB: no sweep scenario (110,000 records to write first), no simulated round trips.
    if local {
        crate::txn_sweep::print(&spawn_worker(&["txn".into(), "sweep".into()])?);
    }
    println!();
    print_transfers(transfers, if local { &LATENCIES_MS } else { &[] })?;
    println!();
    crate::txn_batch::print()?;
    Ok(())
}

/// One transaction of N updates on each path: requests, write requests, billed write units.
fn print_writes() -> Result<(), String> {
    println!(
        "{:<24} {:>5} {:>9} {:>12} {:>12} {:>11} {:>10}",
        "writes per transaction",
        "N",
        "requests",
        "round_trips",
        "write_calls",
        "billed_WCU",
        "index_WCU"
    );
    for (path, sizes) in [
        ("fast", &[1usize, 2, 10, 99][..]),
        ("lock", &[1, 2, 10, 99, 150]),
        ("lock-one-by-one", &[2, 150]),
    ] {
        for &n in sizes {
            let r = spawn_worker(&["txn".into(), "writes".into(), path.into(), n.to_string()])?;
            let num = |k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            println!(
                "{:<24} {:>5} {:>9.0} {:>12.0} {:>12.0} {:>11.1} {:>10.1}",
                r.get("path").and_then(Value::as_str).unwrap_or(path),
                n,
                num("requests"),
                num("round_trips"),
                num("write_calls"),
                num("billed_write_units"),
                num("index_write_units")
            );
        }
    }
    println!(
        "requests: every DynamoDB request after a warm-up transaction (the key-schema lookup,"
    );
    println!(
        "once per process, excluded); round_trips: measured by the interceptor, the longest chain"
    );
    println!(
        "of requests each sent after the previous one was answered; billed_WCU: as AWS bills,"
    );
    println!("TransactWriteItems twice (DynamoDB Local reports them once), failed conditions");
    println!("excluded; N = 150 > 99 takes the lock path on either setting.");
    println!();
    Ok(())
}

fn print_transfers(transfers: usize, latencies_ms: &[u64]) -> Result<(), String> {
    println!(
        "{:<30} {:>9} {:>10} {:>11} {:>12} {:>13} {:>12} {:>12}",
        "2-item transfers",
        "transfers",
        "committed",
        "transfers/s",
        "writes/xfer",
        "billed_WCU/x",
        "cpu_us/xfer",
        "ddb_us/xfer"
    );
    let mut figures = crate::figures::Figures::new("txn-transfers");
    for mode in ["spread", "contended"] {
        for kind in ["fast", "native", "native-record", "lock"] {
            let r = spawn_worker(&[
                "txn".into(),
                kind.into(),
                mode.into(),
                transfers.to_string(),
            ])?;
            let label = match kind {
                "native" => "TransactWriteItems",
                "native-record" => "TWI + idempotency put",
                "fast" => "TX fast path",
                _ => "TX lock path",
            };
            print_transfer_row(&format!("{label} {mode}"), &r);
            figures.push(transfer_figure(kind, mode, 0, &r));
        }
    }
    // The same with a simulated network round trip in front of DynamoDB Local (each
    // coordinator's calls through a loopback proxy that delays each answer), closer to a
    // regional endpoint, where a call's latency hardly depends on its number of actions.
    for (latency, mode) in latencies_ms
        .iter()
        .flat_map(|l| ["spread", "contended"].map(|m| (l, m)))
    {
        for kind in ["fast", "native", "native-record"] {
            let r = spawn_worker(&[
                "txn".into(),
                kind.into(),
                mode.into(),
                (transfers / 2).to_string(),
                latency.to_string(),
            ])?;
            let label = match kind {
                "native" => "TransactWriteItems",
                "native-record" => "TWI + idempotency put",
                _ => "TX fast path",
            };
            print_transfer_row(&format!("{label} {mode} +{latency}ms"), &r);
            figures.push(transfer_figure(kind, mode, *latency, &r));
        }
    }
    figures.write();
    println!("spread: each of the {COORDINATORS} coordinators on its own 2 accounts; contended: all among {CONTENDED_ACCOUNTS} accounts.");
    if !latencies_ms.is_empty() {
        println!(
            "+N ms: each answer delayed N ms by a loopback proxy (a simulated round trip); at 10 ms"
        );
        println!(
            "DynamoDB Local's CPU still bounds the rate, at 40 ms the round trip does (8 coordinators"
        );
        println!("× 1 call per 40 ms = 200 calls/s, under what it serves), as on DynamoDB.");
    }
    println!("writes/xfer counts write requests (cancelled and failed conditional ones included);");
    println!("billed_WCU/x: as AWS bills small items, 2 per transactional action (failed ones excluded);");
    println!("cpu_us/xfer: the client process's CPU (user + system) per transfer, setup included;");
    println!(
        "it shares the 2 cores with DynamoDB Local. ddb_us/xfer: DynamoDB Local's CPU per transfer"
    );
    println!(
        "(the timed loop only; `-` when `BENCH_DYNAMODB_PID` does not name it). Without a round"
    );
    println!(
        "trip the two processes fill the cores, so the rate follows the sum of the two columns:"
    );
    println!(
        "the emulator spends more on a third action in a second table (the idempotency record)"
    );
    println!("than the client spends on the whole protocol.");
    Ok(())
}

/// One point of the chart "transfers/s against the round trip" (`scripts/charts.py`).
fn transfer_figure(kind: &str, mode: &str, round_trip_ms: u64, r: &Value) -> Value {
    json!({
        "kind": kind,
        "mode": mode,
        "round_trip_ms": round_trip_ms,
        "per_second": r.get("per_second").and_then(Value::as_f64).unwrap_or(0.0),
    })
}

/// One row of the transfers table from a worker's result.
fn print_transfer_row(label: &str, r: &Value) {
    let num = |k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let per = |k: &str| num(k) / num("transfers").max(1.0);
    let server = match r.get("server_cpu_ms").and_then(Value::as_f64) {
        Some(ms) => format!("{:.0}", ms * 1000.0 / num("transfers").max(1.0)),
        None => "-".into(),
    };
    println!(
        "{:<30} {:>9.0} {:>10.0} {:>11.1} {:>12.2} {:>13.2} {:>12.0} {:>12}",
        label,
        num("transfers"),
        num("committed"),
        num("per_second"),
        per("write_calls"),
        per("billed_write_units"),
        per("cpu_ms") * 1000.0,
        server
    );
}

pub async fn worker(args: Vec<String>) -> Result<(), String> {
    let mut args = args.into_iter();
    let kind: String = next_arg(&mut args, "scenario")?;
    let result = match kind.as_str() {
        "writes" => {
            let path: String = next_arg(&mut args, "fast|lock|lock-one-by-one")?;
            let n: usize = next_arg(&mut args, "writes N")?;
            writes(path == "fast", path != "lock-one-by-one", n).await?
        }
        "fast" | "lock" | "native" | "native-record" => {
            let mode: String = next_arg(&mut args, "spread|contended")?;
            let count: usize = next_arg(&mut args, "transfer count")?;
            // Optional: a simulated network round trip (ms) in front of DynamoDB Local.
            let latency_ms: u64 = match args.next() {
                None => 0,
                Some(ms) => ms
                    .parse()
                    .map_err(|_| format!("worker: latency ms: cannot parse {ms:?}"))?,
            };
            transfers(&kind, mode == "contended", count, latency_ms).await?
        }
        "batch" => {
            let path: String = next_arg(&mut args, "group|fast|lock")?;
            crate::txn_batch::batch(&path).await?
        }
        "sweep" => crate::txn_sweep::run().await?,
        other => return Err(format!("unknown txn scenario {other:?}")),
    };
    let mut result = result;
    result["peak_rss_kib"] = json!(peak_rss_kib());
    result["cpu_ms"] = json!(crate::common::cpu_ms());
    println!("{result}");
    Ok(())
}

struct Tables {
    accounts: String,
    tx: String,
}

async fn tables(client: &Client) -> Tables {
    let t = template_tables(client, &["TxTable", "AccountsTable"]).await;
    Tables {
        accounts: t["AccountsTable"].clone(),
        tx: t["TxTable"].clone(),
    }
}

async fn seed(client: &Client, table: &str, accounts: usize) -> Result<(), String> {
    for a in 0..accounts {
        client
            .put_item()
            .table_name(table)
            .item("PK", AttributeValue::S(format!("acc{a}")))
            .item("balance", AttributeValue::N(INITIAL_BALANCE.to_string()))
            .send()
            .await
            .map_err(|e| format!("seed: {e}"))?;
    }
    Ok(())
}

fn update(table: &str, pk: &str, delta: i64, guarded: bool) -> Value {
    let mut u = json!({"TableName":table,"Key":{"PK":pk},
        "UpdateExpression":"SET #b = #b + :d","ExpressionAttributeNames":{"#b":"balance"},
        "ExpressionAttributeValues":{":d":delta}});
    if guarded {
        u["ConditionExpression"] = json!("#b >= :need");
        u["ExpressionAttributeValues"][":need"] = json!(-delta);
    }
    json!({ "Update": u })
}

async fn writes(fast_path: bool, read_ahead: bool, n: usize) -> Result<Value, String> {
    let counting = FaultInjector::counting();
    let client = client_with(Some(counting.clone()), 3);
    let t = tables(&client).await;
    seed(&client, &t.accounts, n).await?;
    let config = TxConfig::builder(&t.tx, [&t.accounts])
        .fast_path(fast_path)
        .read_ahead(read_ahead)
        .build()
        .map_err(|e| e.to_string())?;
    let c = Coordinator::new(client, config);
    let requests: Vec<Value> = (0..n)
        .map(|a| update(&t.accounts, &format!("acc{a}"), 1, false))
        .collect();
    let body = json!({"txId":format!("writes-{n}"),"requests":requests});
    let message = c
        .parse_message(body.to_string().as_bytes())
        .map_err(|e| e.to_string())?;
    // Warm: the coordinator looks up the table's key schema once per process.
    let warm =
        json!({"txId":format!("warm-{n}"),"requests":[update(&t.accounts, "acc0", 0, false)]});
    let warm = c
        .parse_message(warm.to_string().as_bytes())
        .map_err(|e| e.to_string())?;
    let _ = c
        .run(&warm, Deadline::none())
        .await
        .map_err(|e| e.to_string())?;
    counting.reset_counts();
    let before = counting.calls();
    let started = Instant::now();
    let report = c
        .run(&message, Deadline::none())
        .await
        .map_err(|e| e.to_string())?;
    let requests = counting.calls() - before;
    let took_fast = fast_path && n <= dynamodb_exactly_once::__private::FAST_MAX_REQUESTS;
    // Measured by the interceptor: the longest chain of requests each sent after the previous
    // one was answered.
    let round_trips = counting.round_trips();
    Ok(json!({
        "n": n,
        "path": match (took_fast, read_ahead) {
            (true, _) => "TX fast path",
            (false, true) => "TX lock path",
            (false, false) => "TX lock, one by one",
        },
        "outcome": format!("{:?}", report.outcome),
        "requests": requests,
        "round_trips": round_trips,
        "write_calls": report.write_calls,
        "write_units": report.write_units,
        "billed_write_units": report.billed_write_units,
        "index_write_units": report.index_write_units,
        "millis": started.elapsed().as_millis() as u64,
    }))
}

async fn transfers(
    kind: &str,
    contended: bool,
    count: usize,
    latency_ms: u64,
) -> Result<Value, String> {
    let native = kind.starts_with("native");
    let with_record = kind == "native-record";
    let fast_path = kind == "fast";
    let client = client_with(None, 3);
    let t = Arc::new(tables(&client).await);
    let accounts = if contended {
        CONTENDED_ACCOUNTS
    } else {
        2 * COORDINATORS
    };
    seed(&client, &t.accounts, accounts).await?;
    let started = Instant::now();
    let server_before = crate::common::server_cpu_ms();
    let mut tasks = Vec::new();
    for w in 0..COORDINATORS {
        let t = t.clone();
        let client = crate::common::client_with_latency(None, latency_ms).await?;
        tasks.push(tokio::spawn(async move {
            let config = TxConfig::builder(&t.tx, [&t.accounts])
                .max_attempts(100)
                .fast_path(fast_path)
                // One transfer at a time per coordinator: no batch to group.
                .group_commit(false)
                .build()
                .expect("valid configuration");
            let c = Coordinator::new(client.clone(), config);
            let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64);
            let (mut committed, mut calls, mut units) = (0u64, 0u64, 0f64);
            let mut billed = 0f64;
            for i in (w..count).step_by(COORDINATORS) {
                let (from, to) = if contended {
                    let from = rng.random_range(0..CONTENDED_ACCOUNTS);
                    (
                        from,
                        (from + rng.random_range(1..CONTENDED_ACCOUNTS)) % CONTENDED_ACCOUNTS,
                    )
                } else if rng.random_bool(0.5) {
                    (2 * w, 2 * w + 1)
                } else {
                    (2 * w + 1, 2 * w)
                };
                let amount = rng.random_range(1..=100i64);
                let (from, to) = (format!("acc{from}"), format!("acc{to}"));
                if native {
                    let record = with_record.then(|| (t.tx.as_str(), format!("x{i}")));
                    let (ok, c_calls, c_units) = crate::txn_native::transfer(
                        &client,
                        &t.accounts,
                        &from,
                        &to,
                        amount,
                        record,
                    )
                    .await?;
                    committed += u64::from(ok);
                    calls += c_calls;
                    units += c_units;
                    // Two actions, twice each (DynamoDB Local's report is not the bill).
                    let actions = if with_record { 3.0 } else { 2.0 };
                    billed += 2.0 * actions * f64::from(u8::from(ok));
                } else {
                    let body = json!({"txId":format!("x{i}"),"requests":[
                        update(&t.accounts, &from, -amount, true),
                        update(&t.accounts, &to, amount, false)]});
                    let message = c
                        .parse_message(body.to_string().as_bytes())
                        .map_err(|e| e.to_string())?;
                    loop {
                        match c.run(&message, Deadline::none()).await {
                            Ok(r) => {
                                committed += u64::from(r.outcome.is_committed());
                                calls += r.write_calls;
                                units += r.write_units;
                                billed += r.billed_write_units;
                                break;
                            }
                            Err(TxError::Contention { .. }) => continue,
                            Err(e) => return Err(e.to_string()),
                        }
                    }
                }
            }
            Ok::<_, String>((committed, calls, units, billed))
        }));
    }
    let (mut committed, mut calls, mut units, mut billed) = (0u64, 0u64, 0f64, 0f64);
    for task in tasks {
        let (c, k, u, b) = task.await.map_err(|e| e.to_string())??;
        committed += c;
        calls += k;
        units += u;
        billed += b;
    }
    let secs = started.elapsed().as_secs_f64();
    let server_cpu_ms = server_before
        .zip(crate::common::server_cpu_ms())
        .map(|(before, after)| after.saturating_sub(before));
    Ok(json!({
        "server_cpu_ms": server_cpu_ms,
        "transfers": count,
        "committed": committed,
        "write_calls": calls,
        "write_units": units,
        "billed_write_units": billed,
        "seconds": secs,
        "per_second": count as f64 / secs,
    }))
}
