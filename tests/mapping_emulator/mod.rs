//! The event source mapping emulator (`dev_testing::mapping`), one test per Lambda rule,
//! with trivial handlers over the Streams double (synthetic streams, and one DynamoDB Local
//! table): the event's shape, lineage, batches, lanes, partial batch responses, bisect,
//! retries and record age, filters, tumbling windows, faults, trimmed positions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dev_testing::mapping::{Handler, Mapping, MappingConfig, MappingConfigBuilder};
use dev_testing::{unique_prefix, Shape, StreamsDouble};
use dynamodb_exactly_once::Clock;
use serde_json::{json, Value};

mod failures;
mod lineage;
mod windows;

const SECOND: u64 = 1_000;
const MINUTE: u64 = 60_000;
const HOUR: u64 = 3_600_000;

/// A clock the test moves.
#[derive(Clone)]
struct TestClock(Arc<AtomicU64>);

impl TestClock {
    fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

/// A double with one synthetic stream (`pk` partition key) and the clock it shares.
struct Env {
    double: StreamsDouble,
    clock: TestClock,
    shared: Clock,
    arn: String,
}

async fn env(shape: Shape) -> Env {
    let now = Arc::new(AtomicU64::new(1_800_000_000_000));
    let read = Arc::clone(&now);
    let shared = Clock::from_fn(move || read.load(Ordering::SeqCst));
    let double = StreamsDouble::start(shape, shared.clone())
        .await
        .expect("double");
    let arn = format!(
        "arn:aws:dynamodb:us-east-1:000000000000:table/{}emu/stream/2027-01-15T08:00:00.000",
        unique_prefix()
    );
    double.add_stream(&arn, "pk");
    Env {
        double,
        clock: TestClock(now),
        shared,
        arn,
    }
}

impl Env {
    /// `INSERT`s of `pk` = each key, `n` = its index in `keys`.
    fn insert(&self, keys: &[&str]) {
        self.write("INSERT", keys);
    }

    fn write(&self, event_name: &str, keys: &[&str]) {
        let records = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                json!({
                    "eventName": event_name,
                    "dynamodb": {
                        "Keys": {"pk": {"S": k}},
                        "NewImage": {"pk": {"S": k}, "n": {"N": i.to_string()}},
                    }
                })
            })
            .collect();
        self.double.inject(&self.arn, records).expect("inject");
    }

    fn mapping(&self, config: MappingConfigBuilder) -> Mapping {
        let config = config.build().expect("config");
        Mapping::new(self.double.client(), &self.arn, config).with_clock(self.shared.clone())
    }
}

/// Every event the handler got, in order.
type Log = Arc<Mutex<Vec<Value>>>;

/// A handler that logs each event and answers `respond(event, its index)`.
fn handler(
    respond: impl Fn(&Value, usize) -> Result<Value, String> + Send + Sync + 'static,
) -> (Log, impl Handler) {
    let log: Log = Arc::default();
    let respond = Arc::new(respond);
    let l = Arc::clone(&log);
    let h = move |event: Value| {
        let (l, respond) = (Arc::clone(&l), Arc::clone(&respond));
        async move {
            let n = {
                let mut g = l.lock().expect("log");
                g.push(event.clone());
                g.len() - 1
            };
            respond(&event, n)
        }
    };
    (log, h)
}

fn events(log: &Log) -> Vec<Value> {
    log.lock().expect("log").clone()
}

