//! [`TxTable`]: reads and conditional writes of TX records.

use crate::txn::format::{
    ATTR_ATTEMPT, ATTR_CHUNK, ATTR_LAST_TOUCHED, ATTR_PART, ATTR_STATE, ATTR_TX_ID, ATTR_VERSION,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::types::{
    AttributeValue, ConsumedCapacity, ReturnConsumedCapacity, ReturnValue,
    ReturnValuesOnConditionCheckFailure,
};
use aws_sdk_dynamodb::Client;

use super::{get_s, header_key, n, parts_prefix, s, TxHeader, TxState};
use crate::ddb::clock::epoch_millis;
use crate::ddb::cond::{conditional, Cond};
use crate::ddb::conflict::{again_on_conflict, again_on_conflict_alive};
use crate::ddb::error::StoreError;
use crate::ddb::Cost;

/// Header creation: the `txId` idempotency point.
pub(super) const CONDITION_NEW: &str = "attribute_not_exists(#txpid)";
/// Key condition selecting a TX record's request parts.
const KEY_CONDITION_REQUEST_PARTS: &str = "#txpid = :txpid AND begins_with(#txppart, :txpprefix)";
/// Header writes: only from the version the writer read.
const CONDITION_VERSION: &str = "#txpver = :txpexpect";
/// A transition that also requires no sign of life since the header was read (a heartbeat
/// moves only `LastTouched`, not `Version`): the sweeper's rollback of a stale transaction.
const CONDITION_VERSION_UNTOUCHED: &str = "#txpver = :txpexpect AND #txpts = :txpread";
/// The heartbeat's update.
const UPDATE_TOUCH: &str = "SET #txpts = :txpts";
/// The heartbeat's condition: the attempt is still pending.
const CONDITION_ATTEMPT_PENDING: &str = "#txpst = :txppending AND #txpatt = :txpatt";

/// What creating a TX record found ([`TxTable::create`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Creation {
    /// The record did not exist: this is the new header (`pending`, attempt 1).
    Created(TxHeader),
    /// The `txId` is already recorded: its header as it is (the caller compares the stored
    /// requests before resuming it).
    Exists(TxHeader),
}

impl Creation {
    /// The header, new or existing.
    pub(crate) fn into_header(self) -> TxHeader {
        match self {
            Creation::Created(h) | Creation::Exists(h) => h,
        }
    }
}

/// What a conditional header write found ([`TxTable::transition`]).
///
/// Every header write is conditioned on the `Version` its writer read, so of two writers
/// starting from the same header exactly one moves it; the other learns it lost.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Transition {
    /// The condition held: the header as written (`ALL_NEW`). This writer moved the record
    /// (for a decision: this writer decided the transaction).
    Moved(TxHeader),
    /// Another writer moved the record first (or it was not in the state the write starts
    /// from): the header as it is, from the failed write's `ALL_OLD`.
    Lost(TxHeader),
    /// The condition failed and DynamoDB returned no item: the header must be read again to
    /// learn what happened.
    LostUnread,
}

impl Transition {
    /// Whether this writer moved the record.
    pub(crate) fn is_moved(&self) -> bool {
        matches!(self, Transition::Moved(_))
    }

    /// The header after the write, when known without a read.
    pub(crate) fn into_known(self) -> Option<TxHeader> {
        match self {
            Transition::Moved(h) | Transition::Lost(h) => Some(h),
            Transition::LostUnread => None,
        }
    }
}

/// Access to the TX table.
#[derive(Debug, Clone)]
pub(crate) struct TxTable {
    pub(super) client: Client,
    pub(super) table: String,
}

impl TxTable {
    /// The TX table `table`.
    pub(crate) fn new(client: Client, table: impl Into<String>) -> Self {
        TxTable {
            client,
            table: table.into(),
        }
    }

