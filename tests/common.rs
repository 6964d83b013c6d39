//! Helpers shared by the integration tests (included with `mod common;`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::__private::item_to_json;
use dynamodb_exactly_once::ratchet::{
    Ratchet, RatchetConfig, RatchetConfigBuilder, RatchetOutcome,
};
use dynamodb_exactly_once::Item;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::Writer;
use serde_json::{json, Map, Value};

/// A ratchet writer on fresh template tables, with the given client.
pub async fn ratchet_writer(client: Client) -> (Writer<Ratchet>, BTreeMap<String, String>) {
    let tables = dev_testing::template_tables(&client, &["RatchetTable", "DeadLetterTable"]).await;
    let writer = ratchet_writer_on(client, &tables);
    (writer, tables)
}

/// A ratchet writer on existing tables.
pub fn ratchet_writer_on(client: Client, tables: &BTreeMap<String, String>) -> Writer<Ratchet> {
    ratchet_writer_with(client, tables, |c| c)
}

/// A ratchet writer on existing tables, its configuration changed by `tweak`.
pub fn ratchet_writer_with(
    client: Client,
    tables: &BTreeMap<String, String>,
    tweak: impl FnOnce(RatchetConfigBuilder) -> RatchetConfigBuilder,
) -> Writer<Ratchet> {
    let config = tweak(RatchetConfig::builder(&tables["RatchetTable"]))
        .build()
        .expect("valid configuration");
    Writer::builder("ratchet-writer", Ratchet::new(client.clone(), config))
        .dead_letters(DeadLetters::new(
            client,
            &tables["DeadLetterTable"],
            "ratchet-writer",
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer")
}

/// A ratchet writer in history mode on existing tables (`RatchetHistoryTable`).
pub fn ratchet_history_writer(
    client: Client,
    tables: &BTreeMap<String, String>,
) -> Writer<Ratchet> {
    ratchet_writer_with(client, tables, |c| {
        c.history_table(&tables["RatchetHistoryTable"])
    })
}

#[allow(unused_imports)]
pub use dev_testing::events::sqs_batch;

/// Every raw item of a table (tombstones included), keyed by `PK|SK`.
pub async fn scan(client: &Client, table: &str) -> BTreeMap<String, Map<String, Value>> {
    scan_keyed(client, table, ["PK", "SK"]).await
}

/// Every raw item of a table (a consistent, paged scan), keyed by the two attributes' string
/// values joined with `|` (an absent one is empty).
pub async fn scan_keyed(
    client: &Client,
    table: &str,
    key: [&str; 2],
) -> BTreeMap<String, Map<String, Value>> {
    let mut out = BTreeMap::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("scan");
        for item in page.items.unwrap_or_default() {
            let json = item_to_json(item).expect("item json");
            let text = |name: &str| {
                json.get(name)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            out.insert(format!("{}|{}", text(key[0]), text(key[1])), json);
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            return out;
        }
    }
}

/// One raw item.
pub async fn raw_item(client: &Client, table: &str, key: Item) -> Option<Map<String, Value>> {
    client
        .get_item()
        .table_name(table)
        .set_key(Some(key))
        .consistent_read(true)
        .send()
        .await
        .expect("get")
        .item
        .map(|i| item_to_json(i).expect("json"))
}

/// Load a fixture from `events/`, as if its records reached the source now.
pub fn fixture(name: &str) -> Value {
    let path = dev_testing::workspace_root().join("events").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    dev_testing::events::arriving_now(serde_json::from_str(&text).expect("fixture is JSON"))
}

/// A ratchet put record body.
pub fn put(pk: &str, sk: &str, ts: i64, item: Value) -> Value {
    json!({"op":"put","key":{"PK":pk,"SK":sk},"ts":ts,"item":item})
}

/// A ratchet delete record body.
pub fn delete(pk: &str, sk: &str, ts: i64) -> Value {
    json!({"op":"delete","key":{"PK":pk,"SK":sk},"ts":ts})
}

/// Parse and write one ratchet record (no batch, no coalescing).
pub async fn write_one(writer: &Writer<Ratchet>, body: Value) -> RatchetOutcome {
    let record = writer
        .protocol()
        .parse_record(body.to_string().as_bytes())
        .expect("valid record");
    writer.protocol().write(&record).await.expect("write")
}

/// A new table whose partition key `key` is a number (named `<unique prefix><name>`).
pub async fn numeric_key_table(client: &Client, name: &str, key: &str) -> String {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let table = format!("{}{name}", dev_testing::unique_prefix());
    client
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key)
                .attribute_type(ScalarAttributeType::N)
                .build()
                .expect("definition"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key)
                .key_type(KeyType::Hash)
                .build()
                .expect("schema"),
        )
        .send()
        .await
        .expect("create table");
    table
}

