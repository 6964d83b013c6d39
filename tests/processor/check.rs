//! The randomized checker of the batch processor's delivery guarantees (no DynamoDB: the
//! handler's effects and the dead-letter sink are in memory). Seeded schedules of one batch
//! of records over three keys, from SQS standard, SQS FIFO (a key is a message group),
//! Kinesis in shard order (also with the records packed into KPL aggregates of 1 to 4) or
//! Kinesis by partition key, delivered until nothing is reported: SQS again with the reported
//! messages, Kinesis from the lowest reported sequence number on. Each attempt of a record's
//! handler succeeds after 0–2 ms, asks for a retry, or panics, at random; some records are
//! always rejected, and the sink keeps a rejected record, leaves it to the source, or fails,
//! at random; some deliveries stop starting records within 3 ms (the rest are deferred). (No
//! cut-off of a running handler: its effect may have happened, and it runs again.) After each
//! schedule:
//!
//! * every record was handled exactly once: its handler's effect (an `Ok`) once, or, for a
//!   rejected record, kept once and never applied (Kinesis by partition key: at least once,
//!   the restart rule runs the other keys' later records again; KPL: at least once for a
//!   record that shares its aggregate, which comes back whole);
//! * SQS FIFO and Kinesis by partition key: each key's records were first handled in batch
//!   order; Kinesis in shard order: the whole batch was.
//!
//! `PROCESSOR_CHECK_SEED` sets the first seed (default: from the clock, printed),
//! `PROCESSOR_CHECK_SCHEDULES` how many (default 200); a failure prints the line that
//! replays its schedule (thread timing aside, an SQS standard batch runs concurrently).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynamodb_exactly_once::batch::RecordFailure;
use dynamodb_exactly_once::{Deadline, Rejection};
use dynamodb_exactly_once_lambda::dead_letter::{DeadLetterSink, Disposal};
use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError, StreamOrder};
use dynamodb_exactly_once_lambda::source::{Batch, SourceKind, SourceRecord, SubRecord};
use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::checker::{redeliver, Seeds};

const RECORDS: u64 = 16;
const KEYS: u64 = 3;
/// Deliveries of the batch before the schedule fails as stuck.
const DELIVERIES: usize = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    SqsStandard,
    SqsFifo,
    KinesisShard,
    /// In shard order, the records packed into KPL aggregates of 1 to 4 user records.
    KinesisShardKpl,
    KinesisPartitionKey,
}

impl Source {
    /// Whether a record that ran can run again: Kinesis by partition key restarts the shard
    /// from the lowest reported record, and the other keys' later records ran; a KPL
    /// aggregate comes back whole, its user records before the reported one too.
    fn runs_again(self) -> bool {
        matches!(self, Source::KinesisPartitionKey | Source::KinesisShardKpl)
    }

    fn is_kinesis(self) -> bool {
        matches!(
            self,
            Source::KinesisShard | Source::KinesisShardKpl | Source::KinesisPartitionKey
        )
    }
}

/// What happened, in the order it happened: `(record, how)`.
#[derive(Debug, Default)]
struct Journal {
    handled: Vec<(u64, &'static str)>,
}

/// The schedule's randomness and journal, shared by the handler and the sink.
#[derive(Debug)]
struct World {
    rng: Mutex<StdRng>,
    rejected: BTreeSet<u64>,
    journal: Mutex<Journal>,
}

impl World {
    fn roll(&self) -> f64 {
        self.rng
            .lock()
            .map_or(0.0, |mut r| r.random_range(0.0..1.0))
    }

    fn note(&self, seq: u64, how: &'static str) {
        if let Ok(mut j) = self.journal.lock() {
            j.handled.push((seq, how));
        }
    }
}

fn seq_of(body: &[u8]) -> u64 {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["seq"].as_u64())
        .unwrap_or(u64::MAX)
}

/// A sink that keeps a rejected record, leaves it to the source or fails, at random.
#[derive(Debug)]
struct FlakySink(Arc<World>);

impl DeadLetterSink for FlakySink {
    fn keep<'a>(
        &'a self,
        record: &'a SourceRecord,
        _reason: &'a Rejection,
    ) -> BoxFuture<'a, Result<Disposal, RecordFailure>> {
        Box::pin(async move {
            match self.0.roll() {
                r if r < 0.15 => Err(RecordFailure::External("the sink is down".into())),
                r if r < 0.25 => Ok(Disposal::LeftToSource),
                _ => {
                    self.0.note(seq_of(&record.body), "kept");
                    Ok(Disposal::Kept)
                }
            }
        })
    }

    fn target(&self) -> &str {
        "memory"
    }
}

async fn handle(world: Arc<World>, record: Record<Value>) -> Result<(), RecordError> {
    let seq = record.body["seq"].as_u64().unwrap_or(u64::MAX);
    let roll = world.roll();
    if roll < 0.12 {
        return Err(RecordError::retry("try again"));
    }
    if roll < 0.17 {
        panic!("the handler of record {seq} panicked");
    }
    tokio::time::sleep(Duration::from_millis((roll * 1000.0) as u64 % 3)).await;
    if world.rejected.contains(&seq) {
        return Err(RecordError::reject("never valid"));
    }
    world.note(seq, "applied");
    Ok(())
}

