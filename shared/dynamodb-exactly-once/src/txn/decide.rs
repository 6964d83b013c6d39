//! The header transitions of a coordinator: commit, roll back, restart, mark completed (each
//! one conditional write on the header's `Version`, see [`Transition`]), and reading the
//! header again when a transition lost without telling the winner's state.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::item::s;
use super::record::{self, RollbackReason, Transition, TxHeader, TxState};
use super::{Coordinator, Cost};
use crate::ddb::clock::epoch_millis;
use crate::ddb::error::StoreError;

impl Coordinator {
    /// Read a header that must exist.
    pub(super) async fn reload(&self, tx_id: &str) -> Result<TxHeader, StoreError> {
        self.tx
            .get(tx_id)
            .await?
            .ok_or_else(|| StoreError::Inconsistent(format!("TX {tx_id}: header vanished")))
    }

    /// The header after a transition: as written or as the winner left it, or read again.
    pub(super) async fn header_after(
        &self,
        transition: Transition,
        tx_id: &str,
    ) -> Result<TxHeader, StoreError> {
        match transition.into_known() {
            Some(header) => Ok(header),
            None => self.reload(tx_id).await,
        }
    }

    /// Whether this attempt is still pending (a consistent read of the header).
    pub(super) async fn still_pending(&self, header: &TxHeader) -> Result<bool, StoreError> {
        Ok(self.tx.get_state(&header.tx_id).await?.is_some_and(|h| {
            h.state == TxState::Pending
                && h.attempt == header.attempt
                && h.version == header.version
        }))
    }

    /// Step 3: `pending → committed` with every item's token (conditioned on the version read).
    pub(super) async fn commit(
        &self,
        header: &TxHeader,
        tokens: BTreeMap<usize, String>,
        decider: &str,
        cost: &Cost,
    ) -> Result<Transition, StoreError> {
        let tokens = AttributeValue::M(
            tokens
                .into_iter()
                .map(|(i, t)| (i.to_string(), s(t)))
                .collect(),
        );
        let set = [
            (
                crate::txn::format::ATTR_STATE,
                s(TxState::Committed.as_str()),
            ),
            (crate::txn::format::ATTR_TOKENS, tokens),
            (crate::txn::format::ATTR_DECIDER, s(decider)),
        ];
        // Sent again through conflicts while every lock is held: heartbeats keep the holder
        // alive to its contenders meanwhile (they would roll a silent holder back).
        let every = self.config.heartbeat_every;
        self.tx
            .transition_alive(header, &set, (!every.is_zero()).then_some(every), cost)
            .await
    }

    /// `pending → rolled_back` (conditioned on the version read). A header that is not
    /// pending is not written: [`Transition::Lost`] with it.
    pub(super) async fn roll_back(
        &self,
        header: &TxHeader,
        why: RollbackReason,
        request: Option<usize>,
        cost: &Cost,
    ) -> Result<Transition, StoreError> {
        self.roll_back_by(header, why, request, None, cost).await
    }

    /// The sweeper's rollback of a stale pending transaction (`abandoned`): lost to any
    /// heartbeat written since `header` was read, as to any other transition.
    pub(super) async fn roll_back_stale(
        &self,
        header: &TxHeader,
        refused: Option<usize>,
        cost: &Cost,
    ) -> Result<Transition, StoreError> {
        if header.state != TxState::Pending {
            return Ok(Transition::Lost(header.clone()));
        }
        // A request whose key the table refuses can never apply: final (`invalid_request`,
        // naming it), not `abandoned`, which a redelivery would restart.
        let why = match refused {
            Some(_) => RollbackReason::InvalidRequest,
            None => RollbackReason::Abandoned,
        };
        let mut set = vec![
            (
                crate::txn::format::ATTR_STATE,
                s(TxState::RolledBack.as_str()),
            ),
            (crate::txn::format::ATTR_REASON, s(why.as_str())),
        ];
        if let Some(i) = refused {
            set.push((
                crate::txn::format::ATTR_FAILED_REQUEST,
                AttributeValue::N(i.to_string()),
            ));
        }
        self.tx.transition_untouched(header, &set, cost).await
    }

