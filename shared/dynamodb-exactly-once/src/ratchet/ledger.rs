//! The lifetime ledger: which tombstone lifetimes writers have used lately, so that a raised
//! lifetime never widens the age guard before the tombstones of the shorter one are gone.
//!
//! An expired tombstone is deleted by TTL, so nothing of it says which lifetime it was written
//! with. Each writer therefore promises in one ledger item (key
//! `ratchet-writer|lifetimes|<table>`, in a ledger table of its own: never among the dead
//! letters, whose readers take every item for a failure) the time until which it may write
//! tombstones of its lifetime `L` (attribute `Lifetime_<L>`: `now` plus [`LEDGER_LEASE`],
//! renewed at half the lease, before any tombstone is written past it). A tombstone of
//! lifetime `L'` written before `promise(L')` guards every older put while it exists; once it
//! is gone (after `promise(L') + L'` at the latest) a put that arrived before it is older than
//! `L'`. So a writer of lifetime `L` keeps the guard at `L'` while `now < promise(L') + L`
//! (after that every such put is older than `L` anyway):
//!
//! ```text
//!  guard(now) = min(L, min { L' < L : promise(L') + L > now })
//! ```
//!
//! The item is replaced whole by a `PutItem` conditioned on its version (`LedgerVersion`), its
//! previous state read from `ALL_OLD` (so a writer needs only `PutItem` on the ledger table).
//! Write cost: one `PutItem` (two on a cold start: the first one learns the item) per process
//! and half lease. Failure modes: the ledger cannot be written (throttling, a missing table):
//! the batch's records fail (retryable) before any tombstone is written past the promise.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use super::format::{LIFETIME_PREFIX, VERSION_ATTRIBUTE};
use crate::batch::RecordResult;
use crate::ddb::{conditional, Cond, Item, StoreError};
use crate::rejection::{Rejection, RejectionCode};

/// How long a writer's promise runs (renewed at half).
pub(crate) const LEDGER_LEASE: Duration = Duration::from_secs(3600);
/// Conditional puts tried before giving up (another writer renewing at the same time).
const MAX_ROUNDS: usize = 4;

/// Where the ledger is: a table whose partition key (a string) is `key_attribute`, and the
/// ledger item's key value; made by [`LifetimeLedger::new`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifetimeLedger {
    pub(crate) table: String,
    pub(crate) key_attribute: String,
    pub(crate) id: String,
}

impl LifetimeLedger {
    /// The ledger of the ratchet on `ratchet_table`, in the ledger table `table` (a string
    /// partition key `Id`; the stacks' `RatchetLedgerTable`).
    pub fn new(table: impl Into<String>, ratchet_table: &str) -> Self {
        LifetimeLedger {
            table: table.into(),
            key_attribute: "Id".into(),
            id: format!("ratchet-writer|lifetimes|{ratchet_table}"),
        }
    }

    /// The ledger table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Its partition key attribute (a string key).
    pub fn key_attribute(&self) -> &str {
        &self.key_attribute
    }