/// The batch as `source` delivers it: record `i` of key `i % KEYS` (KPL: consecutive records
/// share an aggregate's sequence number, 1 to 4 at a time).
fn batch(source: Source, rng: &mut StdRng) -> Batch {
    let bodies: Vec<Value> = (0..RECORDS)
        .map(|seq| json!({ "seq": seq, "key": format!("k{}", seq % KEYS) }))
        .collect();
    let kind = if source.is_kinesis() {
        SourceKind::Kinesis
    } else {
        SourceKind::Sqs
    };
    let mut batch = dev_testing::events::batch(kind, &bodies, 0);
    let (mut aggregate, mut size, mut left) = (String::new(), 0, 0);
    for (seq, r) in (0..).zip(batch.records.iter_mut()) {
        if source == Source::KinesisShardKpl {
            if left == 0 {
                size = rng.random_range(1..=4u64);
                (aggregate, left) = (r.position.id.clone(), size);
            }
            let sub_sequence_number = size - left;
            r.position.id = aggregate.clone();
            r.position.sub_record = Some(SubRecord::new(sub_sequence_number));
            left -= 1;
        }
        let key = format!("k{}", seq % KEYS);
        match source {
            Source::SqsFifo => {
                r.position.source_arn = Some("arn:aws:sqs:us-east-1:1:q.fifo".into());
                r.position.message_group_id = Some(key);
                r.position.sqs_sequence_number = Some(format!("{seq:020}"));
            }
            Source::KinesisShard | Source::KinesisShardKpl | Source::KinesisPartitionKey => {
                r.position.source_arn = Some("arn:aws:kinesis:us-east-1:1:stream/s".into());
                r.position.shard_id = Some("shardId-000000000000".into());
                r.position.partition_key = Some(key);
            }
            Source::SqsStandard => {}
        }
    }
    batch
}

/// Every record handled once; in order where the source promises it.
/// `shared`: the records that share their sequence number with others (a KPL aggregate's).
fn check(source: Source, world: &World, shared: &BTreeSet<u64>) -> Result<(), String> {
    let journal = world.journal.lock().map_err(|e| e.to_string())?;
    let mut times: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for (seq, how) in &journal.handled {
        times.entry(*seq).or_default().push(how);
    }
    for seq in 0..RECORDS {
        let want = if world.rejected.contains(&seq) {
            "kept"
        } else {
            "applied"
        };
        let seen = times.get(&seq).map(Vec::as_slice).unwrap_or_default();
        let once = seen == [want];
        let again = !seen.is_empty() && seen.iter().all(|how| *how == want);
        let may_run_again = match source {
            Source::KinesisShardKpl => shared.contains(&seq),
            _ => source.runs_again(),
        };
        if !(once || may_run_again && again) {
            return Err(format!(
                "record {seq}: {:?}, expected [{want}]",
                times.get(&seq)
            ));
        }
    }
    // The first time each record was handled.
    let mut first = BTreeSet::new();
    let order: Vec<u64> = journal
        .handled
        .iter()
        .map(|(seq, _)| *seq)
        .filter(|seq| first.insert(*seq))
        .collect();
    let in_order = |key: Option<u64>| {
        let of_key: Vec<u64> = order
            .iter()
            .copied()
            .filter(|s| key.is_none_or(|k| s % KEYS == k))
            .collect();
        of_key.windows(2).all(|w| w[0] < w[1])
    };
    let ordered = match source {
        Source::SqsStandard => true,
        Source::SqsFifo | Source::KinesisPartitionKey => (0..KEYS).all(|k| in_order(Some(k))),
        Source::KinesisShard | Source::KinesisShardKpl => in_order(None),
    };
    if ordered {
        Ok(())
    } else {
        Err(format!("out of order: {order:?}"))
    }
}

async fn schedule(seed: u64) -> Result<Source, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let sources = [
        Source::SqsStandard,
        Source::SqsFifo,
        Source::KinesisShard,
        Source::KinesisShardKpl,
        Source::KinesisPartitionKey,
    ];
    let source = sources[rng.random_range(0..sources.len())];
    let world = Arc::new(World {
        rejected: (0..RECORDS).filter(|_| rng.random_bool(0.15)).collect(),
        rng: Mutex::new(StdRng::seed_from_u64(rng.random())),
        journal: Mutex::default(),
    });
    let handler_world = world.clone();
    let processor = Processor::builder("checker", move |record: Record<Value>| {
        handle(handler_world.clone(), record)
    })
    .dead_letters(FlakySink(world.clone()))
    .stream_order(match source {
        Source::KinesisPartitionKey => StreamOrder::PartitionKey,
        _ => StreamOrder::Shard,
    })
    .concurrency(rng.random_range(1..=8))
    .build()
    .map_err(|e| e.to_string())?;
    let mut pending = batch(source, &mut rng);
    let mut ids: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for r in &pending.records {
        ids.entry(r.position.id.as_str())
            .or_default()
            .push(seq_of(&r.body));
    }
    let shared: BTreeSet<u64> = ids
        .values()
        .filter(|s| s.len() > 1)
        .flatten()
        .copied()
        .collect();
    for _ in 0..DELIVERIES {
        // Sometimes the invocation stops starting records within 3 ms (deferred, reported).
        let deadline = if rng.random_bool(0.3) {
            Deadline::after(Duration::from_millis(rng.random_range(0..4)))
        } else {
            Deadline::none()
        };
        let report = processor.handle_batch(&pending, deadline).await;
        if !redeliver(&mut pending, &report.response.failed_ids()) {
            check(source, &world, &shared)?;
            return Ok(source);
        }
    }
    Err(format!(
        "records still reported after {DELIVERIES} deliveries"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_schedules_handle_every_record_once_in_the_order_its_source_promises() {
    let seeds = Seeds::from_env("PROCESSOR_CHECK", 200);
    let mut sources: BTreeMap<String, usize> = BTreeMap::new();
    for seed in seeds.iter() {
        match schedule(seed).await {
            Ok(source) => *sources.entry(format!("{source:?}")).or_default() += 1,
            Err(failure) => panic!("schedule {seed}: {failure}\n{}", seeds.replay(seed)),
        }
    }
    println!("processor checker: schedules by source {sources:?}");
}
