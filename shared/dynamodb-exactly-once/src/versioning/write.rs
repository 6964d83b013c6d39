//! Applying a change: one `TransactWriteItems` (latest + history), its cancellation reasons
//! decided while the typed error is in hand, and the landed check after a lost response.

use crate::versioning::format::{ATTR_DELETED, ATTR_VERSION, HISTORY_VERSION};
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::{
    TransactWriteItemsError, TransactWriteItemsOutput,
};
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConsumedCapacity, Put, ReturnConsumedCapacity,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use serde_json::{Map, Value};

use super::read::Latest;
use super::revision::{Revision, RevisionOp};
use super::{
    Versioning, CONDITION_ABSENT, CONDITION_AT, CONDITION_DELETED_AT, CONDITION_LIVE_AT,
    CONDITION_NEW_VERSION,
};
use crate::batch::Outcome;
use crate::ddb::retry::Backoff;
use crate::ddb::{Cost, ErrorClass, Placeholders, StoreError};

/// Waits after a `TransactionConflict` / `TransactionInProgress` before trying again.
const CONTENTION_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(5), Duration::from_millis(200), 10);
/// The code of a failed condition in `CancellationReasons`.
const REASON_CONDITION: &str = "ConditionalCheckFailed";

/// The outcome of a change.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionOutcome {
    /// Applied: the item (latest and history) is now at `version`.
    Written {
        /// The version this change wrote.
        version: u64,
    },
    /// The item is not at the expected version (`current`: `None` when it was never created;
    /// for a create: the existing item's version). Nothing was written.
    Conflict {
        /// The version found.
        current: Option<u64>,
    },
    /// The item is deleted (a tombstone at `version`): recreate or restore it
    /// ([`Revision::recreate`](super::Revision::recreate)); the outcome of a create, update or
    /// delete that found it deleted.
    Deleted {
        /// The tombstone's version.
        version: u64,
    },
    /// A restore named a version that is not in the history, or a delete (nothing to restore).
    NoSuchVersion {
        /// The version asked for.
        version: u64,
    },
}

impl VersionOutcome {
    /// The HTTP status an API would answer: 200, 412 Precondition Failed on a conflict (an API
    /// without `If-Match` may prefer 409), 410 Gone for a deleted item, 404 for a version that
    /// is not in the history.
    pub fn http_status(&self) -> u16 {
        match self {
            VersionOutcome::Written { .. } => 200,
            VersionOutcome::Conflict { .. } => 412,
            VersionOutcome::Deleted { .. } => 410,
            VersionOutcome::NoSuchVersion { .. } => 404,
        }
    }
}

/// The outcome of [`Counter::read_modify_write`](crate::counter::Counter::read_modify_write).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an outcome such as a conflict or a stale record is not an error: handle it"]
pub enum RmwOutcome {
    /// Written after `attempts` tries.
    Written {
        /// The new version.
        version: u64,
        /// Tries used (1 = no conflict).
        attempts: usize,
    },
    /// Every try lost a race.
    GaveUp {
        /// Tries used.
        attempts: usize,
    },
}

impl Outcome for VersionOutcome {
    fn label(&self) -> &'static str {
        match self {
            VersionOutcome::Written { .. } => "written",
            VersionOutcome::Conflict { .. } => "conflict",
            VersionOutcome::Deleted { .. } => "deleted",
            VersionOutcome::NoSuchVersion { .. } => "no_such_version",
        }
    }
}

/// What the latest item must be for a change to apply.
#[derive(Debug, Clone, Copy)]
enum Guard {
    /// Never created: version 1.
    Absent,
    /// Live at this version.
    Live(u64),
    /// Deleted at this version.
    Deleted(u64),
    /// Live or deleted at this version.
    At(u64),
}

impl Guard {
    fn new_version(self) -> u64 {
        match self {
            Guard::Absent => 1,
            Guard::Live(v) | Guard::Deleted(v) | Guard::At(v) => v.saturating_add(1),
        }
    }

    /// The condition on the latest item, with its placeholders.
    fn condition(self, p: &mut Placeholders) -> &'static str {
        p.set_name("#ver", ATTR_VERSION);
        let (condition, expected) = match self {
            Guard::Absent => return CONDITION_ABSENT,
            Guard::Live(v) => (CONDITION_LIVE_AT, v),
            Guard::Deleted(v) => {
                p.set_value(":true", AttributeValue::Bool(true));
                (CONDITION_DELETED_AT, v)
            }
            Guard::At(v) => return at(p, CONDITION_AT, v),
        };
        p.set_name("#del", ATTR_DELETED);
        at(p, condition, expected)
    }
}

