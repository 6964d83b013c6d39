//! A randomized property over the document writer: random list and set ops and blind
//! replaces on a few items, random lost responses (the SDK sends the request again) and
//! refused calls (not applied: the record fails and is delivered again), and SQS-style
//! redelivery of the failed records; each item must end as applying each record exactly once
//! in source order would leave it, with one version per applied write.
//!
//! A second property sends the records through the writer's pipeline as Kinesis or SQS
//! batches, with responses lost on any attempt (the last included), refused calls and
//! deadline cut-offs, and redelivers as the source would: SQS the reported records, Kinesis
//! every record from the lowest reported one on.
//!
//! `DOC_PROPERTY_SEED=<n>` replays one run (the seed is printed); `DOC_PROPERTY_CASES=<n>`
//! changes the number of cases (default 50).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::retry::{RetryPartition, TokenBucket};
use aws_sdk_dynamodb::Client;
use dev_testing::events;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once::document::{Document, DocumentConfig, DocumentRecord};
use dynamodb_exactly_once::{Deadline, ItemKey, Protocol, RecordResult};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::source::{Batch, SourceKind};
use dynamodb_exactly_once_lambda::Writer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};
use std::time::Duration;

const ITEMS: usize = 2;
const RECORDS: usize = 8;
/// Attempts of the SDK per call: the last attempt's response is never lost (a write that
/// landed with every response lost is redelivered, which applies it again: at-least-once
/// under redelivery, outside this property).
const ATTEMPTS: u32 = 3;

/// The model of one item: its user attributes, and how many writes were applied.
#[derive(Debug, Default, Clone, PartialEq)]
struct Model {
    exists: bool,
    list: Option<Vec<String>>,
    set: BTreeSet<String>,
    n: Option<u64>,
    writes: u64,
}

impl Model {
    fn apply(&mut self, op: &Value) {
        let v = |name: &str| op[name].as_str().unwrap_or_default().to_string();
        match op["op"].as_str().unwrap_or_default() {
            "list_append" => {
                self.list.get_or_insert_with(Vec::new).push(v("v"));
                self.write();
            }
            "list_remove" => {
                let list = self.list.as_mut();
                if let Some((list, i)) =
                    list.and_then(|l| l.iter().position(|x| *x == v("v")).map(|i| (l, i)))
                {
                    list.remove(i);
                    self.write();
                }
            }
            "set_add" => {
                self.set.insert(v("v"));
                self.write();
            }
            "set_remove" if self.exists => {
                self.set.remove(&v("v"));
                self.write();
            }
            "replace" => {
                *self = Model {
                    n: op["n"].as_u64(),
                    writes: self.writes,
                    ..Model::default()
                };
                self.write();
            }
            _ => {}
        }
    }

    fn write(&mut self) {
        self.exists = true;
        self.writes += 1;
    }

    /// The item as the writer should have left it (user attributes and version).
    fn expected(&self) -> Option<Value> {
        if !self.exists {
            return None;
        }
        let mut item = Map::new();
        if let Some(list) = &self.list {
            item.insert("l".into(), json!(list));
        }
        if !self.set.is_empty() {
            item.insert("s".into(), json!(self.set));
        }
        if let Some(n) = self.n {
            item.insert("n".into(), json!(n));
        }
        item.insert("doc_version".into(), json!(self.writes));
        Some(Value::Object(item))
    }
}

/// A random op (as the model reads it) and its record body on item `pk`.
fn random_op(rng: &mut StdRng, pk: &str) -> (Value, Value) {
    let v = ["a", "b", "c"][rng.random_range(0..3)];
    let key = json!({"PK": pk, "SK": "d"});
    match rng.random_range(0..10) {
        0..=3 => (
            json!({"op": "list_append", "v": v}),
            json!({"op": "list_append", "key": key, "path": "l", "values": [v]}),
        ),
        4..=5 => (
            json!({"op": "list_remove", "v": v}),
            json!({"op": "list_remove", "key": key, "path": "l", "value": v}),
        ),
        6 => (
            json!({"op": "set_add", "v": v}),
            json!({"op": "set_add", "key": key, "path": "s", "values": [v]}),
        ),
        7 => (
            json!({"op": "set_remove", "v": v}),
            json!({"op": "set_remove", "key": key, "path": "s", "values": [v]}),
        ),
        _ => {
            let n = rng.random_range(0..100);
            (
                json!({"op": "replace", "n": n}),
                json!({"op": "replace", "key": key, "document": {"n": n}}),
            )
        }
    }
}

/// Faults drawn from the seed: a request refused on every attempt (not applied: its record
/// fails and is delivered again), or a write's response lost on an attempt but the last (the
/// SDK sends it again); `on` turns them off for the last deliveries.
struct Faults {
    rng: StdRng,
    /// Per request body: attempts seen, and whether it is refused.
    requests: HashMap<String, (u32, bool)>,
    on: bool,
    /// Lose responses on the last attempt too (the write landed, the record fails: only the
    /// delivery's op token can recognise it when the record comes again).
    lose_last: bool,
}

