//! The sweeper: finishes or rolls back transactions whose coordinator went away. Finished
//! records need nothing from it: they expire through TTL.
//!
//! # What it reads
//!
//! Only the TX table's sparse GSI `Sweep` (hash `SweepKey`, range `LastTouched`, keys only).
//! A header is in it exactly while its transaction is not completed, under one of
//! 16 keys `open#<shard>` (a hash of the `txId`: SHA-256, first four bytes, modulo 16,
//! stable across versions); completion removes `SweepKey` and sets the
//! header's TTL (`ExpiresAt` = completion + retention), so DynamoDB deletes it, at no write
//! cost, once the idempotency horizon has passed. Part items carry their own TTL.
//!
//! ```text
//! for each shard, concurrently: SweepKey = "open#<shard>" AND LastTouched <= now - stale_after
//! ```
//!
//! Key conditions only: a sweep costs 16 queries (one per shard) plus one per page of *stale*
//! transactions, whatever the number of finished ones (no scan, no filter, no deletes).
//!
//! # Index write cost
//!
//! A committed transaction makes 2 index writes (the entry at creation, its removal at
//! completion; decisions do not move `LastTouched`), spread over 16 partitions; a restart
//! or a heartbeat (a long lock phase, a resumed delivery) makes 2 more: about
//! 16 × 1,000 / 2 = 8,000 TX/s for the whole system.
//!
//! # What it does (per stale transaction, the coordinator's drive step, `txn/finish.rs`)
//!
//! * `pending` → `rolled_back` (reason `abandoned`, conditioned on the version it read), then
//!   undo every item and `→ completed`. A redelivered message restarts it as a new attempt.
//! * `committed` / `rolled_back` → finalize or undo every item, `→ completed`.
//!
//! A recorded request whose key the table refuses (a record of a version before the key-schema
//! check) holds no lock: it is skipped (WARN), and a pending record is rolled back as final
//! (`invalid_request`, naming that request) rather than `abandoned`, then completed. With a
//! [`KeepRetired`] ([`Sweeper::keeping_retired`]; the `tx-sweeper` function keeps them as dead
//! letters of the coordinator when `TX_DEAD_LETTER_TABLE` is set) such a rolled-back record is
//! kept (`invalid_key`, naming the request, with its requests) before it is completed; a keep
//! that fails is a sweep error and is tried again by the next run.
//!
//! Stale means: no creation, restart or heartbeat for `stale_after`. A coordinator writes a
//! heartbeat while it locks and when it resumes a delivery again (see
//! [`TxConfig::heartbeat_every`](crate::txn::TxConfig::heartbeat_every)), so a transaction
//! that needs several invocations is left alone as long as the gap between two deliveries
//! (the queue's visibility timeout, plus the function's timeout) is shorter than
//! `stale_after`: the template sets 900 s against 360 s + 60 s.
//!
//! # Safety alongside coordinators and another sweeper
//!
//! Every write is one of the protocol's conditional writes (header transitions on `Version`,
//! item writes on lock + token), so two sweepers, or a sweeper and a live coordinator, can
//! only duplicate work that is then refused by its condition. A live but slow coordinator
//! whose transaction is rolled back sees its commit refused and restarts the attempt.
//!
//! # Deadline
//!
//! It drives up to [`SweepConfig::concurrency`] transactions at once, starts none after the
//! deadline and stops cleanly; what is left stays in the index for the next run.

use crate::txn::format::{ATTR_LAST_TOUCHED, ATTR_SWEEP_KEY, ATTR_TX_ID, SWEEP_INDEX};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use futures::StreamExt;
use serde::Serialize;

use crate::batch::Deadline;
use crate::ddb::clock::epoch_millis;
use crate::ddb::error::StoreError;
use crate::ddb::item::Item;
use crate::ddb::Cost;
use crate::txn::record::sweep_keys;
use crate::txn::{Coordinator, Driven, TxConfig, TxError, TxStatus};

mod config;
mod retired;

pub use config::{check_stale_after, SweepConfig, SweepConfigBuilder};
pub use retired::{KeepRetired, Retired};

/// Index page size.
const PAGE_SIZE: i32 = 100;
/// Default of [`SweepConfig::max_due_per_shard`].
pub const MAX_DUE_PER_KEY: usize = 1000;
/// Key condition on the sweep index.
const KEY_CONDITION_DUE: &str = "#txpsk = :txpsk AND #txplt <= :txpcut";

