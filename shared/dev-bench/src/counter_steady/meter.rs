//! The bench's meter: an SDK interceptor on every client of the steady-state benchmark that
//! counts calls by operation and bills each write attempt as AWS bills it.
//!
//! * Successful writes: it asks for `ReturnConsumedCapacity=TOTAL` when the caller did not,
//!   and adds what DynamoDB Local reports (which is `ceil(max(size before, size after) / 1 KB)`
//!   per item: [`super::check_local_billing`] verifies that on a ~150 KB item in each run).
//! * A failed condition: DynamoDB Local reports nothing; AWS bills the existing item's size,
//!   at least 1 unit. The meter takes the size from the `ALL_OLD` item of the error (every
//!   conditional write measured here asks for it); a failed condition without an item is
//!   billed 1 unit and counted in [`Tally::failed_without_item`].
//! * Each write is also logged per item (table, key, units, wall time) while logging is on:
//!   the hot-counter simulation reads the log.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
    FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::batch_execute_statement::{
    BatchExecuteStatementInput, BatchExecuteStatementOutput,
};
use aws_sdk_dynamodb::operation::batch_write_item::{BatchWriteItemInput, BatchWriteItemOutput};
use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemInput, PutItemOutput};
use aws_sdk_dynamodb::operation::update_item::{
    UpdateItemError, UpdateItemInput, UpdateItemOutput,
};
use aws_sdk_dynamodb::types::{AttributeValue, ConsumedCapacity, ReturnConsumedCapacity};
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use dynamodb_exactly_once::__private::item_size;
use dynamodb_exactly_once::Item;

use super::sim::SimClock;

/// One write attempt on one item.
#[derive(Debug, Clone)]
pub struct WriteLog {
    /// `<table>/<key>`.
    pub item: String,
    /// Units billed for this item.
    pub units: u64,
    /// The simulated time when the answer arrived (ms).
    pub sim_ms: u64,
}

/// Calls and billed units so far (or between two snapshots).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Attempts sent, by operation.
    pub calls: BTreeMap<String, u64>,
    /// Billed write units.
    pub wcu: u64,
    /// Failed conditions billed without the old item (1 unit each: a floor).
    pub failed_without_item: u64,
}

impl Tally {
    /// All calls.
    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    /// `self - earlier`.
    pub fn since(&self, earlier: &Tally) -> Tally {
        let calls = self
            .calls
            .iter()
            .map(|(op, n)| (op.clone(), n - earlier.calls.get(op).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        Tally {
            calls,
            wcu: self.wcu - earlier.wcu,
            failed_without_item: self.failed_without_item - earlier.failed_without_item,
        }
    }

    /// `op×n` for each operation.
    pub fn ops(&self) -> String {
        let ops: Vec<String> = self
            .calls
            .iter()
            .map(|(op, n)| format!("{op}×{n}"))
            .collect();
        ops.join(" ")
    }
}

#[derive(Default)]
struct Inner {
    tally: Mutex<Tally>,
    logging: AtomicBool,
    log: Mutex<Vec<WriteLog>>,
    /// Units DynamoDB Local reported for the last successful single-item write.
    last_reported: AtomicU64,
    /// The simulated clock the log is kept in.
    sim: Mutex<Option<SimClock>>,
}

/// The interceptor (cheap to clone: one shared state).
#[derive(Clone, Default)]
pub struct Meter(Arc<Inner>);

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter").finish()
    }
}

/// The items one write operation names (set before serialization, read after the attempt).
#[derive(Debug, Clone)]
struct Target {
    table: String,
    /// Key (or whole put item) of each item written.
    items: Vec<(String, Item)>,
    /// `items` are whole put items.
    whole: bool,
}
impl Storable for Target {
    type Storer = StoreReplace<Self>;
}

impl Meter {
    /// Calls and units so far.
    pub fn tally(&self) -> Tally {
        lock(&self.0.tally).clone()
    }

    /// Log every write per item, in `sim`'s time, from now on (and forget the earlier log).
    pub fn start_log(&self, sim: &SimClock) {
        *lock(&self.0.sim) = Some(sim.clone());
        lock(&self.0.log).clear();
        self.0.logging.store(true, Ordering::SeqCst);
    }

    /// Stop logging; the writes logged.
    pub fn take_log(&self) -> Vec<WriteLog> {
        self.0.logging.store(false, Ordering::SeqCst);
        std::mem::take(&mut *lock(&self.0.log))
    }

    /// Units DynamoDB Local reported for the last successful `UpdateItem`/`PutItem`.
    pub fn last_reported(&self) -> u64 {
        self.0.last_reported.load(Ordering::SeqCst)
    }

