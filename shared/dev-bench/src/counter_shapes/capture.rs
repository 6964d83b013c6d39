//! Journal records made by the journal writer itself, without DynamoDB Local: a `Counter` whose
//! client takes the items of every `BatchExecuteStatement` (or `BatchWriteItem`) it is about to send and stops the call
//! there (an interceptor error, never sent, never retried). The items are exactly the
//! writer's (`pk`, `sk`, `k`, `add`, `ttl`, `at`); they become stream records
//! (`dynamodb.Keys` and `dynamodb.NewImage`, an `INSERT`) for `StreamsDouble::inject`.

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextMut;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::batch_execute_statement::BatchExecuteStatementInput;
use aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemInput;
use aws_sdk_dynamodb::types::AttributeValue;
use dynamodb_exactly_once::counter::journal::{
    statement_items, JOURNAL_KEY_ATTRIBUTE, JOURNAL_SORT_ATTRIBUTE,
};
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::{Clock, ItemKey};
use dynamodb_exactly_once::{Deadline, Item, Protocol};
use serde_json::{json, Map, Value};

/// Takes the put items of each `BatchWriteItem` and stops it.
#[derive(Debug, Clone, Default)]
struct Capture(Arc<Mutex<Vec<Item>>>);

impl Intercept for Capture {
    fn name(&self) -> &'static str {
        "JournalCapture"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input_mut();
        let items: Vec<Item> = match input.downcast_mut::<BatchExecuteStatementInput>() {
            Some(i) => statement_items(i.statements()),
            None => match input.downcast_mut::<BatchWriteItemInput>() {
                Some(i) => i
                    .request_items
                    .iter()
                    .flat_map(|m| m.values())
                    .flatten()
                    .filter_map(|r| r.put_request().map(|p| p.item().clone()))
                    .collect(),
                None => return Ok(()),
            },
        };
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(items);
        Err("captured: not sent".into())
    }
}

/// The writer whose puts are captured.
pub struct Writer {
    counter: Counter,
    captured: Arc<Mutex<Vec<Item>>>,
}

impl Writer {
    /// A journal writer of `config` (its key schema is read once from DynamoDB Local).
    pub fn new(config: CounterConfig, clock: Clock) -> Result<Writer, String> {
        let capture = Capture::default();
        let captured = Arc::clone(&capture.0);
        let client = dev_testing::client_intercepted(&dev_testing::endpoint(), capture, 1);
        let counter = Counter::new(client, config).with_clock(clock);
        Ok(Writer { counter, captured })
    }

    /// The stream records (`INSERT`s) the writer's puts of `events` (item, idempotency key;
    /// `n` + 1 each) would make.
    pub async fn records(&self, events: Vec<(ItemKey, String)>) -> Result<Vec<Value>, String> {
        let items = self.items(events).await?;
        items
            .iter()
            .map(|item| stream_record(item, "INSERT"))
            .collect()
    }

    /// The journal items the writer would put for `events`.
    pub async fn items(&self, events: Vec<(ItemKey, String)>) -> Result<Vec<Item>, String> {
        let events = events.into_iter().map(|(k, i)| (k, i, 1)).collect();
        self.items_adding(events).await
    }

    /// The journal items the writer would put for `events` (item, idempotency key, what the
    /// key adds to `n`).
    pub async fn items_adding(
        &self,
        events: Vec<(ItemKey, String, i64)>,
    ) -> Result<Vec<Item>, String> {
        let mut records = Vec::with_capacity(events.len());
        for (i, (key, idem, n)) in events.into_iter().enumerate() {
            let record = self
                .counter
                .record(key, [("n", n)], idem)
                .map_err(|e| format!("{e:?}"))?;
            records.push((i, record));
        }
        let _ = self.counter.apply(records, Deadline::none()).await;
        let items = std::mem::take(&mut *self.captured.lock().unwrap_or_else(|p| p.into_inner()));
        Ok(items)
    }
}

/// A journal item as the stream record of a put that made it (`INSERT`) or changed it
/// (`MODIFY`).
pub fn stream_record(item: &Item, event_name: &str) -> Result<Value, String> {
    let mut keys = Map::new();
    for name in [JOURNAL_KEY_ATTRIBUTE, JOURNAL_SORT_ATTRIBUTE] {
        let value = item.get(name).ok_or("a journal item without its key")?;
        keys.insert(name.to_string(), wire(value)?);
    }
    let mut image = Map::new();
    for (name, value) in item {
        image.insert(name.clone(), wire(value)?);
    }
    Ok(json!({
        "eventName": event_name,
        "dynamodb": { "Keys": keys, "NewImage": image },
    }))
}

/// An attribute value in DynamoDB's JSON wire form (the types journal items hold).
fn wire(value: &AttributeValue) -> Result<Value, String> {
    Ok(match value {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(_) => json!({ "NULL": true }),
        AttributeValue::M(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                out.insert(k.clone(), wire(v)?);
            }
            json!({ "M": out })
        }
        AttributeValue::L(l) => json!({ "L": l.iter().map(wire).collect::<Result<Vec<_>, _>>()? }),
        other => return Err(format!("a journal item holds {other:?}")),
    })
}
