//! A small SDK interceptor billing successful writes as DynamoDB Local reports them (it asks
//! `ReturnConsumedCapacity=TOTAL` when the caller did not), by table: the journal writer's puts,
//! and the roll-up's counter updates apart from its checkpoints and dead letters. Failed
//! conditions report nothing here (the roll-up's own `write_units` bills them). The same
//! interceptor ([`Tap`]) can mirror the journal table's puts into the double's stream.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextMut, FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::batch_execute_statement::{
    BatchExecuteStatementInput, BatchExecuteStatementOutput,
};
use aws_sdk_dynamodb::operation::batch_write_item::{BatchWriteItemInput, BatchWriteItemOutput};
use aws_sdk_dynamodb::operation::put_item::{PutItemInput, PutItemOutput};
use aws_sdk_dynamodb::operation::update_item::{UpdateItemInput, UpdateItemOutput};
use aws_sdk_dynamodb::types::{AttributeValue, ConsumedCapacity, ReturnConsumedCapacity};
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use dynamodb_exactly_once::Item;

/// Units and calls by table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bill {
    /// Table → (write calls that succeeded, units reported).
    pub tables: BTreeMap<String, (u64, f64)>,
}

impl Bill {
    /// Units billed on `table`.
    pub fn units(&self, table: &str) -> f64 {
        self.tables.get(table).map_or(0.0, |(_, u)| *u)
    }

    /// `self - earlier`.
    pub fn since(&self, earlier: &Bill) -> Bill {
        let tables = self
            .tables
            .iter()
            .map(|(t, (c, u))| {
                let (c0, u0) = earlier.tables.get(t).copied().unwrap_or((0, 0.0));
                (t.clone(), (c - c0, u - u0))
            })
            .collect();
        Bill { tables }
    }
}

/// The interceptor (clones share one bill).
#[derive(Debug, Clone, Default)]
pub struct Meter(Arc<Mutex<Bill>>);

impl Meter {
    /// The bill so far.
    pub fn bill(&self) -> Bill {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn add(&self, table: &str, units: f64) {
        let mut bill = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let entry = bill.tables.entry(table.to_string()).or_default();
        entry.0 += 1;
        entry.1 += units;
    }
}

fn units(consumed: &[ConsumedCapacity]) -> f64 {
    consumed.iter().filter_map(|c| c.capacity_units).sum()
}

fn one(consumed: Option<&ConsumedCapacity>) -> f64 {
    consumed.and_then(|c| c.capacity_units).unwrap_or(0.0)
}

/// A write's output, downcast.
type Outputs<'a> = (
    Option<&'a UpdateItemOutput>,
    Option<&'a PutItemOutput>,
    Option<&'a BatchWriteItemOutput>,
    Option<&'a BatchExecuteStatementOutput>,
);

impl Meter {
    /// Bill a successful write's reported units to its table.
    fn record(&self, output: Outputs<'_>) {
        let table_of =
            |c: Option<&ConsumedCapacity>| c.and_then(|c| c.table_name.clone()).unwrap_or_default();
        if let Some(o) = output.0 {
            self.add(&table_of(o.consumed_capacity()), one(o.consumed_capacity()));
        } else if let Some(o) = output.1 {
            self.add(&table_of(o.consumed_capacity()), one(o.consumed_capacity()));
        } else if let Some(o) = output.2 {
            let consumed = o.consumed_capacity();
            self.add(&table_of(consumed.first()), units(consumed));
        } else if let Some(o) = output.3 {
            // The journal writer's INSERTs (items under 1 KB): DynamoDB Local reports no
            // capacity for PartiQL; AWS bills each INSERT 1 unit, and a refused one (a key
            // journaled already) like a failed conditional put, 1 unit.
            let responses = o.responses();
            let table = responses.first().and_then(|r| r.table_name());
            self.add(table.unwrap_or_default(), responses.len() as f64);
        }
    }
}

/// What the journal's stream gets from the writes of one client, mirrored into the double's
/// synthetic stream of the journal: each successful put into the journal table is an `INSERT`
/// (a new key) or a `MODIFY` (an item put again with other content; none when unchanged), as
/// DynamoDB's stream records it, timed at the double's clock when the write lands.
#[derive(Debug, Clone)]
pub struct Mirror {
    pub double: dev_testing::StreamsDouble,
    pub arn: String,
    pub table: String,
    /// (pk, sk) → hash of the last image.
    pub seen: Arc<Mutex<std::collections::HashMap<(String, String), u64>>>,
}

impl Mirror {
    /// Mirror `items`, put into the journal table now.
    pub fn put(&self, items: &[Item]) -> Result<(), String> {
        let records = self.records(items)?;
        self.double.inject(&self.arn, records)
    }