/// A new table whose partition key `key` and optional sort key `sort` are strings (named
/// `<unique prefix><name>`).
pub async fn string_key_table(
    client: &Client,
    name: &str,
    key: &str,
    sort: Option<&str>,
) -> String {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let table = format!("{}{name}", dev_testing::unique_prefix());
    let attr = |n: &str| {
        AttributeDefinition::builder()
            .attribute_name(n)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .expect("definition")
    };
    let schema = |n: &str, t: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(n)
            .key_type(t)
            .build()
            .expect("schema")
    };
    let mut create = client
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr(key))
        .key_schema(schema(key, KeyType::Hash));
    if let Some(sort) = sort {
        create = create
            .attribute_definitions(attr(sort))
            .key_schema(schema(sort, KeyType::Range));
    }
    create.send().await.expect("create table");
    table
}

/// Run `w`'s handler on fixture `name`, whose malformed records sit among valid ones:
/// nothing is reported for retry, and every dead letter names its source record and keeps its
/// payload byte for byte. Returns the letters' reason codes, sorted, and the fixture's batch.
pub async fn dead_letter_codes_of_fixture<P: dynamodb_exactly_once::Protocol>(
    w: &Writer<P>,
    name: &str,
) -> (Vec<String>, dynamodb_exactly_once_lambda::Batch) {
    let event = fixture(name);
    let batch = dynamodb_exactly_once_lambda::Batch::from_event(event.clone()).expect("decodes");
    let context = lambda_runtime::Context::default();
    let response = w
        .handle(lambda_runtime::LambdaEvent::new(event, context))
        .await
        .expect("handler");
    assert!(
        response.failed_ids().is_empty(),
        "{name}: malformed records never block"
    );
    let letters = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("list dead letters");
    for letter in &letters {
        let record = batch
            .records
            .iter()
            .find(|r| r.position.id == letter.position.id)
            .expect("the dead letter names its source record");
        assert_eq!(
            letter.payload, record.body,
            "{name}: payload kept byte for byte"
        );
        assert_eq!(letter.position, record.position, "{name}");
        assert_eq!(letter.function, w.function(), "{name}");
        assert!(!letter.reason.message.is_empty(), "{name}");
    }
    let mut codes: Vec<String> = letters
        .iter()
        .map(|l| l.reason.code.as_str().to_string())
        .collect();
    codes.sort();
    (codes, batch)
}

/// Log lines captured in memory (a `MakeWriter` for a test's tracing subscriber).
#[derive(Clone, Default)]
pub struct LogCapture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogCapture {
    /// Everything written so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8(bytes).expect("utf-8 log lines")
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;
    fn make_writer(&'a self) -> LogCapture {
        self.clone()
    }
}

/// `w` over another protocol: the same name, dead-letter table, deadline margin, event time
/// and record mapping.
pub fn with_protocol<P, Q: dynamodb_exactly_once::Protocol>(
    w: &Writer<P>,
    protocol: Q,
) -> Writer<Q> {
    let mut builder = Writer::builder(w.function(), protocol).deadline_margin(w.deadline_margin());
    if let Some(table) = w.dead_letter_table() {
        builder = builder.dead_letters(table.clone());
    }
    if let Some(event_time) = w.event_time() {
        builder = builder.event_time(event_time.clone());
    }
    if let Some(mapping) = w.mapping() {
        builder = builder.mapping(mapping.clone());
    }
    builder.build().expect("valid writer")
}

/// Create table `name` (`pk` S, on demand) with a NEW_IMAGE stream; its stream ARN.
pub async fn stream_table(c: &Client, name: &str) -> String {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
        StreamSpecification, StreamViewType,
    };
    let created = c
        .create_table()
        .table_name(name)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("attribute"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .expect("key"),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewImage)
                .build()
                .expect("stream"),
        )
        .send()
        .await
        .expect("table");
    created
        .table_description()
        .and_then(|t| t.latest_stream_arn())
        .expect("stream arn")
        .to_string()
}
