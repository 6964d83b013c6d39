//! Whether a lock on an item is this attempt's own lock for one request (a redelivery resuming
//! its attempt adopts it as held), including the previous release's lock shape for a `Delete`
//! or `ConditionCheck` (see "Mixed versions" on the protocol page).

use crate::txn::format::{ATTR_DELETE, ATTR_IMAGE, ATTR_TRANSIENT};
use aws_sdk_dynamodb::types::AttributeValue;

use crate::ddb::item::Item;
use crate::txn::item::{flag, lock_of, strip_protocol};
use crate::txn::record::{lock_value, parse_owner};
use crate::txn::request::Operation;
use crate::txn::resolve::Resolved;

/// Whose lock is on an item, as seen by one request of one attempt.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum OwnLock {
    /// Unlocked, or another attempt's or transaction's lock.
    NotOurs,
    /// This attempt's lock, as this request's own lock write leaves it: adopted as held.
    Ours,
    /// This attempt's lock, but not as this request's lock write leaves it (why).
    OtherRequest(String),
}

/// Whether `item`'s lock is this attempt's (`owner`) lock for request `r`: the lock's kind
/// ([`lock_value`], a keep lock or not) and the delete marker are what `r`'s lock write sets
/// (a `Delete` marks the item; a `ConditionCheck` marks only a transient item it inserted;
/// an `Update` or `Put` never), or what the previous release's lock write set for a `Delete`
/// or `ConditionCheck` (a plain lock that left the values as they were, [`left_unchanged`]).
/// One attempt locks one item for one request, so a mismatch means two requests name one item
/// (parsing refuses that, so only a damaged record can): adopting the lock would commit a
/// change that was never applied.
pub(super) fn own_lock(owner: &str, r: &Resolved, item: &Item) -> OwnLock {
    let Some(lock) = lock_of(item) else {
        return OwnLock::NotOurs;
    };
    if parse_owner(lock).is_none() || parse_owner(lock) != parse_owner(owner) {
        return OwnLock::NotOurs;
    }
    let op = &r.request.op;
    let marked = flag(item, ATTR_DELETE);
    let expected_mark = match op {
        Operation::Delete { .. } => true,
        Operation::ConditionCheck { .. } => flag(item, ATTR_TRANSIENT),
        Operation::Put { .. } | Operation::Update { .. } => false,
    };
    if marked == expected_mark
        && (lock == lock_value(owner, op.keeps_values())
            || (op.keeps_values() && lock == owner && left_unchanged(item)))
    {
        return OwnLock::Ours;
    }
    OwnLock::OtherRequest(format!(
        "the item of request {} ({}) is locked by this attempt for another request (lock \
         {lock:?}, delete marker {marked}): two requests name one item",
        r.index,
        op.tag()
    ))
}

/// Whether a plain lock (`txId#attempt`) left the item's values as they were: what the
/// release before keep locks wrote for a `Delete` or `ConditionCheck` (the item saved as its
/// image, or inserted transient when absent). Such a lock of this attempt is adopted by the
/// same request of this release (an attempt an older coordinator started during a deploy):
/// completing finalizes or undoes such a lock by its markers and image (`finish.rs`).
fn left_unchanged(item: &Item) -> bool {
    match item.get(ATTR_IMAGE) {
        Some(AttributeValue::M(image)) => *image == strip_protocol(item.clone()),
        Some(_) => false,
        None => flag(item, ATTR_TRANSIENT),
    }
}
