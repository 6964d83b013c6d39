//! The TX record: one header item plus, for large request lists, part items, all under the
//! transaction's partition key (hash `TxId` + range `Part`), so there is no size ceiling.
//!
//! ```text
//! TxId=t-1  Part=#         State, Version, Attempt, Requests | Parts, Tokens, Reason, FailedRequest,
//!                          Decision, SweepKey (GSI hash), LastTouched (GSI range, epoch ms)
//! TxId=t-1  Part=p#00001   Chunk (requests JSON, bytes 0..PART_BYTES)
//! TxId=t-1  Part=p#00002   Chunk (…)
//! ```
//!
//! Parts are written before the header, so a header that exists always has all its parts; the
//! header is created with `attribute_not_exists(TxId)` (the `txId` idempotency point).

use std::collections::BTreeMap;

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use crate::ddb::clock::epoch_seconds;
use crate::ddb::error::StoreError;
use crate::ddb::item::Item;

use super::Cost;

/// Partition key of the TX table.
pub const ATTR_TX_ID: &str = "TxId";
/// Sort key of the TX table.
pub const ATTR_PART: &str = "Part";
/// Sort key value of the header item.
pub const HEADER_PART: &str = "#";
/// Sort key prefix of request part items.
pub const REQUEST_PART_PREFIX: &str = "p#";
/// `pending` | `committed` | `rolled_back` | `completed`.
pub const ATTR_STATE: &str = "State";
/// Incremented by every header write; every header write is conditioned on it.
pub const ATTR_VERSION: &str = "Version";
/// Restart counter: an attempt aborted by contention or by the sweeper is retried under the
/// same `txId` with the next attempt; locks name `txId#attempt`.
pub const ATTR_ATTEMPT: &str = "Attempt";
/// The requests (canonical JSON) when they fit in the header.
pub const ATTR_REQUESTS: &str = "Requests";
/// Number of part items holding the requests when they do not fit.
pub const ATTR_PARTS: &str = "Parts";
/// A part's chunk of the requests JSON.
pub const ATTR_CHUNK: &str = "Chunk";
/// At commit: request index → version token its item got from this attempt's lock write.
pub const ATTR_TOKENS: &str = "Tokens";
/// Why a transaction rolled back: `condition_failed`, `invalid_request`, `conflict`,
/// `abandoned`.
pub const ATTR_REASON: &str = "Reason";
/// The request whose condition failed (or that DynamoDB rejected).
pub const ATTR_FAILED_REQUEST: &str = "FailedRequest";
/// Once completed: `committed` or `rolled_back`.
pub const ATTR_DECISION: &str = "Decision";
/// Sparse GSI hash key: `open` until completed, then `done` (until the sweeper deletes it).
pub const ATTR_SWEEP_KEY: &str = "SweepKey";
/// GSI range key: epoch milliseconds of the last state change.
pub const ATTR_LAST_TOUCHED: &str = "LastTouched";
/// TTL backstop on part items (epoch seconds).
pub const ATTR_EXPIRES_AT: &str = "ExpiresAt";
/// The sweeper's index.
pub const SWEEP_INDEX: &str = "Sweep";
/// `SweepKey` of transactions not completed.
pub const SWEEP_OPEN: &str = "open";
/// `SweepKey` of completed transactions kept for idempotency.
pub const SWEEP_DONE: &str = "done";
/// Largest requests JSON (plus the room its commit tokens will take) kept inline in the
/// header; larger lists go to parts.
pub const INLINE_REQUEST_BYTES: usize = 300 * 1024;
/// Room one commit token takes in the header (`Tokens` entry: index + 32-hex token + overhead).
pub const TOKEN_ENTRY_BYTES: usize = 48;
/// Most requests per transaction: the commit tokens of all items must fit in the header.
pub const MAX_REQUESTS: usize = (350 * 1024) / TOKEN_ENTRY_BYTES;
/// Bytes of requests JSON per part item.
pub const PART_BYTES: usize = 350 * 1024;
/// Part items expire (TTL backstop) this long after they are written.
pub const PART_TTL_SECONDS: u64 = 90 * 24 * 3600;

