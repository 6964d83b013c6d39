//! Chunked lock writes: up to [`TxConfig::lock_chunk`](crate::txn::TxConfig::lock_chunk)
//! items locked by one `TransactWriteItems` of [header check, each item's lock write].
//!
//! Each entry is exactly the item's own lock write ([`lock_entry`]), and the header check is
//! the same, so everything a lock write guarantees holds per item: invariant 5 per chunk (no
//! item of it lands once the attempt is decided) and the image guard per entry. DynamoDB
//! applies the chunk whole, so the chunk holds all of its items or none. Chunks are sent in the
//! global lock order, so live coordinators still never wait in a cycle. The cancellation
//! reasons drive the per-item handling (a foreign lock is met, a changed item is read again, an
//! unchanged unlocked item whose condition failed ends the attempt), then the chunk is sent
//! again (a conflict re-reads only the entries its reasons name, in one `BatchGetItem`); after
//! [`CHUNK_TRIES`] sends (waits on a live holder are not sends), or when DynamoDB refuses it as
//! a whole (4 MB), its items are locked one by one.
//!
//! Cost: the header check is paid once per chunk instead of once per item (2 write units per
//! chunk), and one round trip per chunk instead of per item.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::ReturnConsumedCapacity;

use super::write::{lock_entry, pending_check};
use super::{newer_attempt_of, own_lock, ItemLocking, LockPhase, LockWait, OwnLock, LOCK_WAIT};
use crate::ddb::error::{ErrorClass, StoreError};
use crate::ddb::item::Item;
use crate::txn::item::{lock_of, new_token, token_of};
use crate::txn::record::TxHeader;
use crate::txn::resolve::Resolved;
use crate::txn::{Coordinator, Cost};

/// Sends of one chunk before its items are locked one by one.
pub(super) const CHUNK_TRIES: usize = 8;

/// What one chunk write ended with.
#[derive(Debug)]
pub(super) enum ChunkWrite {
    /// Every item of the chunk locked.
    Done,
    /// The attempt is no longer pending.
    Decided,
    /// Items whose entry failed (their position in the chunk): a condition (`ALL_OLD`, when
    /// DynamoDB returned it), or an invalid request (its message).
    Failed(Vec<(usize, ItemFailure)>),
    /// A transaction conflict or a throttled item: the entries the reasons name (positions
    /// in the chunk; empty: none named, e.g. only the header) are read again, then retried.
    Conflict(Vec<usize>),
    /// Refused as a whole (too large): lock the items one by one.
    RefusedWhole,
}

/// Why one entry of a chunk failed.
#[derive(Debug)]
pub(super) enum ItemFailure {
    ConditionFailed(Option<Item>),
    Invalid(String),
}

fn codes(reasons: &[aws_sdk_dynamodb::types::CancellationReason]) -> Vec<&str> {
    reasons.iter().map(|r| r.code().unwrap_or("None")).collect()
}

/// Tell a chunk write's endings apart (entry 0 is the header check).
fn chunk_outcome(
    err: SdkError<TransactWriteItemsError, impl std::fmt::Debug>,
) -> Result<ChunkWrite, StoreError> {
    if let Some(TransactWriteItemsError::TransactionCanceledException(e)) = err.as_service_error() {
        let reasons = e.cancellation_reasons();
        let code = codes(reasons);
        if code.first() == Some(&"ConditionalCheckFailed") {
            return Ok(ChunkWrite::Decided);
        }
        let mut failed = Vec::new();
        for (i, (c, r)) in code.iter().zip(reasons).enumerate().skip(1) {
            match *c {
                "ConditionalCheckFailed" => {
                    failed.push((i - 1, ItemFailure::ConditionFailed(r.item().cloned())));
                }
                "ValidationError" => {
                    let message = r.message().unwrap_or_default().to_string();
                    failed.push((i - 1, ItemFailure::Invalid(message)));
                }
                _ => {}
            }
        }
        if !failed.is_empty() {
            return Ok(ChunkWrite::Failed(failed));
        }
        if code.iter().any(|c| crate::txn::sent_again(c)) {
            let named = (1..code.len())
                .filter(|&i| crate::txn::sent_again(code[i]))
                .map(|i| i - 1)
                .collect();
            return Ok(ChunkWrite::Conflict(named));
        }
        return Err(StoreError::Sdk {
            operation: "TransactWriteItems",
            class: ErrorClass::Transient,
            code: format!("TransactionCanceledException({})", code.join(", ")),
            message: e.message().unwrap_or_default().to_string(),
            source: None,
        });
    }
    let err = StoreError::from_sdk("TransactWriteItems", err);
    match err.class() {
        ErrorClass::InvalidRequest => Ok(ChunkWrite::RefusedWhole),
        _ => Err(err),
    }
}

