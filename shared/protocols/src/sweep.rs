//! The sweeper: finishes or rolls back transactions whose coordinator went away, and deletes
//! finished TX records after the retention period.
//!
//! # What it reads
//!
//! Only the TX table's sparse GSI `Sweep` (hash `SweepKey`, range `LastTouched`), which holds
//! nothing but TX headers (item and part items never carry `SweepKey`):
//!
//! ```text
//! SweepKey = "open" AND LastTouched <= now - stale_after   → stale, not completed
//! SweepKey = "done" AND LastTouched <= now - retain        → completed, retention over
//! ```
//!
//! Both are key conditions, so the cost grows with the number of transactions to act on, never
//! with the table (no scan, no filter).
//!
//! # What it does (per stale transaction, see [`crate::txn::Coordinator::drive`])
//!
//! * `pending` → `rolled_back` (reason `abandoned`, conditioned on the version it read), then
//!   undo every item and `→ completed`. A redelivered message restarts it as a new attempt.
//! * `committed` / `rolled_back` → finalize or undo every item, `→ completed`.
//! * `completed` after the retention → delete the header (conditioned on `completed` and its
//!   version), then its parts.
//!
//! # Safety alongside coordinators and another sweeper
//!
//! Every write is one of the protocol's conditional writes (header transitions on `Version`,
//! item writes on lock + token), so two sweepers, or a sweeper and a live coordinator, can
//! only duplicate work that is then refused by its condition. A live but slow coordinator
//! whose transaction is rolled back sees its commit refused and restarts the attempt: choose
//! `stale_after` longer than the coordinator's timeout.
//!
//! # Deadline
//!
//! It checks the deadline before each transaction and stops cleanly; what is left stays in the
//! index for the next run.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use serde::Serialize;

use crate::batch::Deadline;
use crate::ddb::clock::epoch_millis;
use crate::ddb::error::StoreError;
use crate::ddb::item::Item;
use crate::ddb::Cost;
use crate::txn::record::{
    ATTR_LAST_TOUCHED, ATTR_SWEEP_KEY, ATTR_TX_ID, SWEEP_DONE, SWEEP_INDEX, SWEEP_OPEN,
};
use crate::txn::{Coordinator, Driven, TxConfig, TxError};

/// Default stale threshold (longer than the coordinator's 60 s timeout).
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(300);
/// Default retention of completed TX records (the idempotency horizon: 15 days, above SQS's
/// 14-day maximum retention; see [`crate::txn::DEFAULT_RETAIN`]).
pub const DEFAULT_RETAIN: Duration = crate::txn::DEFAULT_RETAIN;
/// Default time kept in reserve before the invocation deadline.
pub const DEFAULT_SWEEP_MARGIN: Duration = Duration::from_millis(3000);
/// Index page size.
const PAGE_SIZE: i32 = 100;
/// Key condition on the sweep index.
const KEY_CONDITION_DUE: &str = "#txpsk = :txpsk AND #txplt <= :txpcut";

/// Settings of the sweeper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepConfig {
    /// The TX table.
    pub table: String,
    /// A transaction untouched this long is stale.
    pub stale_after: Duration,
    /// Completed records are deleted this long after completion.
    pub retain: Duration,
    /// Stop this long before the invocation deadline.
    pub deadline_margin: Duration,
}

impl SweepConfig {
    /// Defaults for `table`.
    pub fn new(table: impl Into<String>) -> Self {
        SweepConfig {
            table: table.into(),
            stale_after: DEFAULT_STALE_AFTER,
            retain: DEFAULT_RETAIN,
            deadline_margin: DEFAULT_SWEEP_MARGIN,
        }
    }
}

/// What one sweep did (logged as JSON and returned by the function).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SweepSummary {
    /// Stale transactions found in the index.
    pub stale: usize,
    /// Rolled back (pending ones) or rollback completed.
    pub rolled_back: usize,
    /// Commits completed.
    pub finished: usize,
    /// Found already completed by someone else.
    pub already_completed: usize,
    /// Completed records deleted after the retention.
    pub deleted: usize,
    /// Transactions that failed (left for the next run).
    pub errors: usize,
    /// Whether the deadline stopped the sweep early.
    pub stopped_early: bool,
    /// Write requests made.
    pub write_calls: u64,
    /// Consumed write capacity units.
    pub write_units: f64,
}

/// The sweep failed as a whole (the index could not be read).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// DynamoDB failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The sweeper.
#[derive(Debug, Clone)]
pub struct Sweeper {
    coordinator: Coordinator,
    config: SweepConfig,
}

impl Sweeper {
    /// A sweeper with the given settings.
    pub fn new(client: Client, config: SweepConfig) -> Self {
        let coordinator = Coordinator::new(
            client,
            TxConfig::new(config.table.clone(), Vec::<String>::new()),
        );
        Sweeper {
            coordinator,
            config,
        }
    }

