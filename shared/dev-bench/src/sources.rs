//! The batch processor on Kafka batches against Kinesis batches of the same size (issue 41's
//! goal: Kafka within 10 % of Kinesis): records/s with a handler that does nothing, in the
//! default order (`StreamOrder::Shard`: one record at a time per shard or topic-partition) and
//! unordered, the Kafka batch on one partition (the Kinesis batch's one shard) and spread over
//! four, and Kafka values in Avro (Confluent framing) decoded before the handler. No DynamoDB:
//! only the processor runs.
//!
//! Every record carries the same 37-byte JSON value (`{"orderId":"o-<i>","amountCents":250}`;
//! the Avro row: the same two fields in Avro); Kinesis records have a partition key, Kafka
//! records a key and one header, as Lambda delivers them. A round is timed from the event as
//! `lambda_runtime` hands it over (a `serde_json::Value`) to the partial batch response
//! (`Batch::from_event`, then `handle_batch`, which logs the summary and prints its EMF
//! line); each row runs in a process of its own, one round untimed first, and is the median
//! round.

use std::time::Instant;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError, StreamOrder};
use dynamodb_exactly_once_lambda::source::value::KafkaValues;
use dynamodb_exactly_once_lambda::Batch;
use serde_json::{json, Value};

use crate::common::next_arg;

/// Options of `bench sources`.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Batch sizes (records per event), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    batch_sizes: Vec<usize>,
    /// Timed rounds per row (the median counts).
    #[arg(long, default_value_t = 60)]
    rounds: usize,
}

/// The rows: (source, partitions, order, value format).
const ROWS: [(&str, usize, &str, &str); 6] = [
    ("kinesis", 1, "shard", "json"),
    ("kafka", 1, "shard", "json"),
    ("kafka", 4, "shard", "json"),
    ("kinesis", 1, "unordered", "json"),
    ("kafka", 1, "unordered", "json"),
    ("kafka", 1, "shard", "avro"),
];

const PAYMENT_AVSC: &str = r#"{"type": "record", "name": "Order", "fields": [
  {"name": "orderId", "type": "string"}, {"name": "amountCents", "type": "long"}]}"#;

pub async fn run(options: Options) -> Result<(), String> {
    println!(
        "sources benchmark: the batch processor (a handler that does nothing, Value records) on \
         Kinesis and Kafka events of the same size; the median of {} timed rounds after one \
         untimed, each row in a process of its own",
        options.rounds
    );
    println!();
    println!(
        "{:>6} {:<8} {:>10} {:<10} {:<6} {:>12} {:>10} {:>9}",
        "batch", "source", "partitions", "order", "value", "records/s", "µs/record", "vs Kinesis"
    );
    for &size in &options.batch_sizes {
        let mut kinesis = [0.0_f64; 2];
        for (source, partitions, order, value) in ROWS {
            let args = [
                source.to_string(),
                partitions.to_string(),
                order.to_string(),
                value.to_string(),
                size.to_string(),
                options.rounds.to_string(),
            ];
            let rate = worker_rate(&args)?;
            let base = &mut kinesis[usize::from(order == "unordered")];
            if source == "kinesis" {
                *base = rate;
            }
            let ratio = if *base > 0.0 {
                rate / *base * 100.0
            } else {
                0.0
            };
            println!(
                "{size:>6} {source:<8} {partitions:>10} {order:<10} {value:<6} {rate:>12.0} {:>10.2} {ratio:>8.0}%",
                1e6 / rate.max(f64::MIN_POSITIVE)
            );
        }
    }
    Ok(())
}

/// One row, measured in a child process (`bench worker sources ...`): records/s.
fn worker_rate(args: &[String]) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args(["worker", "sources"])
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "sources worker failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().ok_or("the worker printed nothing")?;
    let row: Value = serde_json::from_str(line).map_err(|e| format!("{line:?}: {e}"))?;
    row["records_per_s"]
        .as_f64()
        .ok_or_else(|| format!("{line:?}: no records_per_s"))
}