    /// The ledger item's key.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// What this process knows of the ledger.
#[derive(Debug, Default)]
pub(super) struct LedgerState(Mutex<Known>);

#[derive(Debug, Default, Clone)]
struct Known {
    /// Lifetime (s) → promise (epoch s).
    promises: BTreeMap<u64, u64>,
    /// The item's version as last read or written (`None`: not read yet).
    version: Option<u64>,
}

impl LedgerState {
    fn get(&self) -> Known {
        match self.0.lock() {
            Ok(k) => k.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, known: Known) {
        match self.0.lock() {
            Ok(mut k) => *k = known,
            Err(poisoned) => *poisoned.into_inner() = known,
        }
    }

    /// The age guard (s) of a writer of lifetime `own` at `now` (see the module docs).
    pub(super) fn guard(&self, own: u64, now: u64) -> u64 {
        guard(own, &self.get().promises, now)
    }

    /// Renew this writer's promise when less than half the lease is left (and move an earlier
    /// item into the ledger, when there is one).
    pub(super) async fn renew(
        &self,
        client: &Client,
        ledger: &LifetimeLedger,
        own: u64,
        now: u64,
    ) -> Result<(), StoreError> {
        let mut known = self.get();
        let half = LEDGER_LEASE.as_secs() / 2;
        if known.version.is_some() && known.promises.get(&own).is_some_and(|p| *p > now + half) {
            return Ok(());
        }
        for _ in 0..MAX_ROUNDS {
            let mut next = known.clone();
            next.promises.insert(own, now + LEDGER_LEASE.as_secs());
            next.version = Some(known.version.map_or(1, |v| v + 1));
            let mut request = client
                .put_item()
                .table_name(&ledger.table)
                .set_item(Some(item(ledger, &next)))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .expression_attribute_names("#v", VERSION_ATTRIBUTE);
            request = match known.version {
                None => request.condition_expression("attribute_not_exists(#v)"),
                Some(v) => request
                    .condition_expression("#v = :v")
                    .expression_attribute_values(":v", AttributeValue::N(v.to_string())),
            };
            match conditional("PutItem", request.send().await)? {
                Cond::Done(_) => {
                    self.set(next);
                    return Ok(());
                }
                Cond::Failed { old } => known = read(&old.unwrap_or_default()),
            }
        }
        Err(StoreError::Contention {
            what: format!("the lifetime ledger {}", ledger.id),
            attempts: MAX_ROUNDS,
        })
    }
}

/// `min(own, min { L < own : promise(L) + own > now })`.
fn guard(own: u64, promises: &BTreeMap<u64, u64>, now: u64) -> u64 {
    promises
        .iter()
        .filter(|(lifetime, promise)| **lifetime < own && promise.saturating_add(own) > now)
        .map(|(lifetime, _)| *lifetime)
        .min()
        .unwrap_or(own)
}

fn item(ledger: &LifetimeLedger, known: &Known) -> Item {
    let mut item = Item::from([
        (
            ledger.key_attribute.clone(),
            AttributeValue::S(ledger.id.clone()),
        ),
        (
            VERSION_ATTRIBUTE.to_string(),
            AttributeValue::N(known.version.unwrap_or(0).to_string()),
        ),
    ]);
    for (lifetime, promise) in &known.promises {
        item.insert(
            format!("{LIFETIME_PREFIX}{lifetime}"),
            AttributeValue::N(promise.to_string()),
        );
    }
    item
}

fn read(old: &Item) -> Known {
    let number = |v: &AttributeValue| v.as_n().ok().and_then(|n| n.parse::<u64>().ok());
    let promises = old
        .iter()
        .filter_map(|(name, value)| {
            let lifetime = name.strip_prefix(LIFETIME_PREFIX)?.parse().ok()?;
            Some((lifetime, number(value)?))
        })
        .collect();
    // An absent item: "not read" stays as the first write's condition.
    let version = old.get(VERSION_ATTRIBUTE).and_then(number);
    Known { promises, version }
}

impl super::Ratchet {
    /// The age guard in force at `now`: the setting's, or a shorter lifetime the ledger holds.
    pub(super) fn record_age_limit(&self, now: u64) -> Duration {
        let limit = self.config.record_age_limit();
        match &self.config.lifetime_ledger {
            None => limit,
            Some(_) => {
                let own = self.config.tombstone_ttl.as_secs();
                limit.min(Duration::from_secs(self.ledger.guard(own, now)))
            }
        }
    }

    /// With a ledger: renew this writer's promise (before any tombstone of this batch is
    /// written), then set aside the records older than the guard (`too_old`). The records to
    /// write, and the results of the others (all failed when the ledger cannot be written).
    pub(super) async fn check_lifetimes(
        &self,
        records: Vec<(usize, super::RatchetRecord)>,
    ) -> (
        Vec<(usize, super::RatchetRecord)>,
        Vec<(usize, RecordResult<super::RatchetOutcome>)>,
    ) {
        let Some(ledger) = &self.config.lifetime_ledger else {
            return (records, Vec::new());
        };
        let now = crate::ddb::clock::epoch_seconds();
        let own = self.config.tombstone_ttl.as_secs();
        if let Err(err) = self.ledger.renew(&self.client, ledger, own, now).await {
            let err = std::sync::Arc::new(err);
            let failed = records
                .into_iter()
                .map(|(i, _)| (i, RecordResult::Failed(err.shared())))
                .collect();
            return (Vec::new(), failed);
        }
        let guard = self.record_age_limit(now).as_secs();
        let (old, young): (Vec<_>, Vec<_>) = records
            .into_iter()
            .partition(|(_, r)| r.arrived.is_some_and(|a| now.saturating_sub(a) > guard));
        let reason = Rejection::new(
            RejectionCode::TooOld,
            format!(
                "the record arrived more than {guard} s ago: tombstones of that lifetime may \
                 still be in use (the lifetime ledger), so an older put could revive a deleted \
                 item. Replay with force after checking"
            ),
        );
        let refused = old
            .into_iter()
            .map(|(i, _)| (i, RecordResult::Rejected(reason.clone())))
            .collect();
        (young, refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shorter_lifetime_guards_until_its_promise_plus_the_own_lifetime() {
        let promises = BTreeMap::from([(60, 1_000), (600, 5_000)]);
        assert_eq!(guard(600, &promises, 1_500), 60);
        assert_eq!(guard(600, &promises, 1_600), 600);
        // A longer lifetime never lowers nor raises a shorter writer's guard.
        assert_eq!(guard(60, &promises, 1_500), 60);
        assert_eq!(guard(3_600, &BTreeMap::new(), 0), 3_600);
    }
}