    /// The settings.
    pub fn config(&self) -> &SweepConfig {
        &self.config
    }

    /// Ids of index entries with `SweepKey = key` touched at or before `cutoff_ms`.
    async fn due(
        &self,
        key: &str,
        cutoff_ms: u64,
        start: Option<Item>,
    ) -> Result<(Vec<String>, Option<Item>), StoreError> {
        let page = self
            .coordinator
            .client()
            .query()
            .table_name(&self.config.table)
            .index_name(SWEEP_INDEX)
            .key_condition_expression(KEY_CONDITION_DUE)
            .expression_attribute_names("#txpsk", ATTR_SWEEP_KEY)
            .expression_attribute_names("#txplt", ATTR_LAST_TOUCHED)
            .expression_attribute_values(":txpsk", AttributeValue::S(key.into()))
            .expression_attribute_values(":txpcut", AttributeValue::N(cutoff_ms.to_string()))
            .limit(PAGE_SIZE)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("Query", e))?;
        let ids = page
            .items
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| i.get(ATTR_TX_ID).and_then(|v| v.as_s().ok()).cloned())
            .collect();
        Ok((ids, page.last_evaluated_key))
    }

    /// One sweep: stale transactions first, then expired records; stops at the deadline.
    pub async fn sweep(&self, deadline: Deadline) -> Result<SweepSummary, SweepError> {
        let cost = Cost::default();
        let mut summary = SweepSummary::default();
        let now = epoch_millis();
        let stale_cutoff = now.saturating_sub(millis(self.config.stale_after));
        self.sweep_stale(stale_cutoff, deadline, &cost, &mut summary)
            .await?;
        if !summary.stopped_early {
            let retain_cutoff = now.saturating_sub(millis(self.config.retain));
            self.sweep_retained(retain_cutoff, deadline, &cost, &mut summary)
                .await?;
        }
        summary.write_calls = cost.write_calls();
        summary.write_units = cost.write_units();
        log_summary(&summary);
        Ok(summary)
    }

    /// Drive every transaction untouched since `cutoff_ms` that is not completed.
    async fn sweep_stale(
        &self,
        cutoff_ms: u64,
        deadline: Deadline,
        cost: &Cost,
        summary: &mut SweepSummary,
    ) -> Result<(), StoreError> {
        let mut start = None;
        loop {
            let (ids, next) = self.due(SWEEP_OPEN, cutoff_ms, start).await?;
            for tx_id in ids {
                if deadline.expired() {
                    summary.stopped_early = true;
                    return Ok(());
                }
                summary.stale += 1;
                match self.coordinator.drive(&tx_id, cost).await {
                    Ok(Some((_, Driven::RolledBack))) => summary.rolled_back += 1,
                    Ok(Some((_, Driven::Finished))) => summary.finished += 1,
                    Ok(_) => summary.already_completed += 1,
                    Err(err) => {
                        summary.errors += 1;
                        log_error(&tx_id, &err);
                    }
                }
            }
            start = next;
            if start.is_none() {
                return Ok(());
            }
        }
    }

    /// Delete every record completed before `cutoff_ms`.
    async fn sweep_retained(
        &self,
        cutoff_ms: u64,
        deadline: Deadline,
        cost: &Cost,
        summary: &mut SweepSummary,
    ) -> Result<(), StoreError> {
        let mut start = None;
        loop {
            let (ids, next) = self.due(SWEEP_DONE, cutoff_ms, start).await?;
            for tx_id in ids {
                if deadline.expired() {
                    summary.stopped_early = true;
                    return Ok(());
                }
                match self.delete_completed(&tx_id, cost).await {
                    Ok(true) => summary.deleted += 1,
                    Ok(false) => {}
                    Err(err) => {
                        summary.errors += 1;
                        log_error(&tx_id, &TxError::Store(err));
                    }
                }
            }
            start = next;
            if start.is_none() {
                return Ok(());
            }
        }
    }

    /// Delete one completed record (`false`: gone, or not completed at the version read).
    async fn delete_completed(&self, tx_id: &str, cost: &Cost) -> Result<bool, StoreError> {
        let tx = self.coordinator.tx_table();
        match tx.get(tx_id).await? {
            Some(h) => tx.delete_completed(&h, cost).await,
            None => Ok(false),
        }
    }
}

fn log_summary(summary: &SweepSummary) {
    tracing::info!(
        function = "tx-sweeper",
        stale = summary.stale,
        rolled_back = summary.rolled_back,
        finished = summary.finished,
        already_completed = summary.already_completed,
        deleted = summary.deleted,
        errors = summary.errors,
        stopped_early = summary.stopped_early,
        write_calls = summary.write_calls,
        summary = %serde_json::to_string(summary).unwrap_or_default(),
        "sweep summary"
    );
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn log_error(tx_id: &str, err: &TxError) {
    tracing::warn!(tx_id, error = %err, "sweep of a transaction failed; left for the next run");
}
