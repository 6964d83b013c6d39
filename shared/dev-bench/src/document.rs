//! Document writer benchmark: `list_append` records over 100 items through the writer, as it
//! runs now (the document writer is not idempotent under redelivery, so each batch applies in
//! source order, one record at a time, and stops at the first failure) against the routing
//! before (items concurrently: faster, but a Kinesis restart or a cut-off re-applies later
//! appends), in the same run, with DynamoDB Local's own latency and with a 5 ms round trip
//! (a loopback proxy), on SQS batches of 10 and Kinesis batches of 100.

use std::time::Instant;

use dev_testing::events::batch;
use dev_testing::{client, client_for, proxy, template_tables, FaultInjector};
use dynamodb_exactly_once::batch::Redelivery;
use dynamodb_exactly_once::document::{Document, DocumentConfig, DocumentOutcome, DocumentRecord};
use dynamodb_exactly_once::{Applied, Deadline, Protocol, Rejection};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::source::SourceKind;
use dynamodb_exactly_once_lambda::Writer;
use serde_json::{json, Value};

/// The document protocol routed as before: as if redelivery were idempotent.
struct AsBefore(Document);

impl Protocol for AsBefore {
    type Record = DocumentRecord;
    type Outcome = DocumentOutcome;

    fn parse(&self, body: &[u8]) -> Result<DocumentRecord, Rejection> {
        self.0.parse(body)
    }

    fn parse_delivered(&self, body: &[u8], delivery: &str) -> Result<DocumentRecord, Rejection> {
        self.0.parse_delivered(body, delivery)
    }

    fn concurrency(&self) -> usize {
        self.0.concurrency()
    }

    fn redelivery(&self) -> Redelivery {
        Redelivery::Idempotent
    }

    async fn apply(
        &self,
        records: Vec<(usize, DocumentRecord)>,
        deadline: Deadline,
    ) -> Applied<DocumentOutcome> {
        self.0.apply(records, deadline).await
    }
}

const RECORDS: usize = 1000;
const ITEMS: usize = 100;

pub async fn run() -> Result<(), String> {
    println!(
        "document-writer benchmark against DynamoDB Local ({})",
        dev_testing::endpoint()
    );
    println!("{RECORDS} list_append records over {ITEMS} items, one writer, batches delivered one after another");
    println!("now = source order, one record at a time (safe under Kinesis restarts and cut-offs)");
    println!("before = items concurrently (the routing before issue 17: re-applies appends on a restart)");
    println!();
    println!("| routing | source, batch | round trip | records/s | UpdateItem calls per record |");
    println!("|---|---|---|---:|---:|");
    let tables = template_tables(&client(), &["DocumentTable", "DeadLetterTable"]).await;
    let delayed = proxy::delaying(std::time::Duration::from_millis(5)).await?;
    for (endpoint, latency) in [(dev_testing::endpoint(), "local"), (delayed, "+5 ms")] {
        for (kind, size) in [(SourceKind::Sqs, 10), (SourceKind::Kinesis, 100)] {
            for now in [true, false] {
                let (per_s, calls) = one_run(&tables, &endpoint, kind, size, now).await?;
                println!(
                    "| {} | {kind:?}, {size} | {latency} | {per_s:.0} | {calls:.2} |",
                    if now { "now" } else { "before" }
                );
            }
        }
    }
    Ok(())
}

async fn one_run(
    tables: &std::collections::BTreeMap<String, String>,
    endpoint: &str,
    kind: SourceKind,
    size: usize,
    now: bool,
) -> Result<(f64, f64), String> {
    let counting = FaultInjector::counting();
    let c = client_for(endpoint, Some(counting.clone()), 3);
    let docs = Document::new(
        c.clone(),
        DocumentConfig::builder(&tables["DocumentTable"])
            .build()
            .map_err(|e| e.to_string())?,
    );
    let letters = DeadLetters::new(client(), &tables["DeadLetterTable"], "document-writer");
    let run = rand::random::<u32>();
    let bodies: Vec<Value> = (0..RECORDS)
        .map(|i| {
            json!({"op": "list_append", "key": {"PK": format!("b{run}i{}", i % ITEMS), "SK": "d"},
                "path": "l", "values": [i]})
        })
        .collect();
    let started = Instant::now();
    for (n, chunk) in bodies.chunks(size).enumerate() {
        let b = batch(kind, chunk, n * size);
        let failed = if now {
            let w = writer(docs.clone(), letters.clone());
            w.handle_batch(&b, Deadline::none())
                .await
                .response
                .failed_ids()
        } else {
            let w = writer(AsBefore(docs.clone()), letters.clone());
            w.handle_batch(&b, Deadline::none())
                .await
                .response
                .failed_ids()
        };
        if !failed.is_empty() {
            return Err(format!("{} records failed", failed.len()));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let per_record = counting.calls_of("UpdateItem") as f64 / RECORDS as f64;
    #[allow(clippy::cast_precision_loss)]
    Ok((RECORDS as f64 / seconds, per_record))
}

fn writer<P: Protocol>(protocol: P, dead_letters: DeadLetters) -> Writer<P> {
    Writer::builder("document-writer", protocol)
        .dead_letters(dead_letters)
        .deadline_margin(std::time::Duration::from_secs(1))
        .build()
        .expect("valid writer")
}
