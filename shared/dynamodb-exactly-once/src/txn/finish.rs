//! Steps 4–5 of a decided transaction, by any coordinator or the sweeper: finalize (committed
//! change) or undo (everything else) each item, then mark the record completed; and
//! `Coordinator::drive_keeping`, the sweeper's step.
//!
//! Completion reads each item once, after the decision: since a lock write can only land
//! while its attempt is pending (the header check of `lock::write`), every lock of the
//! transaction is on its item by then, and none can appear afterwards.

use crate::txn::format::{ATTR_DELETE, ATTR_IMAGE, ATTR_LOCK, ATTR_TRANSIENT, ATTR_VERSION_TOKEN};
use aws_sdk_dynamodb::types::{AttributeValue, ConsumedCapacity, ReturnConsumedCapacity};
use futures::StreamExt;
use serde_json::Value;

use super::item::{flag, lock_of, s, token_of};
use super::record::{keeps_values, lock_value, parse_owner, TxHeader, TxState};
use super::request::{recorded_requests, Operation};
use super::resolve::Resolved;
use super::sweep::{KeepRetired, Retired};
use super::{Coordinator, Cost, Driven, RollbackReason, TxError};
use crate::ddb::cond::{conditional, Cond};
use crate::ddb::conflict::again_on_conflict;
use crate::ddb::error::StoreError;
use crate::ddb::expr::Placeholders;
use crate::ddb::item::Item;
use crate::rejection::Rejection;

/// Guard of a finalize or undo write (placeholders `#txpl`, `#txpv`, `:txpo`, `:txpt`).
const CONDITION_HELD_BY: &str = "#txpl = :txpo AND #txpv = :txpt";

/// The placeholders of [`CONDITION_HELD_BY`]: the item is locked by `owner` with `token`.
fn held_by_placeholders(owner: String, token: String) -> Placeholders {
    let mut held = Placeholders::default();
    held.set_name("#txpl", ATTR_LOCK)
        .set_name("#txpv", ATTR_VERSION_TOKEN)
        .set_value(":txpo", s(owner))
        .set_value(":txpt", s(token));
    held
}
/// Finalize of a kept item.
const UPDATE_UNLOCK: &str = "REMOVE #txpl, #txpi, #txpd, #txptr";
/// [`CONDITION_HELD_BY`] on an item the transaction keeps (no delete marker): the guard of a
/// finalize written without reading the item first.
const CONDITION_HELD_AND_KEPT: &str =
    "#txpl = :txpo AND #txpv = :txpt AND attribute_not_exists(#txpd)";
/// Finalize writes in flight at once when this run committed and knows every lock it holds:
/// a transaction of up to this many items is finalized in one round trip.
const FINALIZE_AT_ONCE: usize = 256;

/// Count a finalize/undo write; one whose guard failed was done by someone else: fine.
fn guarded(
    result: Result<Cond<Option<ConsumedCapacity>>, StoreError>,
    cost: &Cost,
) -> Result<(), StoreError> {
    held(result, cost).map(|_| ())
}

/// Count a finalize/undo write: `true` when its guard held and it was applied.
fn held(
    result: Result<Cond<Option<ConsumedCapacity>>, StoreError>,
    cost: &Cost,
) -> Result<bool, StoreError> {
    match result {
        Ok(Cond::Done(consumed)) => {
            cost.add(consumed.as_ref());
            Ok(true)
        }
        Ok(Cond::Failed { .. }) => {
            cost.add_failed();
            Ok(false)
        }
        Err(e) => {
            cost.add_failed();
            Err(e)
        }
    }
}

/// The lock and token an item holds (empty when absent: the guard then fails).
fn held_by(item: &Item) -> (String, String) {
    let owner = lock_of(item).unwrap_or_default().to_string();
    let token = token_of(item).unwrap_or_default().to_string();
    (owner, token)
}