    fn bill(&self, target: Option<&Target>, units: u64, failed_without_item: bool) {
        {
            let mut tally = lock(&self.0.tally);
            tally.wcu += units;
            tally.failed_without_item += u64::from(failed_without_item);
        }
        if !self.0.logging.load(Ordering::SeqCst) {
            return;
        }
        let Some(target) = target else { return };
        let sim_ms = lock(&self.0.sim).as_ref().map_or(0, SimClock::now_ms);
        let mut log = lock(&self.0.log);
        for (key, item) in &target.items {
            // A put's units are its own item's; an update's are the call's.
            let units = match target.whole {
                true => units_of(item_size(item)),
                false => units,
            };
            log.push(WriteLog {
                item: format!("{}/{key}", target.table),
                units,
                sim_ms,
            });
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Units AWS bills for a write of an item of `bytes`: `ceil(bytes / 1 KB)`, at least 1.
pub fn units_of(bytes: usize) -> u64 {
    bytes.div_ceil(1024).max(1) as u64
}

/// A key as text, attributes sorted (a log key).
fn key_text(key: &Item) -> String {
    let mut parts: Vec<String> = key
        .iter()
        .map(|(name, value)| match value {
            AttributeValue::S(s) => format!("{name}={s}"),
            other => format!("{name}={other:?}"),
        })
        .collect();
    parts.sort();
    parts.join(",")
}

fn reported(consumed: Option<&ConsumedCapacity>) -> u64 {
    let units = consumed.and_then(|c| c.capacity_units).unwrap_or(0.0);
    units.ceil() as u64
}

impl Intercept for Meter {
    fn name(&self) -> &'static str {
        "SteadyStateMeter"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input_mut();
        let target = if let Some(i) = input.downcast_mut::<UpdateItemInput>() {
            i.return_consumed_capacity
                .get_or_insert(ReturnConsumedCapacity::Total);
            let key = i.key.clone().unwrap_or_default();
            Some(Target {
                table: i.table_name.clone().unwrap_or_default(),
                items: vec![(key_text(&key), key)],
                whole: false,
            })
        } else if let Some(i) = input.downcast_mut::<PutItemInput>() {
            i.return_consumed_capacity
                .get_or_insert(ReturnConsumedCapacity::Total);
            let item = i.item.clone().unwrap_or_default();
            Some(Target {
                table: i.table_name.clone().unwrap_or_default(),
                items: vec![(key_text(&put_key(&item)), item)],
                whole: true,
            })
        } else if let Some(i) = input.downcast_mut::<BatchWriteItemInput>() {
            i.return_consumed_capacity
                .get_or_insert(ReturnConsumedCapacity::Total);
            batch_target(i)
        } else if let Some(i) = input.downcast_mut::<BatchExecuteStatementInput>() {
            statements_target(i)
        } else {
            None
        };
        if let Some(target) = target {
            cfg.interceptor_state().store_put(target);
        }
        Ok(())
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = context
            .request()
            .headers()
            .get("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or("Unknown")
            .to_string();
        *lock(&self.0.tally).calls.entry(op).or_default() += 1;
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = cfg.load::<Target>();
        match context.output_or_error() {
            Some(Ok(output)) => {
                let units = if let Some(o) = output.downcast_ref::<UpdateItemOutput>() {
                    reported(o.consumed_capacity())
                } else if let Some(o) = output.downcast_ref::<PutItemOutput>() {
                    reported(o.consumed_capacity())
                } else if let Some(o) = output.downcast_ref::<BatchWriteItemOutput>() {
                    o.consumed_capacity()
                        .iter()
                        .map(|c| reported(Some(c)))
                        .sum()
                } else if output
                    .downcast_ref::<BatchExecuteStatementOutput>()
                    .is_some()
                {
                    // The journal writer's INSERTs: DynamoDB Local reports no capacity for
                    // PartiQL; AWS bills each by its item (a refused one, a key journaled
                    // already, like a failed conditional put: the same item's size).
                    let items = target.map(|t| t.items.as_slice()).unwrap_or_default();
                    items
                        .iter()
                        .map(|(_, item)| units_of(item_size(item)))
                        .sum()
                } else {
                    return Ok(());
                };
                self.0.last_reported.store(units, Ordering::SeqCst);
                self.bill(target, units, false);
            }
            Some(Err(err)) => {
                let Some(op) = err.as_operation_error() else {
                    return Ok(());
                };
                let old = if let Some(e) = op.downcast_ref::<UpdateItemError>() {
                    match e {
                        UpdateItemError::ConditionalCheckFailedException(c) => Some(c.item()),
                        _ => None,
                    }
                } else if let Some(e) = op.downcast_ref::<PutItemError>() {
                    match e {
                        PutItemError::ConditionalCheckFailedException(c) => Some(c.item()),
                        _ => None,
                    }
                } else {
                    None
                };
                if let Some(old) = old {
                    let units = old.map_or(1, |item| units_of(item_size(item)));
                    self.bill(target, units, old.is_none());
                }
            }
            None => {}
        }
        Ok(())
    }
}

/// The key of a put item: the attributes the bench's tables key on.
fn put_key(item: &Item) -> Item {
    ["PK", "SK", "pk", "sk", "id"]
        .iter()
        .filter_map(|name| item.get(*name).map(|v| (name.to_string(), v.clone())))
        .collect::<HashMap<_, _>>()
}

fn statements_target(input: &BatchExecuteStatementInput) -> Option<Target> {
    let statement = input.statements().first()?.statement();
    let table = statement.split('"').nth(1)?.to_string();
    let items = dynamodb_exactly_once::__private::statement_items(input.statements())
        .into_iter()
        .map(|item| (key_text(&put_key(&item)), item))
        .collect();
    Some(Target {
        table,
        items,
        whole: true,
    })
}

fn batch_target(input: &BatchWriteItemInput) -> Option<Target> {
    let (table, requests) = input.request_items.as_ref()?.iter().next()?;
    let items = requests
        .iter()
        .filter_map(|r| r.put_request().map(|p| p.item().clone()))
        .map(|item| (key_text(&put_key(&item)), item))
        .collect();
    Some(Target {
        table: table.clone(),
        items,
        whole: true,
    })
}
