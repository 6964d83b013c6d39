//! Acquiring: a free lock at once, a held one only after its record version stayed unchanged
//! for a full lease on this contender's own monotonic clock (a takeover).

use crate::lease::format::{
    ATTR_FENCING_TOKEN, ATTR_LEASE_MS, ATTR_LOCK_ID, ATTR_OWNER, ATTR_RECORD_VERSION, ATTR_RELEASED,
};
use std::time::Duration;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use tokio::time::Instant;

use super::{
    lease_ms, new_record_version, AcquireOutcome, Holding, Lease, LockState, CONDITION_FREE,
    CONDITION_UNCHANGED, UPDATE_ACQUIRE,
};
use crate::ddb::{conditional, Cond, StoreError};

/// A record version seen by a waiting contender, and when its read returned.
#[derive(Debug)]
struct Sighting {
    version: String,
    since: Instant,
}

/// What to do after one read of the lock.
#[derive(Debug)]
enum Step {
    /// Write the acquisition under this condition (`Some(v)`: take over from version `v`).
    Write { seen: Option<LockState> },
    /// Wait this long, then read again.
    Wait(Duration),
    /// Give up: held by someone else.
    GiveUp(LockState),
}

impl Lease {
    /// Acquire without waiting: a free lock is acquired, a held one is reported as
    /// [`AcquireOutcome::Held`] (a takeover needs [`Lease::acquire`] with patience of at
    /// least one lease).
    pub async fn try_acquire(
        &self,
        lock_id: &str,
        owner: &str,
    ) -> Result<AcquireOutcome, StoreError> {
        self.acquire(lock_id, owner, Duration::ZERO).await
    }

    /// Acquire the lock for `owner`, waiting at most `patience`: at once when free; after
    /// its holder released it; or by taking it over once its record version stayed unchanged
    /// for a full lease (the holder's own `LeaseMs`) on this contender's monotonic clock.
    pub async fn acquire(
        &self,
        lock_id: &str,
        owner: &str,
        patience: Duration,
    ) -> Result<AcquireOutcome, StoreError> {
        let give_up_at = Instant::now() + patience;
        let mut sighting: Option<Sighting> = None;
        loop {
            let state = self.get(lock_id).await?;
            let read_at = Instant::now();
            match self.next_step(state, &mut sighting, read_at, give_up_at) {
                Step::Wait(wait) => tokio::time::sleep(wait).await,
                Step::GiveUp(state) => {
                    return Ok(AcquireOutcome::Held {
                        by: state.owner,
                        version: state.version,
                    })
                }
                Step::Write { seen } => {
                    if let Some(acquired) = self.write_acquire(lock_id, owner, seen).await? {
                        return Ok(acquired);
                    }
                    sighting = None; // lost the race: watch the new holder from scratch
                }
            }
        }
    }

    /// Decide from one read: acquire, wait, take over or give up.
    fn next_step(
        &self,
        state: Option<LockState>,
        sighting: &mut Option<Sighting>,
        read_at: Instant,
        give_up_at: Instant,
    ) -> Step {
        let Some(state) = state.filter(|s| !s.released) else {
            return Step::Write { seen: None };
        };
        let since = match sighting {
            Some(s) if s.version == state.version => s.since,
            _ => {
                *sighting = Some(Sighting {
                    version: state.version.clone(),
                    since: read_at,
                });
                read_at
            }
        };
        let expires = since + state.lease();
        if read_at >= expires {
            return Step::Write { seen: Some(state) };
        }
        if read_at >= give_up_at {
            return Step::GiveUp(state);
        }
        let next = (read_at + self.config.poll_interval)
            .min(expires)
            .min(give_up_at);
        Step::Wait(next.saturating_duration_since(read_at))
    }

    /// The acquiring write: on a free lock, or a takeover over the version `seen`. `None`
    /// when another contender won the race.
    async fn write_acquire(
        &self,
        lock_id: &str,
        owner: &str,
        seen: Option<LockState>,
    ) -> Result<Option<AcquireOutcome>, StoreError> {
        let version = new_record_version();
        let lease = self.config.lease;
        let request = self.acquire_request(lock_id, owner, &version, seen.as_ref());
        let sent = Instant::now();
        let new = match conditional("UpdateItem", request.send().await)? {
            Cond::Done(out) => out.attributes.map(LockState::from_item).transpose()?,
            // The same write sent again after a lost response finds its own record version.
            Cond::Failed { old } => old
                .map(LockState::from_item)
                .transpose()?
                .filter(|s| s.version == version),
        };
        let Some(new) = new else {
            return Ok(None);
        };
        let holding = Holding {
            lock_id: lock_id.to_string(),
            owner: owner.to_string(),
            token: new.token,
            version,
            lease,
            valid_until: sent + lease,
        };
        Ok(Some(AcquireOutcome::Acquired {
            token: new.token,
            holding,
            took_over_from: seen.map(|s| s.owner),
        }))
    }

    /// [`UPDATE_ACQUIRE`] under [`CONDITION_FREE`], or [`CONDITION_UNCHANGED`] over `seen`.
    fn acquire_request(
        &self,
        lock_id: &str,
        owner: &str,
        version: &str,
        seen: Option<&LockState>,
    ) -> UpdateItemFluentBuilder {
        let request = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .key(ATTR_LOCK_ID, AttributeValue::S(lock_id.to_string()))
            .update_expression(UPDATE_ACQUIRE)
            .expression_attribute_names("#owner", ATTR_OWNER)
            .expression_attribute_names("#rv", ATTR_RECORD_VERSION)
            .expression_attribute_names("#lease", ATTR_LEASE_MS)
            .expression_attribute_names("#rel", ATTR_RELEASED)
            .expression_attribute_names("#tok", ATTR_FENCING_TOKEN)
            .expression_attribute_values(":owner", AttributeValue::S(owner.to_string()))
            .expression_attribute_values(":rv", AttributeValue::S(version.to_string()))
            .expression_attribute_values(":lease", AttributeValue::N(lease_ms(self.config.lease)))
            .expression_attribute_values(":false", AttributeValue::Bool(false))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        match seen {
            None => request
                .condition_expression(CONDITION_FREE)
                .expression_attribute_names("#id", ATTR_LOCK_ID)
                .expression_attribute_values(":true", AttributeValue::Bool(true)),
            Some(state) => request
                .condition_expression(CONDITION_UNCHANGED)
                .expression_attribute_values(":seen", AttributeValue::S(state.version.clone())),
        }
    }
}
