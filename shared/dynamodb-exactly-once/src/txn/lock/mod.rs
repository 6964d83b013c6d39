//! Step 2 of a transaction: every item locked, its image saved and its request applied in
//! one conditional write ([`write`](mod@write)), one item at a time in the global lock order;
//! and what a coordinator does when it meets another transaction's lock (module docs,
//! "Contention").

mod chunk;
mod own;
mod size;
mod write;

use chunk::{ChunkLock, ItemFailure};
use own::{own_lock, OwnLock};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::item::{lock_of, new_token, token_of};
use super::record::{parse_owner, RollbackReason, TxHeader, TxState};
use super::resolve::Resolved;
use super::{Coordinator, Cost};
use crate::batch::Deadline;
use crate::ddb::error::StoreError;
use crate::ddb::item::{item_size, Item};
use crate::ddb::retry::Backoff;

/// Waits on a pending transaction's lock: 5 ms doubling up to 100 ms, each jittered up to
/// twice that; as many as it takes, [`TxConfig::lock_patience`](super::TxConfig) bounds the
/// time waited before the holder is rolled back.
const LOCK_WAIT: Backoff = Backoff::new(
    Duration::from_millis(5),
    Duration::from_millis(100),
    usize::MAX,
);

/// What the lock phase ended with.
#[derive(Debug)]
pub(super) enum LockPhase {
    /// Every item locked: request index → the token of its lock write.
    Locked(BTreeMap<usize, String>),
    /// The transaction was decided by someone else meanwhile: stop locking.
    Decided,
    /// Request `.0`'s own condition failed on an unchanged, unlocked item.
    ConditionFailed(usize),
    /// DynamoDB rejected request `.0` as invalid (its message).
    Invalid(usize, String),
    /// Request `.0`'s item and the image its lock write saves cannot fit one item (why).
    TooLarge(usize, String),
    /// The deadline came first.
    Deferred,
}

/// What locking one item ended with.
#[derive(Debug)]
enum ItemLock {
    /// This attempt holds the item, with this token.
    Held(String),
    /// Locking stops here.
    Stopped(LockPhase),
}

/// What one lock write ended with.
#[derive(Debug)]
enum LockWrite {
    Done,
    /// The attempt is no longer pending: the write was refused by the header check.
    Decided,
    /// The item's condition failed; the item as it was (`ALL_OLD`).
    ConditionFailed(Option<Item>),
    /// Another write to the header or the item was in progress, or the item was throttled:
    /// read again and retry.
    Conflict,
    /// DynamoDB rejected the request as invalid.
    Invalid(String),
}

/// What the lock phase of one attempt carries from item to item.
struct ItemLocking<'a> {
    header: &'a TxHeader,
    owner: &'a str,
    cost: &'a Cost,
    deadline: Deadline,
    /// The attempt's last heartbeat (or creation, or restart), epoch ms.
    touched_ms: u64,
}

/// The wait on one item's lock holder.
pub(super) struct LockWait {
    /// Waited since the holder was met (or last rolled back).
    waited: Duration,
    delays: Box<dyn Iterator<Item = Duration> + Send>,
    /// The holder's sign of life as last read (owner, `LastTouched`) and when this
    /// coordinator first read that value, on its own monotonic clock.
    seen: Option<(String, u64, Instant)>,
}

impl LockWait {
    pub(super) fn new() -> Self {
        LockWait {
            waited: Duration::ZERO,
            delays: Box::new(LOCK_WAIT.delays()),
            seen: None,
        }
    }

    /// How long `holder`'s `LastTouched` has been seen unchanged, on this host's monotonic
    /// clock: silence is never measured across hosts' clocks (a holder whose clock runs ahead
    /// would never look silent; one whose clock runs behind would look silent too soon).
    fn silent_for(&mut self, holder: &TxHeader) -> Duration {
        let owner = holder.owner();
        match &self.seen {
            Some((o, touched, since)) if *o == owner && *touched == holder.last_touched_ms => {
                since.elapsed()
            }
            _ => {
                self.seen = Some((owner, holder.last_touched_ms, Instant::now()));
                Duration::ZERO
            }
        }
    }
}

/// Most estimated bytes of one chunk (each entry's image, the item and its request's values):
/// under DynamoDB's 4 MB per `TransactWriteItems`, as the fast path keeps 3 MB of requests.
const CHUNK_MAX_BYTES: usize = 3_500_000;