/// Header creation: the `txId` idempotency point.
const CONDITION_NEW: &str = "attribute_not_exists(#txpid)";
/// Key condition selecting a TX record's request parts.
const KEY_CONDITION_REQUEST_PARTS: &str = "#txpid = :txpid AND begins_with(#txppart, :txpprefix)";
/// Header writes: only from the version the writer read.
const CONDITION_VERSION: &str = "#txpver = :txpexpect";
/// Deleting a record: only once completed, and only the version the deleter read.
const CONDITION_DELETE_COMPLETED: &str = "#txpst = :txpdone AND #txpver = :txpver";

/// The states of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxState {
    /// Locking; nothing decided.
    Pending,
    /// Decided: every change stays (the commit point).
    Committed,
    /// Decided: every change is undone.
    RolledBack,
    /// Every item finalized; the record is kept for idempotency until the retention expires.
    Completed,
}

impl TxState {
    /// The stored value.
    pub fn as_str(self) -> &'static str {
        match self {
            TxState::Pending => "pending",
            TxState::Committed => "committed",
            TxState::RolledBack => "rolled_back",
            TxState::Completed => "completed",
        }
    }

    /// Parse a stored value.
    pub fn parse(s: &str) -> Option<TxState> {
        match s {
            "pending" => Some(TxState::Pending),
            "committed" => Some(TxState::Committed),
            "rolled_back" => Some(TxState::RolledBack),
            "completed" => Some(TxState::Completed),
            _ => None,
        }
    }
}

/// Why a transaction rolled back.
pub mod reason {
    /// A request's `ConditionExpression` failed: final.
    pub const CONDITION_FAILED: &str = "condition_failed";
    /// DynamoDB rejected a request as invalid: final.
    pub const INVALID_REQUEST: &str = "invalid_request";
    /// Another coordinator needed an item it held: the attempt is retried.
    pub const CONFLICT: &str = "conflict";
    /// The sweeper found it stale: the attempt is retried if the message comes again.
    pub const ABANDONED: &str = "abandoned";
    /// A locked read released its locks: final.
    pub const READ: &str = "read";

    /// Whether a rollback for this reason ends the transaction (otherwise it may restart).
    pub fn is_final(reason: &str) -> bool {
        reason == CONDITION_FAILED || reason == INVALID_REQUEST || reason == READ
    }
}

/// A TX record header as read.
#[derive(Debug, Clone, PartialEq)]
pub struct TxHeader {
    /// The transaction id.
    pub tx_id: String,
    /// The state.
    pub state: TxState,
    /// Optimistic-concurrency version.
    pub version: u64,
    /// The attempt.
    pub attempt: u64,
    /// Inline requests JSON, when not in parts.
    pub inline_requests: Option<String>,
    /// Part count.
    pub parts: u64,
    /// Request index → token (set at commit).
    pub tokens: BTreeMap<usize, String>,
    /// Rollback reason.
    pub reason: Option<String>,
    /// Failed request index.
    pub failed_request: Option<usize>,
    /// Decision once completed.
    pub decision: Option<TxState>,
    /// Last state change, epoch ms.
    pub last_touched_ms: u64,
}

impl TxHeader {
    /// The lock owner string of this attempt: `txId#attempt`.
    pub fn owner(&self) -> String {
        owner(&self.tx_id, self.attempt)
    }

    /// The decision: the state, or the recorded decision once completed.
    pub fn decision(&self) -> Option<TxState> {
        match self.state {
            TxState::Committed | TxState::RolledBack => Some(self.state),
            TxState::Completed => self.decision,
            TxState::Pending => None,
        }
    }
}

/// Lock owner string.
pub fn owner(tx_id: &str, attempt: u64) -> String {
    format!("{tx_id}#{attempt}")
}

/// Split an owner string into tx id and attempt.
pub fn parse_owner(owner: &str) -> Option<(&str, u64)> {
    let (tx, attempt) = owner.rsplit_once('#')?;
    Some((tx, attempt.parse().ok()?))
}

/// Epoch milliseconds now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// The header's key.
pub fn header_key(tx_id: &str) -> Item {
    Item::from([
        (ATTR_TX_ID.to_string(), s(tx_id)),
        (ATTR_PART.to_string(), s(HEADER_PART)),
    ])
}

fn part_sort_key(i: u64) -> String {
    format!("{REQUEST_PART_PREFIX}{i:05}")
}