/// What one sweep did (logged as JSON and returned by the function).
#[non_exhaustive]
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
    /// Found stale in the index, but resumed by a delivery before it was driven: left alone.
    pub alive: usize,
    /// Of `rolled_back`: records retired on a key the table refuses and kept as dead
    /// letters (see [`KeepRetired`]; EMF `Invalid`).
    pub dead_letters: usize,
    /// Transactions that failed (left for the next run).
    pub errors: usize,
    /// Whether the deadline stopped the sweep early.
    pub stopped_early: bool,
    /// Age of the oldest stale transaction found, ms since its last sign of life (0: none
    /// stale): the sweeper's lag.
    pub oldest_stale_ms: u64,
    /// Index queries made.
    pub index_queries: u64,
    /// Write requests made.
    pub write_calls: u64,
    /// Consumed write capacity units.
    pub write_units: f64,
}

/// The sweep failed as a whole (the index could not be read).
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// DynamoDB failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One index entry due for the sweeper.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Due {
    tx_id: String,
    last_touched_ms: u64,
}

/// What driving one stale transaction did.
enum Swept {
    /// The deadline came before it started.
    NotStarted,
    /// Started, and stopped by the deadline (its writes refused until then, or still in
    /// flight at the cut-off): the next sweep resumes it.
    Stopped,
    /// Driven (or failed).
    Driven(String, Result<Option<Driven>, TxError>),
}

/// The sweeper.
#[derive(Debug, Clone)]
pub struct Sweeper {
    coordinator: Coordinator,
    config: SweepConfig,
    keeper: Option<Arc<dyn KeepRetired>>,
}

impl Sweeper {
    /// A sweeper with the given settings (a built config is valid: its builder checked it).
    pub fn new(client: Client, config: SweepConfig) -> Self {
        let mut tx = TxConfig::defaults(config.table.clone(), Vec::<String>::new());
        tx.retain = config.retain;
        Sweeper {
            coordinator: Coordinator::new(client, tx),
            config,
            keeper: None,
        }
    }

    /// The same sweeper, handing every record it retires on a key the table refuses to
    /// `keeper` before completing it (see [`KeepRetired`]).
    pub fn keeping_retired(mut self, keeper: Arc<dyn KeepRetired>) -> Self {
        self.keeper = Some(keeper);
        self
    }

    /// The settings.
    pub fn config(&self) -> &SweepConfig {
        &self.config
    }