    /// Read a header (strongly consistent).
    pub(crate) async fn get(&self, tx_id: &str) -> Result<Option<TxHeader>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(header_key(tx_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        out.item.as_ref().map(TxHeader::try_from).transpose()
    }

    /// The requests JSON of a header (from the header or its parts).
    pub(crate) async fn requests_json(&self, header: &TxHeader) -> Result<String, StoreError> {
        if let Some(inline) = &header.inline_requests {
            return Ok(inline.clone());
        }
        let mut json = String::new();
        let mut start = None;
        let mut seen = 0u64;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression(KEY_CONDITION_REQUEST_PARTS)
                .expression_attribute_names("#txpid", ATTR_TX_ID)
                .expression_attribute_names("#txppart", ATTR_PART)
                .expression_attribute_values(":txpid", s(&header.tx_id))
                .expression_attribute_values(":txpprefix", s(parts_prefix(header.nonce.as_deref())))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| StoreError::from_sdk("Query", e))?;
            for item in page.items.unwrap_or_default() {
                seen += 1;
                json.push_str(&get_s(&item, ATTR_CHUNK).unwrap_or_default());
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        if seen != header.parts {
            return Err(StoreError::Inconsistent(format!(
                "TX {}: {} request parts found, {} expected",
                header.tx_id, seen, header.parts
            )));
        }
        Ok(json)
    }

    /// One conditional header transition: `SET`/`REMOVE` on top of `Version + 1`,
    /// conditioned on the version of `from` (see [`Transition`]). `LastTouched` changes only
    /// when `set` names it (a restart), so a decision costs no index write.
    pub(crate) async fn transition(
        &self,
        from: &TxHeader,
        set: &[(&str, AttributeValue)],
        remove: &[&str],
        cost: &Cost,
    ) -> Result<Transition, StoreError> {
        self.transition_if(from, set, remove, false, None, cost)
            .await
    }

    /// [`TxTable::transition`] of a pending attempt that holds locks (its commit): while the
    /// write is sent again through conflicts, a heartbeat ([`TxTable::touch_once`]) is
    /// written every `heartbeat_every` (`None`: heartbeats off).
    pub(crate) async fn transition_alive(
        &self,
        from: &TxHeader,
        set: &[(&str, AttributeValue)],
        heartbeat_every: Option<std::time::Duration>,
        cost: &Cost,
    ) -> Result<Transition, StoreError> {
        self.transition_if(from, set, &[], false, heartbeat_every, cost)
            .await
    }

    /// [`TxTable::transition`], also conditioned on `LastTouched` being what `from` read:
    /// lost to any heartbeat since (a transaction that showed a sign of life is not stale).
    pub(crate) async fn transition_untouched(
        &self,
        from: &TxHeader,
        set: &[(&str, AttributeValue)],
        cost: &Cost,
    ) -> Result<Transition, StoreError> {
        self.transition_if(from, set, &[], true, None, cost).await
    }

    async fn transition_if(
        &self,
        from: &TxHeader,
        set: &[(&str, AttributeValue)],
        remove: &[&str],
        untouched: bool,
        heartbeat_every: Option<std::time::Duration>,
        cost: &Cost,
    ) -> Result<Transition, StoreError> {
        let mut update = TransitionExpression::new(from, set, remove);
        let condition = if untouched {
            update
                .names
                .insert("#txpts".into(), ATTR_LAST_TOUCHED.into());
            update
                .values
                .insert(":txpread".into(), n(from.last_touched_ms));
            CONDITION_VERSION_UNTOUCHED
        } else {
            CONDITION_VERSION
        };
        let result = {
            let request = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(header_key(&from.tx_id)))
                .update_expression(update.expression)
                .condition_expression(condition)
                .set_expression_attribute_names(Some(update.names))
                .set_expression_attribute_values(Some(update.values))
                .return_values(ReturnValue::AllNew)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .return_consumed_capacity(ReturnConsumedCapacity::Indexes);
            let touched = &AtomicU64::new(epoch_millis());
            let keep_alive = move || async move {
                let Some(every) = heartbeat_every else {
                    return;
                };
                let every = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
                let now = epoch_millis();
                if now.saturating_sub(touched.load(Ordering::Relaxed)) >= every {
                    touched.store(now, Ordering::Relaxed);
                    self.touch_once(from, cost).await;
                }
            };
            again_on_conflict_alive(|| request.clone().send(), keep_alive).await
        };
        let result = conditional("UpdateItem", result);
        count(cost, &result, |out| out.consumed_capacity.as_ref());
        Ok(match result? {
            Cond::Done(out) => {
                let item = out.attributes.unwrap_or_default();
                Transition::Moved(TxHeader::try_from(&item)?)
            }
            Cond::Failed { old: Some(item) } => Transition::Lost(TxHeader::try_from(&item)?),
            Cond::Failed { old: None } => Transition::LostUnread,
        })
    }