/// The chunks of `order` (items as `current`): at most `size` items and about
/// [`CHUNK_MAX_BYTES`] each, at least one item.
fn chunk_ranges(
    order: &[&Resolved],
    current: &[Option<Item>],
    size: usize,
) -> Vec<std::ops::Range<usize>> {
    let json_len = |v: &serde_json::Map<String, serde_json::Value>| {
        serde_json::to_string(v).map_or(0, |t| t.len())
    };
    let estimate = |k: usize| {
        let item = current.get(k).and_then(Option::as_ref).map_or(0, item_size);
        let request = &order[k].request;
        2 * item + json_len(request.op.attributes()) + json_len(&request.values)
    };
    let mut ranges = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for k in 0..order.len() {
        let b = estimate(k);
        if k > start && (k - start == size || bytes + b > CHUNK_MAX_BYTES) {
            ranges.push(start..k);
            (start, bytes) = (k, 0);
        }
        bytes += b;
    }
    if start < order.len() {
        ranges.push(start..order.len());
    }
    ranges
}

/// The index of a request naming the same item as the one before it in the lock order: two
/// requests of one attempt on one item, which the attempt must refuse before locking (the
/// second would adopt the first's lock as its own, `own_lock` telling only kinds apart).
/// `resolve` refuses such messages already, and recorded ones are only finished, never
/// locked: this completes the defence at no cost.
fn same_item_twice(order: &[&Resolved]) -> Option<usize> {
    order
        .windows(2)
        .find(|pair| pair[0].order == pair[1].order)
        .map(|pair| pair[1].index)
}

/// The requests in the global lock order (table, canonical key).
fn lock_order(resolved: &[Resolved]) -> Vec<&Resolved> {
    let mut order: Vec<&Resolved> = resolved.iter().collect();
    order.sort_by(|a, b| a.order.cmp(&b.order));
    order
}

/// Whether `item` is locked by a later attempt of `header`'s own transaction (then this
/// attempt was decided and restarted: a stale coordinator must not wait on, or roll back, its
/// own transaction's newer attempt).
fn newer_attempt_of(header: &TxHeader, item: &Item) -> bool {
    lock_of(item)
        .and_then(parse_owner)
        .is_some_and(|(tx, attempt)| tx == header.tx_id && attempt > header.attempt)
}

impl Coordinator {
    /// Every item as it is now, in the global lock order: strongly consistent
    /// `BatchGetItem`s of 100 keys, all sent at once (one round trip), or with
    /// [`TxConfig::read_ahead`](super::TxConfig::read_ahead) off one `GetItem` per item.
    pub(super) async fn read_in_lock_order(
        &self,
        resolved: &[Resolved],
    ) -> Result<Vec<Option<Item>>, StoreError> {
        let order = lock_order(resolved);
        if !self.config.read_ahead {
            let reads: Vec<_> = order.iter().map(|r| self.get_item(r)).collect();
            let reads: Vec<Result<Option<Item>, StoreError>> = futures::stream::iter(reads)
                .buffered(self.config.concurrency)
                .collect()
                .await;
            return reads.into_iter().collect();
        }
        let keys: Vec<(&str, &Item)> = order
            .iter()
            .map(|r| (r.request.table.as_str(), &r.key))
            .collect();
        crate::ddb::batch::get_items(&self.client, &keys).await
    }

    /// Step 2 for every item, in the global lock order, starting from `prefetched` (the
    /// items as [`Coordinator::read_in_lock_order`] read them, possibly before the record was
    /// created: every lock write is conditioned on the item as read, so a stale read only
    /// costs a retry) or from a read now.
    pub(super) async fn lock_all(
        &self,
        header: &TxHeader,
        resolved: &[Resolved],
        prefetched: Option<Vec<Option<Item>>>,
        cost: &Cost,
        deadline: Deadline,
    ) -> Result<LockPhase, StoreError> {
        let owner = header.owner();
        let order = lock_order(resolved);
        if let Some(i) = same_item_twice(&order) {
            let why = format!("request {i} names an item another request of it names");
            return Ok(LockPhase::Invalid(i, why));
        }
        let mut current = match prefetched {
            Some(read) if read.len() == order.len() => read,
            _ => self.read_in_lock_order(resolved).await?,
        };
        // Decided from the reads before anything is locked: an item too large to carry its
        // image never ends the attempt half-locked. Sized as committed, so that a resumed
        // attempt, or one meeting another lock, decides as the first delivery did.
        for (r, item) in order.iter().zip(&current) {
            if let Some(why) = size::too_large_to_lock(&owner, r, item.as_ref()) {
                return Ok(LockPhase::TooLarge(r.index, why));
            }
        }
        let mut lock = ItemLocking {
            header,
            owner: &owner,
            cost,
            deadline,
            touched_ms: header.last_touched_ms,
        };
        let mut tokens = BTreeMap::new();
        let size = self.config.lock_chunk.clamp(1, super::FAST_MAX_REQUESTS);
        for range in chunk_ranges(&order, &current, size) {
            let (chunk, current) = (&order[range.clone()], &mut current[range]);
            if size > 1 {
                match self.lock_chunk(&mut lock, chunk, current).await? {
                    ChunkLock::Held(held) => {
                        tokens.extend(held);
                        continue;
                    }
                    ChunkLock::Stopped(phase) => return Ok(phase),
                    ChunkLock::OneByOne => {}
                }
            }
            for (r, read) in chunk.iter().zip(current.iter_mut()) {
                match self.lock_item(&mut lock, r, read.take()).await? {
                    ItemLock::Held(token) => {
                        tokens.insert(r.index, token);
                    }
                    ItemLock::Stopped(phase) => return Ok(phase),
                }
            }
        }
        Ok(LockPhase::Locked(tokens))
    }