fn at(p: &mut Placeholders, condition: &'static str, expected: u64) -> &'static str {
    p.set_value(":expected", AttributeValue::N(expected.to_string()));
    condition
}

/// What one transaction did.
#[derive(Debug)]
enum Sent {
    /// Applied.
    Done,
    /// The latest item's guard failed; the item as it was.
    Refused(Latest),
    /// Maybe applied by an earlier request with the same token: check the history row.
    Unknown,
    /// Cancelled by a concurrent transaction: try again.
    Contended,
}

/// The result of one attempt at writing a version.
#[derive(Debug)]
enum Attempt {
    /// This change is now `version`.
    Written(u64),
    /// Not written; the latest item as it was.
    Refused(Latest),
}

impl Versioning {
    /// Apply a change: one transaction writing the latest item and the history row.
    pub async fn apply(&self, change: &Revision) -> Result<VersionOutcome, StoreError> {
        self.apply_counted(change, &Cost::default()).await
    }

    /// [`Versioning::apply`], counting write requests and consumed write units in `cost`.
    pub async fn apply_counted(
        &self,
        change: &Revision,
        cost: &Cost,
    ) -> Result<VersionOutcome, StoreError> {
        let schema = crate::ddb::schema::key_schema(&self.client, &self.config.table).await?;
        schema.check(change.key()).map_err(StoreError::InvalidKey)?;
        let attempt = match change.op() {
            RevisionOp::Create { deleted_at, item } => {
                let guard = deleted_at.map_or(Guard::Absent, Guard::Deleted);
                self.attempt(change, guard, Some(item), cost).await?
            }
            RevisionOp::Update { expected, item } => {
                self.attempt(change, Guard::Live(*expected), Some(item), cost)
                    .await?
            }
            RevisionOp::Delete { expected } => {
                self.attempt(change, Guard::Live(*expected), None, cost)
                    .await?
            }
            RevisionOp::Restore { expected, from } => {
                let restored = self.get_version(change.key(), *from).await?;
                let Some(item) = restored.and_then(|entry| entry.item) else {
                    return Ok(VersionOutcome::NoSuchVersion { version: *from });
                };
                self.attempt(change, Guard::At(*expected), Some(&item), cost)
                    .await?
            }
        };
        Ok(match attempt {
            Attempt::Written(version) => VersionOutcome::Written { version },
            Attempt::Refused(Latest::Absent) => VersionOutcome::Conflict { current: None },
            Attempt::Refused(Latest::Deleted { version })
                if !matches!(change.op(), RevisionOp::Restore { .. }) =>
            {
                VersionOutcome::Deleted { version }
            }
            Attempt::Refused(latest) => VersionOutcome::Conflict {
                current: latest.version(),
            },
        })
    }

    /// Write version `guard.new_version()` (`item`: `None` for a tombstone); when refused with
    /// the version already there, find out whether it is this change's own earlier write.
    async fn attempt(
        &self,
        change: &Revision,
        guard: Guard,
        item: Option<&Map<String, Value>>,
        cost: &Cost,
    ) -> Result<Attempt, StoreError> {
        let version = guard.new_version();
        let items = self.transaction(change, guard, version, item)?;
        let hash = change.content_hash(item);
        let tables = (
            self.config.table.as_str(),
            self.config.history_table.as_str(),
        );
        let mut delays = CONTENTION_BACKOFF.delays();
        let mut try_number = 0;
        let refused = loop {
            let token = change.request_token(tables, version, &hash, try_number);
            match self.send(items.clone(), token, cost).await? {
                Sent::Done => return Ok(Attempt::Written(version)),
                Sent::Refused(latest) => break Some(latest),
                Sent::Unknown => break None,
                Sent::Contended => {
                    try_number += 1;
                    let Some(delay) = delays.next() else {
                        return Err(contention(change, try_number));
                    };
                    tokio::time::sleep(delay).await;
                }
            }
        };
        // Refused with the version at or past ours: maybe our own earlier request landed.
        let moved_past = refused
            .as_ref()
            .is_none_or(|l| l.version().is_some_and(|v| v >= version));
        if moved_past && self.landed(change, version).await? {
            return Ok(Attempt::Written(version));
        }
        match refused {
            Some(latest) => Ok(Attempt::Refused(latest)),
            None => Err(unknown(change, version)),
        }
    }

    /// Whether history row `version` of the change's key holds this change's write id.
    async fn landed(&self, change: &Revision, version: u64) -> Result<bool, StoreError> {
        let row = self.get_version(change.key(), version).await?;
        Ok(row.is_some_and(|r| r.write_id == change.write_id()))
    }

    /// The two conditional puts of a change writing `version`.
    fn transaction(
        &self,
        change: &Revision,
        guard: Guard,
        version: u64,
        item: Option<&Map<String, Value>>,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let mut p = Placeholders::new("v");
        let condition = guard.condition(&mut p);
        let (names, values) = p.into_maps();
        let latest = Put::builder()
            .table_name(&self.config.table)
            .set_item(Some(change.latest_item(version, item)?))
            .condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(construction)?;
        let history = Put::builder()
            .table_name(&self.config.history_table)
            .set_item(Some(change.history_row(version, item)?))
            .condition_expression(CONDITION_NEW_VERSION)
            .expression_attribute_names("#hv", HISTORY_VERSION)
            .build()
            .map_err(construction)?;
        Ok(vec![
            TransactWriteItem::builder().put(latest).build(),
            TransactWriteItem::builder().put(history).build(),
        ])
    }

    /// Send one transaction and decide its result.
    async fn send(
        &self,
        items: Vec<TransactWriteItem>,
        token: String,
        cost: &Cost,
    ) -> Result<Sent, StoreError> {
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(token)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match &result {
            Ok(out) => cost.add(Some(&total_capacity(out))),
            Err(_) => cost.add_failed(),
        }
        decide(result)
    }
}

/// The sum of the capacity a transaction consumed in every table.
fn total_capacity(out: &TransactWriteItemsOutput) -> ConsumedCapacity {
    let units: f64 = out
        .consumed_capacity()
        .iter()
        .filter_map(|c| c.capacity_units)
        .sum();
    ConsumedCapacity::builder().capacity_units(units).build()
}

/// A transaction's result, decided while the typed error is in hand.
fn decide<R: std::fmt::Debug>(
    result: Result<TransactWriteItemsOutput, SdkError<TransactWriteItemsError, R>>,
) -> Result<Sent, StoreError> {
    let err = match result {
        Ok(_) => return Ok(Sent::Done),
        Err(err) => err,
    };
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(e)) => {
            cancelled(e.cancellation_reasons())
        }
        Some(TransactWriteItemsError::TransactionInProgressException(_)) => Ok(Sent::Contended),
        Some(TransactWriteItemsError::IdempotentParameterMismatchException(_)) => Ok(Sent::Unknown),
        _ => Err(StoreError::from_sdk("TransactWriteItems", err)),
    }
}