    /// The heartbeat of a lock phase: `LastTouched = now`, conditioned on `from`'s attempt
    /// still being pending (not on `Version`: a heartbeat never makes a decision fail).
    /// `false`: the attempt was decided meanwhile. One write, plus two index writes (the
    /// index's range key moves).
    pub(crate) async fn touch(&self, from: &TxHeader, cost: &Cost) -> Result<bool, StoreError> {
        let result = {
            let request = self.touch_request(from);
            again_on_conflict(|| request.clone().send()).await
        };
        let result = conditional("UpdateItem", result);
        count(cost, &result, |out| out.consumed_capacity.as_ref());
        Ok(matches!(result?, Cond::Done(_)))
    }

    /// A heartbeat sent once, its answer ignored but its cost counted: the sign of life of a
    /// holder whose commit is being sent again (a failed heartbeat only leaves it silent).
    pub(crate) async fn touch_once(&self, from: &TxHeader, cost: &Cost) {
        let result = conditional("UpdateItem", self.touch_request(from).send().await);
        count(cost, &result, |out| out.consumed_capacity.as_ref());
    }

    fn touch_request(
        &self,
        from: &TxHeader,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        {
            self.client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(header_key(&from.tx_id)))
                .update_expression(UPDATE_TOUCH)
                .condition_expression(CONDITION_ATTEMPT_PENDING)
                .expression_attribute_names("#txpts", ATTR_LAST_TOUCHED)
                .expression_attribute_names("#txpst", ATTR_STATE)
                .expression_attribute_names("#txpatt", ATTR_ATTEMPT)
                .expression_attribute_values(":txpts", n(epoch_millis()))
                .expression_attribute_values(":txppending", s(TxState::Pending.as_str()))
                .expression_attribute_values(":txpatt", n(from.attempt))
                .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
        }
    }
}

/// The update expression of a header transition and its placeholders (`#txps<i>`/`:txps<i>`
/// for the `SET` list in order, `#txpr<i>` for the `REMOVE` list).
struct TransitionExpression {
    expression: String,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl TransitionExpression {
    fn new(from: &TxHeader, set: &[(&str, AttributeValue)], remove: &[&str]) -> Self {
        let mut names = HashMap::new();
        let mut values = HashMap::new();
        let mut assignments = vec!["#txpver = #txpver + :txpone".to_string()];
        names.insert("#txpver".to_string(), ATTR_VERSION.to_string());
        values.insert(":txpone".to_string(), n(1));
        values.insert(":txpexpect".to_string(), n(from.version));
        for (i, (name, value)) in set.iter().enumerate() {
            names.insert(format!("#txps{i}"), (*name).to_string());
            values.insert(format!(":txps{i}"), value.clone());
            assignments.push(format!("#txps{i} = :txps{i}"));
        }
        let mut expression = format!("SET {}", assignments.join(", "));
        if !remove.is_empty() {
            let removed: Vec<String> = remove
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    names.insert(format!("#txpr{i}"), (*name).to_string());
                    format!("#txpr{i}")
                })
                .collect();
            expression.push_str(&format!(" REMOVE {}", removed.join(", ")));
        }
        TransitionExpression {
            expression,
            names,
            values,
        }
    }
}

/// Count a conditional write: the capacity it consumed when applied, a request otherwise (a
/// refused condition or an error reports none).
pub(super) fn count<T>(
    cost: &Cost,
    result: &Result<Cond<T>, StoreError>,
    capacity: impl Fn(&T) -> Option<&ConsumedCapacity>,
) {
    match result {
        Ok(Cond::Done(out)) => cost.add(capacity(out)),
        Ok(Cond::Failed { .. }) | Err(_) => cost.add_failed(),
    }
}