    /// Step 2 for one item, read as `current`: write until this attempt holds it, or stop.
    async fn lock_item(
        &self,
        lock: &mut ItemLocking<'_>,
        r: &Resolved,
        mut current: Option<Item>,
    ) -> Result<ItemLock, StoreError> {
        let (header, owner, cost) = (lock.header, lock.owner, lock.cost);
        let mut wait = LockWait::new();
        loop {
            if lock.deadline.expired() {
                return Ok(ItemLock::Stopped(LockPhase::Deferred));
            }
            if !self.heartbeat(header, &mut lock.touched_ms, cost).await? {
                return Ok(ItemLock::Stopped(LockPhase::Decided));
            }
            if let Some(item) = current.as_ref().filter(|i| lock_of(i).is_some()) {
                match own_lock(owner, r, item) {
                    OwnLock::Ours => {
                        let token = token_of(item).unwrap_or_default();
                        return Ok(ItemLock::Held(token.to_string()));
                    }
                    OwnLock::OtherRequest(why) => {
                        return Ok(ItemLock::Stopped(LockPhase::Invalid(r.index, why)));
                    }
                    OwnLock::NotOurs => {}
                }
                if newer_attempt_of(header, item) {
                    // Our own transaction restarted: this attempt is over.
                    return Ok(ItemLock::Stopped(LockPhase::Decided));
                }
                self.meet_lock(r, item, &mut wait, cost).await?;
                if !self.still_pending(header).await? {
                    return Ok(ItemLock::Stopped(LockPhase::Decided));
                }
                current = self.get_item(r).await?;
                continue;
            }
            let token = new_token();
            match self
                .lock_write(header, r, current.as_ref(), &token, cost)
                .await?
            {
                LockWrite::Done => return Ok(ItemLock::Held(token)),
                LockWrite::Decided => return Ok(ItemLock::Stopped(LockPhase::Decided)),
                LockWrite::ConditionFailed(now) => {
                    // Final only on an unchanged, unlocked item; else the item as it is now
                    // (writing again is safe: the next write checks the header too).
                    let failure = ItemFailure::ConditionFailed(now);
                    if let Some(stop) = self.after_failed_entry(r, &mut current, failure).await? {
                        return Ok(ItemLock::Stopped(stop));
                    }
                }
                LockWrite::Conflict => {
                    let pause = wait.delays.next().unwrap_or(LOCK_WAIT.max);
                    tokio::time::sleep(pause).await;
                    current = self.get_item(r).await?;
                }
                LockWrite::Invalid(message) => {
                    let failure = ItemFailure::Invalid(message);
                    if let Some(stop) = self.after_failed_entry(r, &mut current, failure).await? {
                        return Ok(ItemLock::Stopped(stop));
                    }
                }
            }
        }
    }