    /// [`Self::roll_back`], naming the run that decides (its own transaction's rollback).
    pub(super) async fn roll_back_by(
        &self,
        header: &TxHeader,
        why: RollbackReason,
        request: Option<usize>,
        decider: Option<&str>,
        cost: &Cost,
    ) -> Result<Transition, StoreError> {
        if header.state != TxState::Pending {
            return Ok(Transition::Lost(header.clone()));
        }
        let (reason, detail) = why.stored();
        let mut set = vec![
            (
                crate::txn::format::ATTR_STATE,
                s(TxState::RolledBack.as_str()),
            ),
            (crate::txn::format::ATTR_REASON, s(reason)),
        ];
        if let Some(detail) = detail {
            set.push((crate::txn::format::ATTR_REASON_DETAIL, s(detail)));
        }
        if let Some(i) = request {
            set.push((
                crate::txn::format::ATTR_FAILED_REQUEST,
                AttributeValue::N(i.to_string()),
            ));
        }
        if let Some(decider) = decider {
            set.push((crate::txn::format::ATTR_DECIDER, s(decider)));
        }
        self.tx.transition(header, &set, &[], cost).await
    }

    /// Completed-and-aborted → `pending` with the next attempt.
    pub(super) async fn restart(
        &self,
        header: &TxHeader,
        cost: &Cost,
    ) -> Result<Transition, StoreError> {
        let set = [
            (crate::txn::format::ATTR_STATE, s(TxState::Pending.as_str())),
            (
                crate::txn::format::ATTR_ATTEMPT,
                AttributeValue::N((header.attempt + 1).to_string()),
            ),
            (
                crate::txn::format::ATTR_SWEEP_KEY,
                s(record::sweep_key(&header.tx_id)),
            ),
            (
                crate::txn::format::ATTR_LAST_TOUCHED,
                AttributeValue::N(epoch_millis().to_string()),
            ),
        ];
        let remove = [
            crate::txn::format::ATTR_EXPIRES_AT,
            crate::txn::format::ATTR_REASON,
            crate::txn::format::ATTR_REASON_DETAIL,
            crate::txn::format::ATTR_FAILED_REQUEST,
            crate::txn::format::ATTR_DECISION,
            crate::txn::format::ATTR_TOKENS,
            crate::txn::format::ATTR_DECIDER,
        ];
        self.tx.transition(header, &set, &remove, cost).await
    }

    /// Step 5: `→ completed`, keeping the decision; the header leaves the sweep index
    /// (`REMOVE SweepKey`: one index write) and expires through TTL after the retention
    /// (`ExpiresAt`; DynamoDB's TTL deletes cost no write).
    pub(super) async fn mark_completed(
        &self,
        header: &TxHeader,
        cost: &Cost,
    ) -> Result<Transition, StoreError> {
        // Only a decided header completes, and its decision is what is recorded (a completed
        // header's state is not a decision: recording it would make the transaction look
        // undecided to a later delivery, which would run it again).
        let Some(decision) = header.decision() else {
            return Ok(Transition::Lost(header.clone()));
        };
        if header.state == TxState::Completed {
            return Ok(Transition::Lost(header.clone()));
        }
        let expires = record::expires_at(epoch_millis(), header.issued_at_ms, self.config.retain);
        let set = [
            (
                crate::txn::format::ATTR_STATE,
                s(TxState::Completed.as_str()),
            ),
            (crate::txn::format::ATTR_DECISION, s(decision.as_str())),
            (
                crate::txn::format::ATTR_EXPIRES_AT,
                AttributeValue::N(expires.to_string()),
            ),
        ];
        let remove = [crate::txn::format::ATTR_SWEEP_KEY];
        self.tx.transition(header, &set, &remove, cost).await
    }

    /// The heartbeat of a pending attempt, when its `LastTouched` is older than
    /// [`TxConfig::heartbeat_every`](super::TxConfig::heartbeat_every): `Ok(false)` when the
    /// attempt was decided meanwhile. `last_touched_ms` is updated when it writes.
    pub(super) async fn heartbeat(
        &self,
        header: &TxHeader,
        last_touched_ms: &mut u64,
        cost: &Cost,
    ) -> Result<bool, StoreError> {
        if self.config.heartbeat_every.is_zero() {
            return Ok(true); // heartbeats off
        }
        let now = epoch_millis();
        let every = u64::try_from(self.config.heartbeat_every.as_millis()).unwrap_or(u64::MAX);
        if now.saturating_sub(*last_touched_ms) < every {
            return Ok(true);
        }
        let alive = self.tx.touch(header, cost).await?;
        if alive {
            *last_touched_ms = now;
        }
        Ok(alive)
    }
}