impl Coordinator {
    /// Steps 4–5 of a decided transaction: finalize (committed, this attempt, recorded token)
    /// or undo (everything else of this transaction) every item, then mark it completed.
    pub(super) async fn complete(
        &self,
        header: &TxHeader,
        resolved: &[Resolved],
        cost: &Cost,
    ) -> Result<TxHeader, StoreError> {
        let work: Vec<_> = resolved
            .iter()
            .map(|r| self.complete_item(header, r, cost))
            .collect();
        self.complete_after(header, work, self.config.concurrency, cost)
            .await
    }

    /// Run every item's step (`at_once` at a time), then mark the transaction completed.
    async fn complete_after<F>(
        &self,
        header: &TxHeader,
        work: Vec<F>,
        at_once: usize,
        cost: &Cost,
    ) -> Result<TxHeader, StoreError>
    where
        F: std::future::Future<Output = Result<(), StoreError>>,
    {
        let results: Vec<Result<(), StoreError>> = futures::stream::iter(work)
            .buffer_unordered(at_once.max(1))
            .collect()
            .await;
        for r in results {
            r?;
        }
        let transition = self.mark_completed(header, cost).await?;
        self.header_after(transition, &header.tx_id).await
    }

    /// Steps 4–5 of a transaction this run has just committed: every item finalized with no
    /// read first (this run holds each lock as `header.owner()` with the token the commit
    /// recorded, and knows from its request whether the item goes), up to
    /// [`FINALIZE_AT_ONCE`] writes at once, then marked completed. A write whose guard fails
    /// (the item was finalized by someone else, or is not as expected) is completed the
    /// read-based way ([`Coordinator::complete`]'s step for one item).
    pub(super) async fn complete_committed(
        &self,
        header: &TxHeader,
        resolved: &[Resolved],
        cost: &Cost,
    ) -> Result<TxHeader, StoreError> {
        let work: Vec<_> = resolved
            .iter()
            .map(|r| self.finalize_blind(header, r, cost))
            .collect();
        let at_once = self.config.concurrency.max(FINALIZE_AT_ONCE);
        self.complete_after(header, work, at_once, cost).await
    }

    /// Finalize one item of a transaction this run committed, without reading it.
    async fn finalize_blind(
        &self,
        header: &TxHeader,
        r: &Resolved,
        cost: &Cost,
    ) -> Result<(), StoreError> {
        let Some(token) = header.tokens.get(&r.index).cloned() else {
            return self.complete_item(header, r, cost).await;
        };
        let owner = lock_value(&header.owner(), r.request.op.keeps_values());
        let result = match r.request.op {
            Operation::Delete { .. } => self.delete_held(r, owner, token).await,
            // A ConditionCheck of an absent item carries the delete marker: its guard fails
            // and it is completed the read-based way.
            _ => {
                self.unlock_with(r, owner, token, CONDITION_HELD_AND_KEPT)
                    .await
            }
        };
        match held(result, cost)? {
            true => Ok(()),
            false => self.complete_item(header, r, cost).await,
        }
    }

    async fn complete_item(
        &self,
        header: &TxHeader,
        r: &Resolved,
        cost: &Cost,
    ) -> Result<(), StoreError> {
        let Some(item) = self.get_item(r).await? else {
            return Ok(());
        };
        let Some((tx, attempt)) = lock_of(&item).and_then(parse_owner) else {
            return Ok(());
        };
        if tx != header.tx_id || attempt > header.attempt {
            return Ok(());
        }
        let token = token_of(&item).unwrap_or_default();
        if header.state == TxState::Committed
            && attempt == header.attempt
            && header.tokens.get(&r.index).map(String::as_str) == Some(token)
        {
            self.finalize_item(r, &item, cost).await
        } else {
            self.undo_item(r, &item, cost).await
        }
    }