/// The `pk` of each record of an event.
fn keys(event: &Value) -> Vec<String> {
    records(event)
        .iter()
        .map(|r| {
            r["dynamodb"]["Keys"]["pk"]["S"]
                .as_str()
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

/// The sequence numbers of an event's records.
fn seqs(event: &Value) -> Vec<String> {
    records(event)
        .iter()
        .map(|r| {
            r["dynamodb"]["SequenceNumber"]
                .as_str()
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

fn records(event: &Value) -> Vec<Value> {
    event["Records"].as_array().cloned().unwrap_or_default()
}

/// Every key delivered, over all events, in order.
fn all_keys(log: &Log) -> Vec<String> {
    events(log).iter().flat_map(keys).collect()
}

fn config() -> MappingConfigBuilder {
    MappingConfig::builder()
}

#[tokio::test]
async fn every_record_is_delivered_once_in_order_with_lambdas_fields() {
    let e = env(Shape::shards(1)).await;
    e.insert(&["a", "b", "c"]);
    let mut m = e.mapping(config().batch_size(2));
    let (log, h) = handler(|_, _| Ok(Value::Null));
    m.run_until_idle(&h, 20).await.expect("run");
    assert_eq!(all_keys(&log), ["a", "b", "c"]);
    let first = &events(&log)[0];
    assert_eq!(records(first).len(), 2, "BatchSize 2");
    let r = &records(first)[0];
    for field in [
        "eventID",
        "eventName",
        "eventVersion",
        "eventSource",
        "awsRegion",
    ] {
        assert!(r[field].is_string(), "{field} in {r}");
    }
    assert_eq!(r["eventSourceARN"], json!(e.arn));
    for field in [
        "Keys",
        "NewImage",
        "SequenceNumber",
        "SizeBytes",
        "StreamViewType",
    ] {
        assert!(!r["dynamodb"][field].is_null(), "dynamodb.{field} in {r}");
    }
    assert!(
        r["dynamodb"]["ApproximateCreationDateTime"].is_number(),
        "{r}"
    );
    let last = seqs(&events(&log)[1])[0].clone();
    let cp = m.checkpoints();
    assert_eq!(cp.len(), 1);
    assert_eq!(
        cp.values().next().and_then(|c| c.sequence_number.clone()),
        Some(last)
    );
}

#[tokio::test]
async fn the_event_deserializes_into_aws_lambda_events_types() {
    use aws_lambda_events::event::dynamodb::{Event, TimeWindowEvent};
    let e = env(Shape::shards(1)).await;
    e.insert(&["a"]);
    let mut m = e.mapping(config());
    let (log, h) = handler(|_, _| Ok(Value::Null));
    m.run_until_idle(&h, 10).await.expect("run");
    let event: Event = serde_json::from_value(events(&log)[0].clone()).expect("Event");
    assert_eq!(event.records.len(), 1);
    assert_eq!(event.records[0].event_name, "INSERT");
    let mut w = e.mapping(config().tumbling_window_secs(60));
    let (wlog, wh) = handler(|_, _| Ok(json!({"state": {"n": "1"}})));
    w.run_until_idle(&wh, 10).await.expect("run");
    let windowed: TimeWindowEvent =
        serde_json::from_value(events(&wlog)[0].clone()).expect("TimeWindowEvent");
    let props = &windowed.time_window_properties;
    assert_eq!(
        props.shard_id.as_deref(),
        m.checkpoints().keys().next().map(String::as_str)
    );
    assert!(props.window.end > props.window.start);
}

#[tokio::test]
async fn filtered_records_never_reach_the_function_and_are_checkpointed_past() {
    let e = env(Shape::shards(1)).await;
    e.insert(&["a"]);
    e.write("REMOVE", &["ttl-1", "ttl-2"]);
    e.insert(&["b"]);
    e.write("MODIFY", &["c"]);
    let mut m = e.mapping(config().filter_pattern(json!({"eventName": ["INSERT"]})));
    let (log, h) = handler(|_, _| Ok(Value::Null));
    m.run_until_idle(&h, 10).await.expect("run");
    assert_eq!(all_keys(&log), ["a", "b"]);
    assert_eq!(m.stats().records_filtered, 3);
    let listed = e.double.listed_shards(&e.arn);
    let last = m.checkpoints()[&listed[0].shard_id].sequence_number.clone();
    let tip: u128 = last.expect("checkpoint").parse().expect("number");
    let b: u128 = seqs(&events(&log)[0])[1].parse().expect("number");
    assert!(tip > b, "the checkpoint passed the filtered MODIFY after b");
}

/// A fresh DynamoDB Local table (`pk` S) with a NEW_IMAGE stream: its name and stream ARN.
async fn table(c: &aws_sdk_dynamodb::Client) -> (String, String) {
    let name = format!("{}emutable", unique_prefix());
    let arn = crate::common::stream_table(c, &name).await;
    (name, arn)
}

#[tokio::test]
async fn a_dynamodb_local_tables_stream_is_read_through_the_double_and_directly() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let c = dev_testing::client();
    let (name, arn) = table(&c).await;
    for (pk, n) in [("a", "1"), ("b", "2"), ("a", "3")] {
        c.put_item()
            .table_name(&name)
            .item("pk", AttributeValue::S(pk.into()))
            .item("n", AttributeValue::N(n.into()))
            .send()
            .await
            .expect("put");
    }
    let e = env(Shape::shards(4)).await;
    let through_double = e.double.client();
    let direct = dev_testing::streams_client();
    for (label, client) in [("double", through_double), ("DynamoDB Local", direct)] {
        let config = config().filter_pattern(json!({"eventName": ["INSERT", "MODIFY"]}));
        let mut m = Mapping::new(client, &arn, config.build().expect("config"))
            .with_clock(e.shared.clone());
        let (log, h) = handler(|_, _| Ok(Value::Null));
        m.run_until_idle(&h, 20).await.expect("run");
        let mut got: Vec<(String, String)> = events(&log)
            .iter()
            .flat_map(records)
            .map(|r| {
                let image = &r["dynamodb"]["NewImage"];
                (
                    image["pk"]["S"].as_str().unwrap_or("?").to_string(),
                    image["n"]["N"].as_str().unwrap_or("?").to_string(),
                )
            })
            .collect();
        let a: Vec<&str> = got
            .iter()
            .filter(|(k, _)| k == "a")
            .map(|(_, n)| n.as_str())
            .collect();
        assert_eq!(a, ["1", "3"], "{label}: a's records in order");
        got.sort();
        assert_eq!(got.len(), 3, "{label}: {got:?}");
        let cp = m.checkpoints();
        assert!(
            cp.values().any(|c| c.sequence_number.is_some()),
            "{label}: {cp:?}"
        );
    }
}
