//! `bench`: benchmarks against DynamoDB Local, and demo helpers that need fault injection.
//! Kept out of the operator tool (`ops`): this binary links the test support crate.
//!
//! ```text
//! bench ratchet [--records 1000,10000 --keys K --duplicates F --concurrency C --latency-ms L]
//! bench counter                      counter writer vs one UpdateItem per record
//! bench counter-steady [--rate R --rollup-interval S --hot-rate N --hot-seconds S]
//!                                    counter in steady state: journal, inline, Powertools-equivalent
//! bench counter-shapes [--days D --fast-hours H --seconds S --interval S --hot-rates R,...]
//!                                    counter journal at N shards with rollover (Streams double):
//!                                    WCU/event in the steady state; throughput and lag
//! bench mapping [--shards N --rate R --seconds S --batch-size B --batching-window W]
//!                                    a handler through the event source mapping emulator over
//!                                    the Streams double: throughput and lag
//! bench txn [--transfers N]          transaction protocol vs TransactWriteItems
//! bench document                   document writer: source order (now) vs items concurrently (before)
//! bench lease [--rounds N]           lease lock: acquire / heartbeat / release / takeover latency
//! bench processor [--records N]      the batch processor alone vs Powertools' BatchProcessor
//! bench sources [--batch-sizes 100,1000]
//!                                    the batch processor on Kafka vs Kinesis batches
//! bench versioning                   versioned updates/s under contention, write units
//! bench crash-tx --fail-after K EVENT.json
//!                                    run a transaction whose coordinator dies after K calls
//! ```
//!
//! Each scenario runs in a child process (`bench worker ...`) so that its peak RSS (VmHWM) is
//! the function's own, not the harness's.

mod common;
mod counter;
mod counter_shapes;
mod counter_steady;
mod crash;
mod document;
mod figures;
mod idempotency;
mod lease;
mod mapping;
mod processor;
mod ratchet;
mod rollup_run;
mod sources;
mod txn;
mod txn_batch;
mod txn_native;
mod txn_sweep;
mod versioning;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Benchmarks against DynamoDB Local.
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The ratchet writer against one conditional PutItem per record.
    Ratchet(ratchet::Options),
    /// The counter writer against one UpdateItem per record.
    Counter,
    /// The counter in steady state (issue 19): journal vs inline vs a Powertools-equivalent,
    /// billed write units per event in five regimes, and a hot counter.
    CounterSteady(counter_steady::Options),
    /// The counter journal at the stream shapes DynamoDB has (N shards, rollover) through the
    /// Streams double: write units per event in the steady state, throughput and lag.
    CounterShapes(Box<counter_shapes::Options>),
    /// A stream handler through the event source mapping emulator over the Streams double
    /// at N shards: throughput and lag.
    Mapping(mapping::Options),
    /// The transaction protocol against native TransactWriteItems.
    Txn {
        /// Transfers per throughput run.
        #[arg(long, default_value_t = 800)]
        transfers: usize,
    },
    /// The document writer in source order (now) against items concurrently (before).
    Document,
    /// The idempotency layer behind the batch processor against Powertools (Python).
    Idempotency,
    /// The lease lock: acquire, heartbeat, release and takeover latencies.
    Lease(lease::Options),
    /// The batch processor alone (a handler doing nothing) against Powertools' BatchProcessor.
    Processor(processor::Options),
    /// The batch processor on Kafka batches against Kinesis batches of the same size.
    Sources(sources::Options),
    /// Versioned updates under contention (1, 8, 32 writers; 1 and 100 items) and their
    /// write units.
    Versioning,
    /// Run the first message of an SQS event with a coordinator that dies after K calls.
    CrashTx {
        /// DynamoDB calls before the coordinator dies.
        #[arg(long, default_value_t = 5)]
        fail_after: usize,
        /// The SQS event.
        event: PathBuf,
    },
    /// One scenario in this process (started by the benchmarks themselves).
    #[command(hide = true)]
    Worker {
        /// The benchmark.
        bench: String,
        /// Its scenario arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Ratchet(options) => ratchet::run(options).await,
        Command::Counter => counter::run().await,
        Command::CounterSteady(options) => counter_steady::run(options).await,
        Command::CounterShapes(options) => counter_shapes::run(*options).await,
        Command::Mapping(options) => mapping::run(options).await,
        Command::Txn { transfers } => txn::run(transfers).await,
        Command::Document => document::run().await,
        Command::Idempotency => idempotency::run().await,
        Command::Lease(options) => lease::run(options).await,
        Command::Processor(options) => processor::run(options).await,
        Command::Sources(options) => sources::run(options).await,
        Command::Versioning => versioning::run().await,
        Command::CrashTx { fail_after, event } => crash::run(fail_after, &event).await,
        Command::Worker { bench, args } => match bench.as_str() {
            "ratchet" => ratchet::worker(args).await,
            "counter" => counter::worker(args).await,
            "txn" => txn::worker(args).await,
            "versioning" => versioning::worker(args).await,
            "processor" => processor::worker(args).await,
            "sources" => sources::worker(args).await,
            other => Err(format!("worker: unknown benchmark {other:?}")),
        },
    };
    // Tables made on DynamoDB itself (`AWS_ENDPOINT_URL_DYNAMODB` a region's) are deleted.
    // Read from the environment: `endpoint()` would start a DynamoDB Local for a benchmark
    // that never used one.
    let remote = std::env::var("AWS_ENDPOINT_URL_DYNAMODB")
        .is_ok_and(|e| !e.is_empty() && !dev_testing::is_local(&e));
    if remote {
        for failed in dev_testing::delete_remote_tables(&dev_testing::client()).await {
            eprintln!("bench: could not delete table {failed}");
        }
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bench: {message}");
            ExitCode::FAILURE
        }
    }
}