    /// Finalize T's committed change on one item (unlock, or delete).
    pub(super) async fn finalize_item(
        &self,
        r: &Resolved,
        item: &Item,
        cost: &Cost,
    ) -> Result<(), StoreError> {
        let (owner, token) = held_by(item);
        let result = if flag(item, ATTR_DELETE) {
            self.delete_held(r, owner, token).await
        } else {
            self.unlock(r, owner, token).await
        };
        guarded(result, cost)
    }

    /// Undo T's change on one item: restore the image; remove the protocol attributes of a
    /// lock that left the item's values as they were (no image, [`keeps_values`]); delete what
    /// did not exist (no image, or a transient item).
    pub(super) async fn undo_item(
        &self,
        r: &Resolved,
        item: &Item,
        cost: &Cost,
    ) -> Result<(), StoreError> {
        let (owner, token) = held_by(item);
        let kept = keeps_values(&owner) && !flag(item, ATTR_TRANSIENT);
        let result = match item.get(ATTR_IMAGE) {
            Some(AttributeValue::M(image)) => self.restore(r, image.clone(), owner, token).await,
            _ if kept => self.unlock(r, owner, token).await,
            _ => self.delete_held(r, owner, token).await,
        };
        guarded(result, cost)
    }

    /// Remove the lock, image and markers of an item held by `owner` with `token`.
    async fn unlock(
        &self,
        r: &Resolved,
        owner: String,
        token: String,
    ) -> Result<Cond<Option<ConsumedCapacity>>, StoreError> {
        self.unlock_with(r, owner, token, CONDITION_HELD_BY).await
    }

    /// [`Coordinator::unlock`] under `condition` (placeholders of [`CONDITION_HELD_BY`] and
    /// `#txpd`).
    async fn unlock_with(
        &self,
        r: &Resolved,
        owner: String,
        token: String,
        condition: &'static str,
    ) -> Result<Cond<Option<ConsumedCapacity>>, StoreError> {
        let mut held = held_by_placeholders(owner, token);
        held.set_name("#txpi", ATTR_IMAGE)
            .set_name("#txpd", ATTR_DELETE)
            .set_name("#txptr", ATTR_TRANSIENT);
        let (names, values) = held.into_maps();
        let result = {
            let request = self
                .client
                .update_item()
                .table_name(&r.request.table)
                .set_key(Some(r.key.clone()))
                .update_expression(UPDATE_UNLOCK)
                .condition_expression(condition)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .return_consumed_capacity(ReturnConsumedCapacity::Total);
            again_on_conflict(|| request.clone().send()).await
        }
        .map(|o| o.consumed_capacity);
        conditional("UpdateItem", result)
    }

    /// Put the saved image back on an item held by `owner` with `token`.
    async fn restore(
        &self,
        r: &Resolved,
        image: Item,
        owner: String,
        token: String,
    ) -> Result<Cond<Option<ConsumedCapacity>>, StoreError> {
        let (names, values) = held_by_placeholders(owner, token).into_maps();
        let result = {
            let request = self
                .client
                .put_item()
                .table_name(&r.request.table)
                .set_item(Some(image))
                .condition_expression(CONDITION_HELD_BY)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .return_consumed_capacity(ReturnConsumedCapacity::Total);
            again_on_conflict(|| request.clone().send()).await
        }
        .map(|o| o.consumed_capacity);
        conditional("PutItem", result)
    }

    /// Delete an item held by `owner` with `token`.
    async fn delete_held(
        &self,
        r: &Resolved,
        owner: String,
        token: String,
    ) -> Result<Cond<Option<ConsumedCapacity>>, StoreError> {
        let (names, values) = held_by_placeholders(owner, token).into_maps();
        let result = {
            let request = self
                .client
                .delete_item()
                .table_name(&r.request.table)
                .set_key(Some(r.key.clone()))
                .condition_expression(CONDITION_HELD_BY)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .return_consumed_capacity(ReturnConsumedCapacity::Total);
            again_on_conflict(|| request.clone().send()).await
        }
        .map(|o| o.consumed_capacity);
        conditional("DeleteItem", result)
    }