/// `worker sources <kinesis|kafka> <partitions> <shard|unordered> <json|avro> <records>
/// <rounds>`: one JSON line.
pub async fn worker(args: Vec<String>) -> Result<(), String> {
    let mut args = args.into_iter();
    let source: String = next_arg(&mut args, "source")?;
    let partitions: usize = next_arg(&mut args, "partitions")?;
    let order: String = next_arg(&mut args, "order")?;
    let value: String = next_arg(&mut args, "value")?;
    let records: usize = next_arg(&mut args, "records")?;
    let rounds: usize = next_arg(&mut args, "rounds")?;
    let avro = value == "avro";
    let event = match source.as_str() {
        "kinesis" => kinesis_event(records),
        "kafka" => kafka_event(records, partitions.max(1), avro)?,
        other => return Err(format!("worker: {other:?} is not kinesis or kafka")),
    };
    let order = match order.as_str() {
        "unordered" => StreamOrder::Unordered,
        _ => StreamOrder::Shard,
    };
    let mut builder = Processor::builder("bench", |_: Record<Value>| async {
        Ok::<(), RecordError>(())
    })
    .stream_order(order)
    .dead_letters(dynamodb_exactly_once_lambda::dead_letter::ReportOnly);
    if avro {
        builder = builder.kafka_values(
            KafkaValues::avro("BENCH_SCHEMA", PAYMENT_AVSC).map_err(|e| e.to_string())?,
        );
    }
    let processor = builder.build().map_err(|e| e.to_string())?;
    let mut times = Vec::with_capacity(rounds);
    for round in 0..=rounds {
        let event = event.clone();
        let started = Instant::now();
        let batch = Batch::from_event(event).map_err(|e| e.to_string())?;
        let report = processor.handle_batch(&batch, Deadline::none()).await;
        if round > 0 {
            times.push(started.elapsed());
        }
        if !report.response.failed_ids().is_empty() {
            return Err("a record was reported".into());
        }
    }
    times.sort();
    let median = times.get(times.len() / 2).copied().unwrap_or_default();
    let rate = records as f64 / median.as_secs_f64().max(f64::MIN_POSITIVE);
    println!("{}", json!({ "records_per_s": rate }));
    Ok(())
}

fn body(i: usize) -> Vec<u8> {
    json!({"orderId": format!("o-{i}"), "amountCents": 250})
        .to_string()
        .into_bytes()
}

/// A Kinesis event of one shard, as Lambda delivers it.
fn kinesis_event(records: usize) -> Value {
    let now = dynamodb_exactly_once::__private::epoch_millis() as f64 / 1000.0;
    let records: Vec<Value> = (0..records)
        .map(|i| {
            let seq = format!("4959033827149025660855969253836157109592157598913658{i:04}");
            json!({
                "kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": format!("o-{i}"),
                    "sequenceNumber": seq, "data": BASE64.encode(body(i)),
                    "approximateArrivalTimestamp": now},
                "eventSource": "aws:kinesis", "eventVersion": "1.0",
                "eventID": format!("shardId-000000000000:{seq}"),
                "eventName": "aws:kinesis:record", "awsRegion": "us-east-1",
                "invokeIdentityArn": "arn:aws:iam::123456789012:role/bench",
                "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/orders",
            })
        })
        .collect();
    json!({ "Records": records })
}

/// A Kafka (MSK) event over `partitions` partitions of one topic, records dealt round-robin;
/// `avro`: each value the Avro encoding of the same fields, in Confluent's framing.
fn kafka_event(records: usize, partitions: usize, avro: bool) -> Result<Value, String> {
    let now = dynamodb_exactly_once::__private::epoch_millis();
    let mut by_partition = serde_json::Map::new();
    for i in 0..records {
        let partition = i % partitions;
        let value = if avro { avro_value(i) } else { body(i) };
        let record = json!({
            "topic": "orders", "partition": partition, "offset": i / partitions,
            "timestamp": now, "timestampType": "CREATE_TIME",
            "key": BASE64.encode(format!("o-{i}")), "value": BASE64.encode(value),
            "headers": [{"source": [98, 101, 110, 99, 104]}],
        });
        let list = by_partition
            .entry(format!("orders-{partition}"))
            .or_insert_with(|| json!([]));
        list.as_array_mut().ok_or("not an array")?.push(record);
    }
    Ok(json!({
        "eventSource": "aws:kafka",
        "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/orders/abc",
        "bootstrapServers": "b-1.orders.kafka.us-east-1.amazonaws.com:9098",
        "records": by_partition,
    }))
}

/// `{"orderId": "o-<i>", "amountCents": 250}` in Avro (zig-zag varints, a length-prefixed
/// string) after Confluent's header (magic byte 0, schema id 1).
fn avro_value(i: usize) -> Vec<u8> {
    let id = format!("o-{i}");
    let mut out = vec![0, 0, 0, 0, 1];
    zigzag(id.len() as i64, &mut out);
    out.extend_from_slice(id.as_bytes());
    zigzag(250, &mut out);
    out
}

fn zigzag(n: i64, out: &mut Vec<u8>) {
    let mut n = ((n << 1) ^ (n >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}
