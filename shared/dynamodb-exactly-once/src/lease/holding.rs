//! A held lease: heartbeat, release, how long it is safe to act, fenced timestamps.

use crate::lease::format::{
    ATTR_FENCING_TOKEN, ATTR_LEASE_MS, ATTR_LOCK_ID, ATTR_RECORD_VERSION, ATTR_RELEASED,
};
use std::time::Duration;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use tokio::time::Instant;

use super::{
    lease_ms, new_record_version, HeartbeatOutcome, Lease, LockState, ReleaseOutcome,
    CONDITION_HOLDING, UPDATE_HEARTBEAT, UPDATE_RELEASE,
};
use crate::ddb::{conditional, Cond, Item, StoreError};

/// A lease this process holds: returned by an acquisition, kept alive by heartbeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    pub(super) lock_id: String,
    pub(super) owner: String,
    pub(super) token: u64,
    pub(super) version: String,
    pub(super) lease: Duration,
    /// When the last successful acquire or heartbeat was sent, plus the lease.
    pub(super) valid_until: Instant,
}

impl Holding {
    /// The lock.
    pub fn lock_id(&self) -> &str {
        &self.lock_id
    }

    /// This holder's name.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The fencing token of this acquisition.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The record version written by the last acquire or heartbeat.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// How long this holder may still act on the lock, on its own monotonic clock: the lease
    /// counted from the moment the last successful acquire or heartbeat was sent (zero once
    /// over). No contender can take over before that.
    pub fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// A timestamp for several fenced writes of one holding (e.g. the ratchet's `ts`):
    /// `token × 2³² + seq`. It grows with `seq` within a holding, and every timestamp of a
    /// later acquisition is greater than every timestamp of an earlier one (for tokens below
    /// 2³², i.e. for any realistic number of acquisitions).
    ///
    /// ```
    /// # use dynamodb_exactly_once::lease::Holding;
    /// # fn f(holding: &Holding) {
    /// assert!(holding.fenced_ts(1) > holding.fenced_ts(0));
    /// # }
    /// ```
    pub fn fenced_ts(&self, seq: u32) -> u64 {
        self.token
            .saturating_mul(1 << 32)
            .saturating_add(u64::from(seq))
    }
}

impl Lease {
    /// Extend the lease, if this acquisition still holds it (conditioned on its token and no
    /// release). On success the lease runs again from the moment this heartbeat was sent.
    pub async fn heartbeat(&self, holding: &mut Holding) -> Result<HeartbeatOutcome, StoreError> {
        let version = new_record_version();
        let sent = Instant::now();
        let result = self
            .holding_update(holding, UPDATE_HEARTBEAT)
            .expression_attribute_names("#lease", ATTR_LEASE_MS)
            .expression_attribute_values(":rv", AttributeValue::S(version.clone()))
            .expression_attribute_values(":lease", AttributeValue::N(lease_ms(self.config.lease)))
            .send()
            .await;
        match conditional("UpdateItem", result)? {
            Cond::Done(_) => {
                holding.version = version;
                holding.lease = self.config.lease;
                holding.valid_until = sent + self.config.lease;
                Ok(HeartbeatOutcome::Extended)
            }
            Cond::Failed { old } => Ok(HeartbeatOutcome::Lost {
                by: current_holder(old)?,
            }),
        }
    }

    /// Release the lock, if this acquisition still holds it. The item (and its fencing
    /// token) stays; the next acquisition gets the next token.
    pub async fn release(&self, holding: Holding) -> Result<ReleaseOutcome, StoreError> {
        let result = self
            .holding_update(&holding, UPDATE_RELEASE)
            .expression_attribute_values(":rv", AttributeValue::S(new_record_version()))
            .expression_attribute_values(":true", AttributeValue::Bool(true))
            .send()
            .await;
        match conditional("UpdateItem", result)? {
            Cond::Done(_) => Ok(ReleaseOutcome::Released),
            Cond::Failed { old } => {
                let state = old.map(LockState::from_item).transpose()?;
                match state {
                    // Our own release, applied before its response was lost.
                    Some(s) if s.token == holding.token && s.released => {
                        Ok(ReleaseOutcome::Released)
                    }
                    Some(s) if !s.released => Ok(ReleaseOutcome::Lost { by: Some(s.owner) }),
                    _ => Ok(ReleaseOutcome::Lost { by: None }),
                }
            }
        }
    }

    /// An `UpdateItem` of the lock item conditioned on `holding` ([`CONDITION_HOLDING`]).
    fn holding_update(&self, holding: &Holding, update: &str) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.config.table)
            .key(ATTR_LOCK_ID, AttributeValue::S(holding.lock_id.clone()))
            .update_expression(update)
            .condition_expression(CONDITION_HOLDING)
            .expression_attribute_names("#rv", ATTR_RECORD_VERSION)
            .expression_attribute_names("#tok", ATTR_FENCING_TOKEN)
            .expression_attribute_names("#rel", ATTR_RELEASED)
            .expression_attribute_values(":tok", AttributeValue::N(holding.token.to_string()))
            .expression_attribute_values(":false", AttributeValue::Bool(false))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }
}

/// The holder named by a lock item (`None`: released or absent).
fn current_holder(old: Option<Item>) -> Result<Option<String>, StoreError> {
    let state = old.map(LockState::from_item).transpose()?;
    Ok(state.filter(|s| !s.released).map(|s| s.owner))
}
