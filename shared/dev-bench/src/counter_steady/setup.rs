//! What the designs share: metered clients, tables, and the regimes.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    StreamSpecification, StreamViewType,
};
use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::ItemKey;
use rand::{Rng, SeedableRng};

use super::meter::Meter;

/// The metered clients of one run.
#[derive(Clone)]
pub struct Env {
    pub ddb: Client,
    pub streams: aws_sdk_dynamodbstreams::Client,
    pub meter: Meter,
    pub prefix: String,
}

impl Env {
    pub fn new() -> Self {
        let meter = Meter::default();
        let endpoint = dev_testing::endpoint();
        let ddb = dev_testing::client_intercepted(&endpoint, meter.clone(), 3);
        use aws_sdk_dynamodbstreams::config::{BehaviorVersion, Credentials, Region};
        let config = aws_sdk_dynamodbstreams::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("local", "local", None, None, "bench"))
            .endpoint_url(endpoint)
            .interceptor(meter.clone())
            .build();
        Env {
            ddb,
            streams: aws_sdk_dynamodbstreams::Client::from_conf(config),
            meter,
            prefix: dev_testing::unique_prefix(),
        }
    }

    /// Create table `<prefix><name>` keyed on `keys` (hash, then range), with a stream of new
    /// images when `stream`.
    pub async fn table(&self, name: &str, keys: &[&str], stream: bool) -> Result<String, String> {
        let table = format!("{}{name}", self.prefix);
        let mut create = self
            .ddb
            .create_table()
            .table_name(&table)
            .billing_mode(BillingMode::PayPerRequest);
        for (i, key) in keys.iter().enumerate() {
            let kind = if i == 0 {
                KeyType::Hash
            } else {
                KeyType::Range
            };
            create = create
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(*key)
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .map_err(|e| e.to_string())?,
                )
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(*key)
                        .key_type(kind)
                        .build()
                        .map_err(|e| e.to_string())?,
                );
        }
        if stream {
            let spec = StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewImage)
                .build()
                .map_err(|e| e.to_string())?;
            create = create.stream_specification(spec);
        }
        create
            .send()
            .await
            .map_err(|e| format!("create {table}: {e:?}"))?;
        Ok(table)
    }
}

/// The counter item of customer `i`.
pub fn item_key(i: usize) -> ItemKey {
    ItemKey::partition("PK", format!("cust#{i:04}"))
        .and_then(|k| k.with_sort("SK", "day"))
        .expect("a valid key")
}

/// One record: the item (customer index) and its idempotency key.
pub type Event = (usize, String);

/// One regime: invocations of records, and when each arrives (seconds from its start).
#[derive(Debug, Clone)]
pub struct Regime {
    pub name: &'static str,
    pub what: &'static str,
    pub invocations: Vec<Vec<Event>>,
    pub offsets: Vec<f64>,
    /// The items the regime writes (its steady-state traffic is 1 key/s on each).
    pub items: Vec<usize>,
    /// A redelivery of regime (a): `Some(true)` to a warm process, `Some(false)` to a cold one.
    pub redelivery: Option<bool>,
}

impl Regime {
    pub fn events(&self) -> usize {
        self.invocations.iter().map(Vec::len).sum()
    }
}

/// Items of regime (a), (b), (c): customers 0..200, 200..220, 220..222.
pub const RANDOM_ITEMS: usize = 200;

/// The five regimes; `rate` is the declared new keys per second and item.
pub fn regimes(rate: f64) -> Vec<Regime> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(19);
    let random: Vec<Vec<Event>> = (0..200)
        .map(|i| vec![(rng.random_range(0..RANDOM_ITEMS), format!("a-{i}"))])
        .collect();
    let per_item = |first: usize, n: usize, size: usize, tag: &str| -> Vec<Vec<Event>> {
        (0..n)
            .map(|i| {
                (0..size)
                    .map(|j| (first + i, format!("{tag}-{i}-{j}")))
                    .collect()
            })
            .collect()
    };
    let spaced = |n: usize, size: usize, items: usize| -> Vec<f64> {
        (0..n)
            .map(|i| (i * size) as f64 / (items as f64 * rate))
            .collect()
    };
    let redelivered = |name, what, warm| Regime {
        name,
        what,
        invocations: random.clone(),
        offsets: spaced(200, 1, RANDOM_ITEMS),
        items: (0..RANDOM_ITEMS).collect(),
        redelivery: Some(warm),
    };
    vec![
        Regime {
            name: "a",
            what: "200 inv × 1 record, random items",
            invocations: random.clone(),
            offsets: spaced(200, 1, RANDOM_ITEMS),
            items: (0..RANDOM_ITEMS).collect(),
            redelivery: None,
        },
        Regime {
            name: "b",
            what: "20 inv × 10 records, one item each",
            invocations: per_item(200, 20, 10, "b"),
            offsets: spaced(20, 10, 20),
            items: (200..220).collect(),
            redelivery: None,
        },
        Regime {
            name: "c",
            what: "2 inv × 100 records, one item each",
            invocations: per_item(220, 2, 100, "c"),
            offsets: spaced(2, 100, 2),
            items: (220..222).collect(),
            redelivery: None,
        },
        redelivered("d", "(a) redelivered, cold process", false),
        redelivered("e", "(a) redelivered, warm process", true),
    ]
}

/// What one design did in one regime.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub design: &'static str,
    pub regime: &'static str,
    pub events: usize,
    /// The writer's own calls and units (the invocations).
    pub writer_wcu: u64,
    pub writer_calls: u64,
    pub writer_ops: String,
    pub seconds: f64,
    /// The roll-up's share per event (journal only): units, DynamoDB calls, stream calls.
    pub rollup: Option<RollupShare>,
    /// Outcome labels and their counts.
    pub outcomes: String,
}

/// The roll-up's cost per journaled key over the runs of a regime's schedule.
#[derive(Debug, Clone, Default)]
pub struct RollupShare {
    pub runs: usize,
    pub keys: usize,
    pub wcu_per_key: f64,
    pub calls_per_key: f64,
    pub stream_calls_per_key: f64,
    pub seconds: f64,
}

/// Outcome labels counted, `label×n` sorted.
pub fn count_labels<'a>(labels: impl IntoIterator<Item = &'a str>) -> String {
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for l in labels {
        *counts.entry(l).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(l, n)| format!("{l}×{n}")).collect();
    parts.join(" ")
}