impl Coordinator {
    /// Lock `items` (each with the item as read) in one call, only while `header`'s attempt
    /// is pending; every item gets `token`.
    pub(super) async fn chunk_write(
        &self,
        header: &TxHeader,
        items: &[(&Resolved, Option<&Item>)],
        token: &str,
        cost: &Cost,
    ) -> Result<ChunkWrite, StoreError> {
        let owner = header.owner();
        let mut entries = Vec::with_capacity(items.len() + 1);
        entries.push(pending_check(&self.config.table, header)?);
        for (r, current) in items {
            entries.push(lock_entry(&owner, r, *current, token)?);
        }
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(entries))
            .client_request_token(token)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => {
                cost.add_transactional(out.consumed_capacity(), items.len() + 1);
                Ok(ChunkWrite::Done)
            }
            Err(err) => {
                cost.add_failed();
                chunk_outcome(err)
            }
        }
    }
}

/// What one send of a chunk ended with.
enum Sent {
    /// Locking the chunk ends here.
    End(ChunkLock),
    /// A conflict (or a throttled item): wait, then send again.
    Conflict,
    /// An entry's item changed (read again): send again at once.
    Again,
}

/// What locking one chunk ended with.
#[derive(Debug)]
pub(super) enum ChunkLock {
    /// Every item held: (request index, token).
    Held(Vec<(usize, String)>),
    /// Locking stops here.
    Stopped(LockPhase),
    /// Lock the chunk's items one by one.
    OneByOne,
}

impl Coordinator {
    /// Step 2 for one chunk of items, read as `current` (updated as they are read again):
    /// send the chunk until it holds every item, or stop, or hand over to item-by-item after
    /// [`CHUNK_TRIES`] sends (a wait on a foreign lock before sending is not a send).
    pub(super) async fn lock_chunk(
        &self,
        lock: &mut ItemLocking<'_>,
        chunk: &[&Resolved],
        current: &mut [Option<Item>],
    ) -> Result<ChunkLock, StoreError> {
        let owner = lock.owner;
        let mut wait = LockWait::new();
        let mut pauses = LOCK_WAIT.delays();
        let mut sends = 0;
        loop {
            if lock.deadline.expired() {
                return Ok(ChunkLock::Stopped(LockPhase::Deferred));
            }
            if !self
                .heartbeat(lock.header, &mut lock.touched_ms, lock.cost)
                .await?
            {
                return Ok(ChunkLock::Stopped(LockPhase::Decided));
            }
            // A lock of this attempt for another request of it: the request is invalid.
            let own = |k: usize| current[k].as_ref().map(|i| own_lock(owner, chunk[k], i));
            if let Some((k, OwnLock::OtherRequest(why))) = (0..chunk.len())
                .filter_map(|k| own(k).map(|o| (k, o)))
                .find(|(_, o)| matches!(o, OwnLock::OtherRequest(_)))
            {
                let stop = LockPhase::Invalid(chunk[k].index, why);
                return Ok(ChunkLock::Stopped(stop));
            }
            // Another transaction's lock first: decided as one item's lock write meets it.
            let foreign = (0..chunk.len()).find(|&k| {
                current[k].as_ref().and_then(lock_of).is_some() && own(k) == Some(OwnLock::NotOurs)
            });
            if let Some(k) = foreign {
                if let Some(stop) = self
                    .meet_in_chunk(lock, chunk[k], &mut current[k], &mut wait)
                    .await?
                {
                    return Ok(ChunkLock::Stopped(stop));
                }
                continue;
            }
            if sends == CHUNK_TRIES {
                return Ok(ChunkLock::OneByOne);
            }
            sends += 1;
            match self.send_chunk(lock, chunk, current).await? {
                Sent::End(done) => return Ok(done),
                Sent::Conflict => {
                    tokio::time::sleep(pauses.next().unwrap_or(LOCK_WAIT.max)).await;
                }
                Sent::Again => {}
            }
        }
    }