    /// Another transaction's lock is on `item`: decide it (see the module docs).
    pub(super) async fn meet_lock(
        &self,
        r: &Resolved,
        item: &Item,
        wait: &mut LockWait,
        cost: &Cost,
    ) -> Result<(), StoreError> {
        let lock = lock_of(item).unwrap_or_default();
        let Some((other_id, other_attempt)) = parse_owner(lock) else {
            return Err(StoreError::Inconsistent(format!(
                "unreadable lock {lock:?}"
            )));
        };
        // Its state only: a pending holder is read again at every wait step, and a large
        // transaction's commit tokens make its header up to 350 KB.
        let Some(other) = self.tx.get_state(other_id).await? else {
            // Within one deployment a lock always has its record (it is created first and
            // outlives every delivery of the message). A lock without one belongs to another
            // TX table over the same items (blue/green, staging beside production, a retained
            // old table), or its record was deleted by hand: undoing it could drop a committed
            // change. Never undo; fail the run (retried later), and say why.
            tracing::warn!(
                lock,
                tx_table = self.config.table.as_str(),
                "an item is locked by a transaction whose record is not in this TX table"
            );
            return Err(StoreError::Contention {
                what: format!(
                    "item locked by {lock:?}, whose TX record is not in {}: a transaction of \
                     another TX table over the same items, or a record deleted by hand; it is \
                     never undone",
                    self.config.table
                ),
                attempts: 1,
            });
        };
        if other_attempt < other.attempt {
            return self.undo_item(r, item, cost).await;
        }
        // By the decision, not the state: a completed transaction's lock is finalized when its
        // commit recorded this token (the change is the committed one), undone otherwise.
        match (other.state, other.decision()) {
            (TxState::Pending, _) => self.wait_or_roll_back(&other, wait, cost).await,
            (_, Some(TxState::Committed)) => {
                // The tokens, once: read the whole header.
                let tokens = match self.tx.get(other_id).await? {
                    Some(full) => full.tokens,
                    None => other.tokens.clone(),
                };
                let token = token_of(item).unwrap_or_default();
                if tokens.values().any(|t| t == token) {
                    self.finalize_item(r, item, cost).await
                } else {
                    self.undo_item(r, item, cost).await
                }
            }
            _ => self.undo_item(r, item, cost).await,
        }
    }

    /// A pending holder: wait (jittered backoff), or roll it back (`conflict`) once the wait
    /// reached the patience *and* the holder showed no sign of life (heartbeat) for as long,
    /// as seen from here ([`LockWait::silent_for`]; a live coordinator that is still locking
    /// is not rolled back).
    async fn wait_or_roll_back(
        &self,
        other: &TxHeader,
        wait: &mut LockWait,
        cost: &Cost,
    ) -> Result<(), StoreError> {
        let patience = self.config.lock_patience;
        let silent = wait.silent_for(other);
        if wait.waited >= patience && silent >= patience {
            tracing::debug!(
                tx_id = other.tx_id.as_str(),
                "rolling back a transaction holding a lock"
            );
            // Either we decide it or someone else did: both end the wait.
            self.roll_back(other, RollbackReason::Conflict, None, cost)
                .await?;
            wait.waited = Duration::ZERO;
        } else {
            let pause = wait.delays.next().unwrap_or(LOCK_WAIT.max);
            tokio::time::sleep(pause).await;
            wait.waited += pause;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_cut_by_count_and_by_estimated_bytes() {
        use aws_sdk_dynamodb::types::AttributeValue;
        let r = crate::txn::resolve::resolved_for_test(serde_json::json!({"Update":{
            "TableName":"Accounts","Key":{"PK":"a"},"UpdateExpression":"SET n = :n",
            "ExpressionAttributeValues":{":n":1}}}));
        let order: Vec<&Resolved> = std::iter::repeat_n(&r, 10).collect();
        let small: Vec<Option<Item>> = vec![None; 10];
        assert_eq!(chunk_ranges(&order, &small, 4), [0..4, 4..8, 8..10]);
        // Items of 390 KB: image and item are about 780 KB a piece, so four per chunk.
        let big = Item::from([("pad".to_string(), AttributeValue::S("p".repeat(390_000)))]);
        let large: Vec<Option<Item>> = vec![Some(big); 6];
        assert_eq!(chunk_ranges(&order[..6], &large, 99), [0..4, 4..6]);
    }

    #[test]
    fn two_requests_on_one_item_are_found_before_any_lock() {
        let update = |pk: &str, index: usize| {
            let mut r = crate::txn::resolve::resolved_for_test(serde_json::json!({"Update":{
                "TableName":"Accounts","Key":{"PK":pk},"UpdateExpression":"SET n = :n",
                "ExpressionAttributeValues":{":n":1}}}));
            r.index = index;
            r.order = ("Accounts".into(), pk.into());
            r
        };
        let distinct = [update("a", 0), update("b", 1)];
        assert_eq!(same_item_twice(&lock_order(&distinct)), None);
        let twice = [update("b", 0), update("a", 1), update("b", 2)];
        assert_eq!(same_item_twice(&lock_order(&twice)), Some(2));
    }

    #[test]
    fn lock_waits_stay_within_their_bounds() {
        let delays: Vec<Duration> = LockWait::new().delays.take(200).collect();
        assert_eq!(
            delays.len(),
            200,
            "the wait is bounded by the patience, not a count"
        );
        assert!(delays[0] >= Duration::from_millis(5) && delays[0] < Duration::from_millis(10));
        assert!(delays.iter().all(|d| *d < Duration::from_millis(200)));
    }
}