    fn records(&self, items: &[Item]) -> Result<Vec<serde_json::Value>, String> {
        use std::hash::{Hash, Hasher};
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for item in items {
            let text = |name: &str| match item.get(name) {
                Some(AttributeValue::S(s)) => s.clone(),
                _ => String::new(),
            };
            let key = (text("pk"), text("sk"));
            let insert = super::capture::stream_record(item, "INSERT")?;
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            insert["dynamodb"]["NewImage"].to_string().hash(&mut hasher);
            let hash = hasher.finish();
            match seen.insert(key, hash) {
                None => out.push(insert),
                Some(old) if old != hash => {
                    out.push(super::capture::stream_record(item, "MODIFY")?)
                }
                Some(_) => {}
            }
        }
        Ok(out)
    }
}

/// The journal-table puts of one call, kept from the request to its answer.
#[derive(Debug, Clone)]
struct Puts(Vec<Item>);

impl Storable for Puts {
    type Storer = StoreReplace<Self>;
}

/// The meter, and optionally the mirror of the journal's stream.
#[derive(Debug, Clone)]
pub struct Tap {
    pub meter: Meter,
    pub mirror: Option<Mirror>,
}

impl Tap {
    fn puts(
        &self,
        batch: Option<&BatchWriteItemInput>,
        put: Option<&PutItemInput>,
        statements: Option<&BatchExecuteStatementInput>,
    ) -> Option<Puts> {
        let mirror = self.mirror.as_ref()?;
        if let Some(i) = statements {
            let table = format!("\"{}\"", mirror.table);
            let ours = i
                .statements()
                .iter()
                .all(|s| s.statement().contains(&table));
            let items = dynamodb_exactly_once::counter::journal::statement_items(i.statements());
            return ours.then_some(Puts(items));
        }
        if let Some(i) = batch {
            let requests = i.request_items.as_ref()?.get(&mirror.table)?;
            let items = requests
                .iter()
                .filter_map(|r| r.put_request().map(|p| p.item().clone()));
            return Some(Puts(items.collect()));
        }
        let i = put?;
        (i.table_name.as_deref() == Some(mirror.table.as_str()))
            .then(|| Puts(vec![i.item.clone().unwrap_or_default()]))
    }
}

impl Intercept for Tap {
    fn name(&self) -> &'static str {
        "CounterShapesTap"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input_mut();
        let total = ReturnConsumedCapacity::Total;
        if let Some(i) = input.downcast_mut::<UpdateItemInput>() {
            i.return_consumed_capacity.get_or_insert(total);
        } else if let Some(i) = input.downcast_mut::<PutItemInput>() {
            i.return_consumed_capacity.get_or_insert(total);
        } else if let Some(i) = input.downcast_mut::<BatchWriteItemInput>() {
            i.return_consumed_capacity.get_or_insert(total);
        } else if let Some(i) = input.downcast_mut::<BatchExecuteStatementInput>() {
            i.return_consumed_capacity.get_or_insert(total);
        }
        let input = context.input();
        let puts = self.puts(
            input.downcast_ref(),
            input.downcast_ref(),
            input.downcast_ref(),
        );
        if let Some(puts) = puts {
            cfg.interceptor_state().store_put(puts);
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(Ok(output)) = context.output_or_error() else {
            return Ok(());
        };
        self.meter.record((
            output.downcast_ref(),
            output.downcast_ref(),
            output.downcast_ref(),
            output.downcast_ref(),
        ));
        // The journal writer's INSERTs: only those DynamoDB did not refuse make a record.
        let inserted: Option<Vec<bool>> = output
            .downcast_ref::<BatchExecuteStatementOutput>()
            .map(|o| o.responses().iter().map(|r| r.error().is_none()).collect());
        let unprocessed = output
            .downcast_ref::<BatchWriteItemOutput>()
            .and_then(|o| o.unprocessed_items.as_ref())
            .is_some_and(|u| u.values().any(|v| !v.is_empty()));
        if let (Some(mirror), Some(Puts(items))) = (&self.mirror, cfg.load::<Puts>()) {
            if unprocessed {
                return Err("the mirror does not follow unprocessed items".into());
            }
            match &inserted {
                Some(ok) => {
                    let made: Vec<Item> = items
                        .iter()
                        .zip(ok)
                        .filter(|(_, ok)| **ok)
                        .map(|(item, _)| item.clone())
                        .collect();
                    mirror.put(&made)?;
                }
                None => mirror.put(items)?,
            }
        }
        Ok(())
    }
}