fn injector(faults: Arc<Mutex<Faults>>) -> FaultInjector {
    FaultInjector::by_request(move |op, body| {
        let Ok(mut f) = faults.lock() else {
            return Fault::None;
        };
        let f = &mut *f;
        if !f.on {
            return Fault::None;
        }
        let refuse = f.rng.random_bool(0.1);
        let lose = f.rng.random_bool(0.3);
        let request = f.requests.entry(body.to_string()).or_insert((0, refuse));
        request.0 += 1;
        let write = op == "UpdateItem" || op == "PutItem";
        let lose_last = f.lose_last;
        match *request {
            (_, true) => Fault::Refuse,
            (attempt, false) if write && lose && (lose_last || attempt < ATTEMPTS) => {
                Fault::LoseResponse
            }
            _ => Fault::None,
        }
    })
}

async fn one_case(seed: u64, table: &str, case: usize) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let faults = Arc::new(Mutex::new(Faults {
        rng: StdRng::seed_from_u64(seed ^ 0x9e37_79b9),
        requests: HashMap::new(),
        on: true,
        lose_last: false,
    }));
    // A retry quota of its own, unlimited: the SDK's shared quota runs dry after ~100 retries
    // in a process, and a write whose every response was lost is then redelivered (applied
    // again: at-least-once under redelivery, outside this property).
    let partition = RetryPartition::custom(format!("document-property-{seed}"))
        .token_bucket(TokenBucket::unlimited())
        .build();
    let faulty = client_with(Some(injector(Arc::clone(&faults))), ATTEMPTS);
    let client = Client::from_conf(
        faulty
            .config()
            .to_builder()
            .retry_partition(partition)
            .build(),
    );
    let docs = Document::new(
        client,
        DocumentConfig::builder(table)
            .build()
            .map_err(|e| e.to_string())?,
    );
    let pks: Vec<String> = (0..ITEMS).map(|i| format!("c{case}s{seed}i{i}")).collect();
    let mut models: BTreeMap<String, Model> = BTreeMap::new();
    let mut pending: Vec<(usize, DocumentRecord)> = Vec::new();
    for i in 0..RECORDS {
        let pk = &pks[rng.random_range(0..ITEMS)];
        let (op, body) = random_op(&mut rng, pk);
        models.entry(pk.clone()).or_default().apply(&op);
        let record = docs
            .parse_record(body.to_string().as_bytes())
            .map_err(|r| r.to_string())?;
        pending.push((i, record));
    }
    // SQS style: every delivery carries the records reported failed, in source order (the
    // Kinesis restart from the lowest reported record is `through_the_pipeline` below).
    for delivery in 0.. {
        if pending.is_empty() {
            break;
        }
        if delivery == 5 {
            faults.lock().map_err(|e| e.to_string())?.on = false;
        }
        if delivery > 10 {
            return Err(format!("{} records still failing", pending.len()));
        }
        let mut failed = BTreeSet::new();
        for (i, result) in docs.apply(pending.clone(), Deadline::none()).await.results {
            match result {
                RecordResult::Done(_) => {}
                RecordResult::Failed(_) | RecordResult::Deferred => {
                    failed.insert(i);
                }
                RecordResult::Rejected(r) => return Err(format!("record {i} rejected: {r}")),
            }
        }
        pending.retain(|(i, _)| failed.contains(i));
    }
    faults.lock().map_err(|e| e.to_string())?.on = false;
    check(&docs, &pks, &models).await
}

async fn check(
    docs: &Document,
    pks: &[String],
    models: &BTreeMap<String, Model>,
) -> Result<(), String> {
    for pk in pks {
        let key = ItemKey::from_json(&json!({"PK": pk, "SK": "d"})).map_err(|e| e.to_string())?;
        let stored = docs.get_json(&key).await.map_err(|e| e.to_string())?;
        let actual = stored.map(|item| {
            let user: Map<String, Value> = item
                .into_iter()
                .filter(|(k, _)| {
                    k == "doc_version" || !(k.starts_with("doc_") || k == "PK" || k == "SK")
                })
                .collect();
            Value::Object(user)
        });
        let expected = models.get(pk).and_then(Model::expected);
        if actual != expected {
            return Err(format!("item {pk}: stored {actual:?}, model {expected:?}"));
        }
    }
    Ok(())
}