    /// Drive a recorded transaction towards completion (the sweeper's step): roll back if
    /// pending (`abandoned`) and still silent since `stale_before` (epoch ms: a heartbeat
    /// after it means a delivery resumed it, which is left alone, [`Driven::Alive`]), finish
    /// if decided. Returns the header after, and what was done; `None` when there is no such
    /// record.
    /// A record retired on a refused key (rolled back final, `invalid_request`) is handed to
    /// `keeper` before it is completed (see [`crate::txn::sweep::KeepRetired`]).
    pub(crate) async fn drive_keeping(
        &self,
        tx_id: &str,
        stale_before: u64,
        cost: &Cost,
        keeper: Option<&dyn KeepRetired>,
    ) -> Result<Option<(TxHeader, Driven)>, TxError> {
        let Some(mut header) = self.tx.get(tx_id).await? else {
            return Ok(None);
        };
        let mut driven = Driven::Nothing;
        let mut recorded = None;
        if header.state == TxState::Pending {
            if header.last_touched_ms > stale_before {
                return Ok(Some((header, Driven::Alive)));
            }
            let found = self.recorded(&header).await?;
            let refused = found.refused.as_ref().map(|(i, _)| *i);
            let transition = self.roll_back_stale(&header, refused, cost).await?;
            if transition.is_moved() {
                driven = Driven::RolledBack;
            }
            header = self.header_after(transition, tx_id).await?;
            recorded = Some(found);
        }
        if matches!(header.state, TxState::Committed | TxState::RolledBack) {
            let recorded = match recorded {
                Some(r) => r,
                None => self.recorded(&header).await?,
            };
            if let Some(keeper) = keeper {
                if keep_if_retired(keeper, &header, &recorded).await? {
                    driven = Driven::Retired;
                }
            }
            if driven == Driven::Nothing {
                driven = if header.state == TxState::Committed {
                    Driven::Finished
                } else {
                    Driven::RolledBack
                };
            }
            header = self.complete(&header, &recorded.resolved, cost).await?;
        }
        Ok(Some((header, driven)))
    }

    /// The requests of a TX record, resolved, and the first whose key the table refuses.
    async fn recorded(&self, header: &TxHeader) -> Result<Recorded, TxError> {
        let json = self.tx.requests_json(header).await?;
        let raw: Vec<Value> = serde_json::from_str(&json)
            .map_err(|e| StoreError::Inconsistent(format!("TX {} requests: {e}", header.tx_id)))?;
        let requests = recorded_requests(&raw).map_err(TxError::Rejected)?;
        let (resolved, refused) = self.resolve_recorded(&header.tx_id, &requests).await?;
        Ok(Recorded {
            raw,
            resolved,
            refused,
        })
    }
}

/// The requests of a TX record: as recorded, resolved, and the first refused one.
struct Recorded {
    raw: Vec<Value>,
    resolved: Vec<Resolved>,
    refused: Option<(usize, Rejection)>,
}

/// Hand a record rolled back final on a refused key (`invalid_request`) to `keeper`: whether
/// it was one.
async fn keep_if_retired(
    keeper: &dyn KeepRetired,
    header: &TxHeader,
    recorded: &Recorded,
) -> Result<bool, StoreError> {
    let Some((_, reason)) = &recorded.refused else {
        return Ok(false);
    };
    if header.state != TxState::RolledBack || header.reason != Some(RollbackReason::InvalidRequest)
    {
        return Ok(false);
    }
    let retired = Retired::new(header.tx_id.clone(), reason.clone(), recorded.raw.clone());
    keeper.keep_retired(&retired).await?;
    tracing::warn!(tx_id = %header.tx_id, rejection = %reason,
        "a TX record retired on a key the table refuses was kept as a dead letter");
    Ok(true)
}