    /// One page of index entries with `SweepKey = key` touched at or before `cutoff_ms`.
    async fn due_page(
        &self,
        key: &str,
        cutoff_ms: u64,
        start: Option<Item>,
        oldest_first: bool,
    ) -> Result<(Vec<Due>, Option<Item>), StoreError> {
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
            .scan_index_forward(oldest_first)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("Query", e))?;
        let due = page
            .items
            .unwrap_or_default()
            .iter()
            .filter_map(|i| {
                let tx_id = i.get(ATTR_TX_ID)?.as_s().ok()?.clone();
                let touched = i.get(ATTR_LAST_TOUCHED)?.as_n().ok()?.parse().ok()?;
                Some(Due {
                    tx_id,
                    last_touched_ms: touched,
                })
            })
            .collect();
        Ok((due, page.last_evaluated_key))
    }

    /// The entries of `key` due at `cutoff_ms`, at most `max_due_per_shard` of them, and the
    /// number of queries made. When more are due, half are the oldest and half the newest:
    /// a backlog of entries that fail to drive (at the front, oldest first) cannot starve the
    /// transactions that went stale after them.
    async fn due(&self, key: &str, cutoff_ms: u64) -> Result<(Vec<Due>, u64), StoreError> {
        let max = self.config.max_due_per_shard.max(1);
        let (mut oldest, queries, more) =
            self.due_from(key, cutoff_ms, true, max.div_ceil(2)).await?;
        if !more || max < 2 {
            return Ok((oldest, queries));
        }
        let (newest, more_queries, _) = self.due_from(key, cutoff_ms, false, max / 2).await?;
        let seen: std::collections::BTreeSet<String> =
            oldest.iter().map(|d| d.tx_id.clone()).collect();
        oldest.extend(newest.into_iter().filter(|d| !seen.contains(&d.tx_id)));
        Ok((oldest, queries + more_queries))
    }

    /// Up to `max` due entries of `key` from one end; whether more remain.
    async fn due_from(
        &self,
        key: &str,
        cutoff_ms: u64,
        oldest_first: bool,
        max: usize,
    ) -> Result<(Vec<Due>, u64, bool), StoreError> {
        let (mut all, mut queries, mut start) = (Vec::new(), 0, None);
        loop {
            let (page, next) = self.due_page(key, cutoff_ms, start, oldest_first).await?;
            queries += 1;
            all.extend(page);
            start = next;
            if start.is_none() || all.len() >= max {
                let more = start.is_some() || all.len() > max;
                all.truncate(max);
                return Ok((all, queries, more));
            }
        }
    }

    /// The stale entries of every shard, read concurrently, and the number of queries made.
    async fn due_everywhere(&self, cutoff_ms: u64) -> Result<(Vec<Due>, u64), StoreError> {
        let keys = sweep_keys();
        let reads: Vec<_> = keys.iter().map(|k| self.due(k, cutoff_ms)).collect();
        let pages: Vec<Result<(Vec<Due>, u64), StoreError>> = futures::stream::iter(reads)
            .buffer_unordered(keys.len())
            .collect()
            .await;
        let (mut all, mut queries) = (Vec::new(), 0);
        for page in pages {
            let (due, made) = page?;
            queries += made;
            all.extend(due);
        }
        Ok((all, queries))
    }

    /// The transaction's state as its TX record holds it (`None`: no record, never seen or
    /// expired after its retention). One consistent read.
    pub async fn status(&self, tx_id: &str) -> Result<Option<TxStatus>, StoreError> {
        Ok(self.coordinator.tx.get(tx_id).await?.map(TxStatus::of))
    }

    /// Open (not completed) transactions without a sign of life for `quiet` or longer,
    /// oldest first: `(txId, LastTouched epoch ms)`, at most 1,000 per shard (what an
    /// operator looks at before the sweeper acts; `quiet = 0` lists every open one).
    pub async fn open_transactions(
        &self,
        quiet: Duration,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let cutoff = epoch_millis().saturating_sub(millis(quiet));
        let (mut due, _) = self.due_everywhere(cutoff).await?;
        due.sort_by_key(|d| d.last_touched_ms);
        Ok(due
            .into_iter()
            .map(|d| (d.tx_id, d.last_touched_ms))
            .collect())
    }

    /// One sweep of the stale transactions; stops at the deadline.
    pub async fn sweep(&self, deadline: Deadline) -> Result<SweepSummary, SweepError> {
        let cost = Cost::default();
        let mut summary = SweepSummary::default();
        let now = epoch_millis();
        let stale_cutoff = now.saturating_sub(millis(self.config.stale_after));
        let (due, queries) = self.due_everywhere(stale_cutoff).await?;
        summary.index_queries = queries;
        summary.oldest_stale_ms = due
            .iter()
            .map(|d| now.saturating_sub(d.last_touched_ms))
            .max()
            .unwrap_or(0);
        self.drive_all(due, deadline, &cost, &mut summary).await;
        summary.write_calls = cost.write_calls();
        summary.write_units = cost.write_units();
        log_summary(&summary);
        Ok(summary)
    }

    /// Drive every stale transaction to completion, [`SweepConfig::concurrency`] at once.
    async fn drive_all(
        &self,
        due: Vec<Due>,
        deadline: Deadline,
        cost: &Cost,
        summary: &mut SweepSummary,
    ) {
        let drives = due.into_iter().map(|d| async move {
            if deadline.expired() {
                return Swept::NotStarted;
            }
            // Stale at the query is not enough: a delivery may have resumed it since.
            let stale_before = epoch_millis().saturating_sub(millis(self.config.stale_after));
            let keeper = self.keeper.as_deref();
            let drive = (self.coordinator).drive_keeping(&d.tx_id, stale_before, cost, keeper);
            // Bounded by the invocation: its writes are sent again only until the deadline,
            // and a drive still in flight at the cut-off is abandoned (the next sweep resumes
            // it), so that the summary is always logged.
            let expired: crate::ddb::conflict::Expired =
                std::sync::Arc::new(move || deadline.expired());
            let drive = crate::ddb::conflict::under_deadline(expired, drive);
            match deadline.bound_part(drive).await {
                Some(Err(TxError::Store(e))) if deadline.expired() && e.is_retryable() => {
                    Swept::Stopped
                }
                Some(driven) => Swept::Driven(d.tx_id, driven.map(|o| o.map(|(_, driven)| driven))),
                None => Swept::Stopped,
            }
        });
        let results: Vec<Swept> = futures::stream::iter(drives)
            .buffer_unordered(self.config.concurrency.max(1))
            .collect()
            .await;
        for result in results {
            match result {
                Swept::NotStarted => summary.stopped_early = true,
                Swept::Stopped => {
                    summary.stale += 1;
                    summary.stopped_early = true;
                }
                Swept::Driven(tx_id, driven) => {
                    summary.stale += 1;
                    match driven {
                        Ok(Some(Driven::RolledBack)) => summary.rolled_back += 1,
                        Ok(Some(Driven::Retired)) => {
                            summary.rolled_back += 1;
                            summary.dead_letters += 1;
                        }
                        Ok(Some(Driven::Finished)) => summary.finished += 1,
                        Ok(Some(Driven::Alive)) => summary.alive += 1,
                        Ok(_) => summary.already_completed += 1,
                        Err(err) => {
                            summary.errors += 1;
                            log_error(&tx_id, &err);
                        }
                    }
                }
            }
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
        dead_letters = summary.dead_letters,
        errors = summary.errors,
        stopped_early = summary.stopped_early,
        oldest_stale_ms = summary.oldest_stale_ms,
        index_queries = summary.index_queries,
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