    /// One send of the chunk's items not yet held. After a conflict the entries its reasons
    /// name (all, when they name none) are read again, in one `BatchGetItem`.
    async fn send_chunk(
        &self,
        lock: &ItemLocking<'_>,
        chunk: &[&Resolved],
        current: &mut [Option<Item>],
    ) -> Result<Sent, StoreError> {
        let owner = lock.owner;
        let ours = |k: &usize| {
            current[*k]
                .as_ref()
                .is_some_and(|i| own_lock(owner, chunk[*k], i) == OwnLock::Ours)
        };
        let mut held: Vec<(usize, String)> = (0..chunk.len())
            .filter(ours)
            .map(|k| {
                let token = current[k].as_ref().and_then(token_of).unwrap_or_default();
                (chunk[k].index, token.to_string())
            })
            .collect();
        let pending: Vec<usize> = (0..chunk.len()).filter(|k| !ours(k)).collect();
        if pending.is_empty() {
            return Ok(Sent::End(ChunkLock::Held(held)));
        }
        let token = new_token();
        let items: Vec<(&Resolved, Option<&Item>)> = pending
            .iter()
            .map(|&k| (chunk[k], current[k].as_ref()))
            .collect();
        match self
            .chunk_write(lock.header, &items, &token, lock.cost)
            .await?
        {
            ChunkWrite::Done => {
                held.extend(pending.iter().map(|&k| (chunk[k].index, token.clone())));
                Ok(Sent::End(ChunkLock::Held(held)))
            }
            ChunkWrite::Decided => Ok(Sent::End(ChunkLock::Stopped(LockPhase::Decided))),
            ChunkWrite::RefusedWhole => Ok(Sent::End(ChunkLock::OneByOne)),
            ChunkWrite::Conflict(named) => {
                let again: Vec<usize> = match named.is_empty() {
                    true => pending,
                    false => named
                        .iter()
                        .filter_map(|&pos| pending.get(pos).copied())
                        .collect(),
                };
                self.read_again(chunk, current, &again).await?;
                Ok(Sent::Conflict)
            }
            ChunkWrite::Failed(failed) => {
                for (pos, failure) in failed {
                    let Some(&k) = pending.get(pos) else { continue };
                    let stop = self
                        .after_failed_entry(chunk[k], &mut current[k], failure)
                        .await?;
                    if let Some(stop) = stop {
                        return Ok(Sent::End(ChunkLock::Stopped(stop)));
                    }
                }
                Ok(Sent::Again)
            }
        }
    }

    /// Read the items at `positions` of the chunk again (one strongly consistent
    /// `BatchGetItem` per 100).
    async fn read_again(
        &self,
        chunk: &[&Resolved],
        current: &mut [Option<Item>],
        positions: &[usize],
    ) -> Result<(), StoreError> {
        let keys: Vec<(&str, &Item)> = positions
            .iter()
            .map(|&k| (chunk[k].request.table.as_str(), &chunk[k].key))
            .collect();
        let read = crate::ddb::batch::get_items(&self.client, &keys).await?;
        for (&k, item) in positions.iter().zip(read) {
            current[k] = item;
        }
        Ok(())
    }

    /// A foreign lock on `r`'s item in a chunk: met, then the item read again. `Some`: stop.
    async fn meet_in_chunk(
        &self,
        lock: &ItemLocking<'_>,
        r: &Resolved,
        current: &mut Option<Item>,
        wait: &mut LockWait,
    ) -> Result<Option<LockPhase>, StoreError> {
        let Some(item) = current.clone() else {
            return Ok(None);
        };
        if newer_attempt_of(lock.header, &item) {
            return Ok(Some(LockPhase::Decided));
        }
        self.meet_lock(r, &item, wait, lock.cost).await?;
        if !self.still_pending(lock.header).await? {
            return Ok(Some(LockPhase::Decided));
        }
        *current = self.get_item(r).await?;
        Ok(None)
    }

    /// One failed lock write (alone or in a chunk): `Some` ends the lock phase (the request's own condition
    /// failed on an unchanged, unlocked item, or the request is invalid); else the item as it
    /// is now, for the next send.
    pub(super) async fn after_failed_entry(
        &self,
        r: &Resolved,
        current: &mut Option<Item>,
        failure: ItemFailure,
    ) -> Result<Option<LockPhase>, StoreError> {
        match failure {
            ItemFailure::Invalid(message) if super::size::item_size_exceeded(&message) => {
                Ok(Some(LockPhase::TooLarge(r.index, message)))
            }
            ItemFailure::Invalid(message) => Ok(Some(LockPhase::Invalid(r.index, message))),
            ItemFailure::ConditionFailed(now) => {
                // No item in the reason: absent, or `ALL_OLD` left out; a read tells.
                let now = match now {
                    Some(item) => Some(item),
                    None => self.get_item(r).await?,
                };
                let locked = now.as_ref().and_then(lock_of).is_some();
                if !locked && now == *current {
                    return Ok(Some(LockPhase::ConditionFailed(r.index)));
                }
                *current = now;
                Ok(None)
            }
        }
    }
}