/// Decide a cancelled transaction from its reasons (item 0: latest, item 1: history).
fn cancelled(reasons: &[CancellationReason]) -> Result<Sent, StoreError> {
    let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
    if reasons
        .iter()
        .any(|r| r.code() == Some("TransactionConflict"))
    {
        return Ok(Sent::Contended);
    }
    if code(0) == REASON_CONDITION {
        let old = reasons.first().and_then(|r| r.item().cloned());
        return Latest::from_item(old).map(Sent::Refused);
    }
    if code(1) == REASON_CONDITION {
        return Err(StoreError::Inconsistent(
            "a history row exists for a version the latest table never reached".into(),
        ));
    }
    let codes: Vec<&str> = (0..reasons.len()).map(code).collect();
    let class = if codes
        .iter()
        .any(|c| c.contains("Throughput") || *c == "ThrottlingError")
    {
        ErrorClass::Transient
    } else if codes.contains(&"ValidationError") {
        ErrorClass::InvalidRequest
    } else {
        ErrorClass::Fatal
    };
    Err(StoreError::Sdk {
        operation: "TransactWriteItems",
        class,
        code: "TransactionCanceledException".into(),
        message: format!("cancellation reasons {codes:?}"),
        source: None,
    })
}

fn construction(err: impl std::fmt::Display) -> StoreError {
    StoreError::Sdk {
        operation: "TransactWriteItems",
        class: ErrorClass::Fatal,
        code: "ConstructionFailure".into(),
        message: err.to_string(),
        source: None,
    }
}

fn contention(change: &Revision, attempts: usize) -> StoreError {
    StoreError::Contention {
        what: format!("versioned write of {}", change.key().canonical()),
        attempts,
    }
}

fn unknown(change: &Revision, version: u64) -> StoreError {
    StoreError::Sdk {
        operation: "TransactWriteItems",
        class: ErrorClass::Transient,
        code: "IdempotentParameterMismatchException".into(),
        message: format!(
            "request token of {} version {version} reused with other content, and the version is not this change's",
            change.key().canonical()
        ),
        source: None,
    }
}