fn get_s(item: &Item, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

fn get_n(item: &Item, name: &str) -> Option<u64> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

/// Decode a header item.
pub fn decode_header(item: &Item) -> Result<TxHeader, StoreError> {
    let bad = |what: &str| StoreError::Inconsistent(format!("TX header: {what}"));
    let tx_id = get_s(item, ATTR_TX_ID).ok_or_else(|| bad("no TxId"))?;
    let state = get_s(item, ATTR_STATE)
        .and_then(|s| TxState::parse(&s))
        .ok_or_else(|| bad("bad State"))?;
    let mut tokens = BTreeMap::new();
    if let Some(AttributeValue::M(m)) = item.get(ATTR_TOKENS) {
        for (k, v) in m {
            let i: usize = k.parse().map_err(|_| bad("bad Tokens key"))?;
            tokens.insert(i, v.as_s().map_err(|_| bad("bad token"))?.clone());
        }
    }
    Ok(TxHeader {
        tx_id,
        state,
        version: get_n(item, ATTR_VERSION).ok_or_else(|| bad("no Version"))?,
        attempt: get_n(item, ATTR_ATTEMPT).unwrap_or(1),
        inline_requests: get_s(item, ATTR_REQUESTS),
        parts: get_n(item, ATTR_PARTS).unwrap_or(0),
        tokens,
        reason: get_s(item, ATTR_REASON),
        failed_request: get_n(item, ATTR_FAILED_REQUEST).and_then(|v| usize::try_from(v).ok()),
        decision: get_s(item, ATTR_DECISION).and_then(|s| TxState::parse(&s)),
        last_touched_ms: get_n(item, ATTR_LAST_TOUCHED).unwrap_or(0),
    })
}

/// Access to the TX table.
#[derive(Debug, Clone)]
pub struct TxTable {
    client: Client,
    table: String,
}

impl TxTable {
    /// The TX table `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        TxTable {
            client,
            table: table.into(),
        }
    }

    /// The table name.
    pub fn name(&self) -> &str {
        &self.table
    }

    /// Read a header (strongly consistent).
    pub async fn get(&self, tx_id: &str) -> Result<Option<TxHeader>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(header_key(tx_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        out.item.as_ref().map(decode_header).transpose()
    }

    /// The requests JSON of a header (from the header or its parts).
    pub async fn requests_json(&self, header: &TxHeader) -> Result<String, StoreError> {
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
                .expression_attribute_values(":txpprefix", s(REQUEST_PART_PREFIX))
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

    /// Create the record (parts first, then the header with `attribute_not_exists`). Returns
    /// the existing header when the id is taken.
    pub async fn create(
        &self,
        tx_id: &str,
        requests_json: &str,
        requests: usize,
        cost: &Cost,
    ) -> Result<Result<TxHeader, TxHeader>, StoreError> {
        let now = now_ms();
        let mut header = header_key(tx_id);
        header.insert(ATTR_STATE.into(), s(TxState::Pending.as_str()));
        header.insert(ATTR_VERSION.into(), n(1));
        header.insert(ATTR_ATTEMPT.into(), n(1));
        header.insert(ATTR_SWEEP_KEY.into(), s(SWEEP_OPEN));
        header.insert(ATTR_LAST_TOUCHED.into(), n(now));
        let mut parts = 0u64;
        if requests_json.len() + requests * TOKEN_ENTRY_BYTES <= INLINE_REQUEST_BYTES {
            header.insert(ATTR_REQUESTS.into(), s(requests_json));
        } else {
            let expires = epoch_seconds() + PART_TTL_SECONDS;
            for chunk in chunks(requests_json, PART_BYTES) {
                parts += 1;
                let mut item = Item::from([
                    (ATTR_TX_ID.to_string(), s(tx_id)),
                    (ATTR_PART.to_string(), s(part_sort_key(parts))),
                    (ATTR_CHUNK.to_string(), s(chunk)),
                    (ATTR_EXPIRES_AT.to_string(), n(expires)),
                ]);
                item.shrink_to_fit();
                // Unconditional: a part only ever holds this chunk of this id's requests.
                let out = self
                    .client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .return_consumed_capacity(
                        aws_sdk_dynamodb::types::ReturnConsumedCapacity::Total,
                    )
                    .send()
                    .await
                    .map_err(|e| StoreError::from_sdk("PutItem", e))?;
                cost.add(out.consumed_capacity.as_ref());
            }
            header.insert(ATTR_PARTS.into(), n(parts));
        }
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(header.clone()))
            .condition_expression(CONDITION_NEW)
            .expression_attribute_names("#txpid", ATTR_TX_ID)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(aws_sdk_dynamodb::types::ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => {
                cost.add(out.consumed_capacity.as_ref());
                Ok(Ok(decode_header(&header)?))
            }
            Err(err) => {
                cost.add_failed();
                let existing = match err.as_service_error() {
                    Some(PutItemError::ConditionalCheckFailedException(e)) => e.item().cloned(),
                    _ => return Err(StoreError::from_sdk("PutItem", err)),
                };
                match existing {
                    Some(item) => Ok(Err(decode_header(&item)?)),
                    None => match self.get(tx_id).await? {
                        Some(h) => Ok(Err(h)),
                        None => Err(StoreError::Inconsistent(format!(
                            "TX {tx_id}: creation refused but no header found"
                        ))),
                    },
                }
            }
        }
    }

    /// One conditional header transition: `SET`/`REMOVE` on top of `Version + 1` and
    /// `LastTouched`, conditioned on the expected version (and state). Returns `None` when the
    /// condition failed (another coordinator moved the record first), with the current header.
    pub async fn transition(
        &self,
        from: &TxHeader,
        set: &[(&str, AttributeValue)],
        remove: &[&str],
        cost: &Cost,
    ) -> Result<Result<TxHeader, Option<TxHeader>>, StoreError> {
        let now = now_ms();
        let mut names = std::collections::HashMap::new();
        let mut values = std::collections::HashMap::new();
        let mut assignments = vec![
            "#txpver = #txpver + :txpone".to_string(),
            "#txpts = :txpts".to_string(),
        ];
        names.insert("#txpver".to_string(), ATTR_VERSION.to_string());
        names.insert("#txpts".to_string(), ATTR_LAST_TOUCHED.to_string());
        values.insert(":txpone".to_string(), n(1));
        values.insert(":txpts".to_string(), n(now));
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
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(header_key(&from.tx_id)))
            .update_expression(expression)
            .condition_expression(CONDITION_VERSION)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(aws_sdk_dynamodb::types::ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => {
                cost.add(out.consumed_capacity.as_ref());
                let item = out.attributes.unwrap_or_default();
                Ok(Ok(decode_header(&item)?))
            }
            Err(err) => {
                cost.add_failed();
                match err.as_service_error() {
                    Some(
                        aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(e),
                    ) => Ok(Err(e.item().map(decode_header).transpose()?)),
                    _ => Err(StoreError::from_sdk("UpdateItem", err)),
                }
            }
        }
    }

    /// Delete a completed record (header conditioned on `completed`, then its parts).
    pub async fn delete_completed(
        &self,
        header: &TxHeader,
        cost: &Cost,
    ) -> Result<bool, StoreError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(header_key(&header.tx_id)))
            .condition_expression(CONDITION_DELETE_COMPLETED)
            .expression_attribute_names("#txpst", ATTR_STATE)
            .expression_attribute_names("#txpver", ATTR_VERSION)
            .expression_attribute_values(":txpdone", s(TxState::Completed.as_str()))
            .expression_attribute_values(":txpver", n(header.version))
            .return_consumed_capacity(aws_sdk_dynamodb::types::ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => cost.add(out.consumed_capacity.as_ref()),
            Err(err) => {
                cost.add_failed();
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception())
                {
                    return Ok(false);
                }
                return Err(StoreError::from_sdk("DeleteItem", err));
            }
        }
        for i in 1..=header.parts {
            let out = self
                .client
                .delete_item()
                .table_name(&self.table)
                .key(ATTR_TX_ID, s(&header.tx_id))
                .key(ATTR_PART, s(part_sort_key(i)))
                .return_consumed_capacity(aws_sdk_dynamodb::types::ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(|e| StoreError::from_sdk("DeleteItem", e))?;
            cost.add(out.consumed_capacity.as_ref());
        }
        Ok(true)
    }
}

/// Split a string into chunks of at most `max` bytes on character boundaries.
fn chunks(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(max);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (head, tail) = rest.split_at(end);
        out.push(head);
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_char_boundaries() {
        let text = "aé".repeat(10);
        let parts = chunks(&text, 4);
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|p| p.len() <= 4));
    }

    #[test]
    fn owner_round_trips() {
        assert_eq!(parse_owner(&owner("t-1", 3)), Some(("t-1", 3)));
    }
}