/// `DOC_PROPERTY_SEED` (random when unset, printed) and `DOC_PROPERTY_CASES` (`default`).
fn seed_and_cases(default: u64) -> (u64, u64) {
    let seed: u64 = std::env::var("DOC_PROPERTY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let cases: u64 = std::env::var("DOC_PROPERTY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    println!("DOC_PROPERTY_SEED={seed}");
    (seed, cases)
}

#[tokio::test]
async fn every_document_record_applies_once_in_source_order_under_lost_responses_and_redelivery() {
    let (seed, cases) = seed_and_cases(50);
    let setup = client();
    let table =
        dev_testing::template_tables(&setup, &["DocumentTable"]).await["DocumentTable"].clone();
    for case in 0..cases {
        let case_seed = seed.wrapping_add(case);
        if let Err(e) = one_case(case_seed, &table, usize::try_from(case).unwrap_or(0)).await {
            panic!("DOC_PROPERTY_SEED={seed}, case {case} (seed {case_seed}): {e}");
        }
    }
}

/// A faulty client with a retry quota of its own (see `one_case`).
fn faulty_client(faults: &Arc<Mutex<Faults>>, seed: u64) -> Client {
    let partition = RetryPartition::custom(format!("document-pipeline-{seed}"))
        .token_bucket(TokenBucket::unlimited())
        .build();
    let faulty = client_with(Some(injector(Arc::clone(faults))), ATTEMPTS);
    Client::from_conf(
        faulty
            .config()
            .to_builder()
            .retry_partition(partition)
            .build(),
    )
}

/// One case through the pipeline: the writer on a Kinesis or an SQS batch, redelivered as
/// the source would until every record is acknowledged.
async fn pipeline_case(
    seed: u64,
    tables: &BTreeMap<String, String>,
    case: usize,
) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let faults = Arc::new(Mutex::new(Faults {
        rng: StdRng::seed_from_u64(seed ^ 0x5bd1_e995),
        requests: HashMap::new(),
        on: true,
        lose_last: true,
    }));
    let docs = Document::new(
        faulty_client(&faults, seed),
        DocumentConfig::builder(&tables["DocumentTable"])
            .build()
            .map_err(|e| e.to_string())?,
    );
    let writer = Writer::builder("document-writer", docs)
        .dead_letters(DeadLetters::new(
            client(),
            &tables["DeadLetterTable"],
            "document-writer",
        ))
        .deadline_margin(Duration::from_millis(250))
        .build()
        .expect("valid writer");
    let kinesis = rng.random_bool(0.5);
    let pks: Vec<String> = (0..ITEMS).map(|i| format!("p{case}s{seed}i{i}")).collect();
    let mut models: BTreeMap<String, Model> = BTreeMap::new();
    let mut bodies = Vec::new();
    for _ in 0..RECORDS {
        let pk = &pks[rng.random_range(0..ITEMS)];
        let (op, body) = random_op(&mut rng, pk);
        models.entry(pk.clone()).or_default().apply(&op);
        bodies.push(body);
    }
    let kind = if kinesis {
        SourceKind::Kinesis
    } else {
        SourceKind::Sqs
    };
    let all = events::batch(kind, &bodies, 0);
    let mut pending: Vec<usize> = (0..RECORDS).collect();
    for delivery in 0.. {
        if pending.is_empty() {
            break;
        }
        if delivery == 6 {
            faults.lock().map_err(|e| e.to_string())?.on = false;
        }
        if delivery > 12 {
            return Err(format!("{} records still reported", pending.len()));
        }
        let batch = Batch::new(
            kind,
            pending.iter().map(|i| all.records[*i].clone()).collect(),
        );
        // Some deliveries get a budget of a few tens of ms: writes in flight are cut off.
        let deadline = if rng.random_bool(0.3) {
            let budget = 250 + rng.random_range(1..40);
            Deadline::from_epoch_ms(epoch_millis() + budget, Duration::from_millis(250))
        } else {
            Deadline::none()
        };
        let report = writer.handle_batch(&batch, deadline).await;
        let failed: BTreeSet<String> = report.response.failed_ids().into_iter().collect();
        let reported: Vec<usize> = pending
            .iter()
            .copied()
            .filter(|i| failed.contains(&all.records[*i].position.id))
            .collect();
        pending = match (kinesis, reported.first()) {
            // Kinesis: the shard restarts at the lowest reported record.
            (true, Some(lowest)) => pending.into_iter().filter(|i| i >= lowest).collect(),
            _ => reported,
        };
    }
    faults.lock().map_err(|e| e.to_string())?.on = false;
    check(writer.protocol(), &pks, &models).await
}

#[tokio::test]
async fn through_the_pipeline_every_record_applies_once_under_kinesis_and_sqs_redelivery() {
    let (seed, cases) = seed_and_cases(40);
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["DocumentTable", "DeadLetterTable"]).await;
    for case in 0..cases {
        let case_seed = seed.wrapping_add(case);
        if let Err(e) = pipeline_case(case_seed, &tables, usize::try_from(case).unwrap_or(0)).await
        {
            panic!("DOC_PROPERTY_SEED={seed}, case {case} (seed {case_seed}): {e}");
        }
    }
}
