//! Headers created already decided and completed: the fast path's record
//! ([`super::super::fast`]), written in the same `TransactWriteItems` as the transaction's
//! changes when it commits, or alone when a request's condition failed (a failed transaction
//! stays failed on redelivery).
//!
//! Such a header is never in the sweep index (no `SweepKey`: nothing is locked, nothing is
//! left to finish) and expires through TTL after the retention, like every completed header.
//! It keeps no requests, only their hash: a redelivery is told apart from a reused `txId` by
//! the hash, and nothing ever needs the requests of a transaction that locked nothing.

use crate::txn::format::{
    ATTR_ATTEMPT, ATTR_DECIDER, ATTR_DECISION, ATTR_EXPIRES_AT, ATTR_FAILED_REQUEST,
    ATTR_ISSUED_AT, ATTR_LAST_TOUCHED, ATTR_NONCE, ATTR_REASON, ATTR_REASON_DETAIL,
    ATTR_REQUESTS_HASH, ATTR_STATE, ATTR_VERSION,
};
use std::time::Duration;

use super::{header_key, n, s, transaction_hash, RollbackReason, TxState};
use crate::ddb::clock::epoch_millis;
use crate::ddb::error::StoreError;
use crate::ddb::item::Item;
use crate::ddb::Cost;

use super::table::{Creation, TxTable};

/// A completed record's `ExpiresAt` (epoch seconds): the retention after its completion
/// (`now_ms`), or after its `issuedAt` when that is later (up to the allowed skew ahead of
/// the clock): a message's age counts from `issuedAt`, so the record outlives every copy that
/// is not yet too old.
pub(crate) fn expires_at(now_ms: u64, issued_at_ms: Option<u64>, retain: Duration) -> u64 {
    let from_ms = now_ms.max(issued_at_ms.unwrap_or(0));
    from_ms.div_ceil(1000).saturating_add(retain.as_secs())
}

/// A header created completed: committed, or rolled back for a final reason.
#[derive(Debug, Clone)]
pub(crate) struct Decided<'a> {
    /// The transaction.
    pub tx_id: &'a str,
    /// The canonical requests JSON (only its hash is kept).
    pub requests_json: &'a str,
    /// The message's `issuedAt` (hashed with the requests).
    pub issued_at_ms: Option<u64>,
    /// The run deciding it (`DecidedBy`).
    pub decider: &'a str,
    /// `None`: committed; else why it rolled back and which request.
    pub rolled_back: Option<(RollbackReason, usize)>,
    /// How long the record is kept (`ExpiresAt`).
    pub retain: Duration,
}

impl Decided<'_> {
    /// The header item (about 250 bytes: one write unit, two in a transaction).
    pub(crate) fn item(&self) -> Item {
        let now_ms = epoch_millis();
        let expires = expires_at(now_ms, self.issued_at_ms, self.retain);
        let nonce = hex::encode(rand::random::<u128>().to_be_bytes());
        let decision = match self.rolled_back {
            None => TxState::Committed,
            Some(_) => TxState::RolledBack,
        };
        let mut item = header_key(self.tx_id);
        item.insert(ATTR_NONCE.into(), s(nonce));
        item.insert(
            ATTR_REQUESTS_HASH.into(),
            s(transaction_hash(self.requests_json, self.issued_at_ms)),
        );
        if let Some(at) = self.issued_at_ms {
            item.insert(ATTR_ISSUED_AT.into(), n(at));
        }
        item.insert(ATTR_STATE.into(), s(TxState::Completed.as_str()));
        item.insert(ATTR_DECISION.into(), s(decision.as_str()));
        item.insert(ATTR_VERSION.into(), n(1));
        item.insert(ATTR_ATTEMPT.into(), n(1));
        item.insert(ATTR_DECIDER.into(), s(self.decider));
        item.insert(ATTR_LAST_TOUCHED.into(), n(now_ms));
        item.insert(ATTR_EXPIRES_AT.into(), n(expires));
        if let Some((reason, request)) = &self.rolled_back {
            let (stored, detail) = reason.stored();
            item.insert(ATTR_REASON.into(), s(stored));
            if let Some(detail) = detail {
                item.insert(ATTR_REASON_DETAIL.into(), s(detail));
            }
            item.insert(ATTR_FAILED_REQUEST.into(), n(request));
        }
        item
    }
}

impl TxTable {
    /// Create `decided`'s header alone (`attribute_not_exists(TxId)`): the record of a
    /// transaction that failed without changing anything. [`Creation::Exists`] when another
    /// delivery recorded the `txId` first.
    pub(crate) async fn create_decided(
        &self,
        decided: &Decided<'_>,
        cost: &Cost,
    ) -> Result<Creation, StoreError> {
        self.put_header(decided.tx_id, decided.item(), cost).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::record::TxHeader;

    /// Review X7: a message's age is counted from `issuedAt`, which may be up to 5 minutes
    /// ahead of the clock; the record must outlive it by the retention from there, else a
    /// redriven copy could apply again in between.
    #[test]
    fn a_record_issued_ahead_of_the_clock_expires_the_retention_after_its_issue_time() {
        let ahead_ms = epoch_millis() + 240_000;
        let d = Decided {
            tx_id: "t-ahead",
            requests_json: "[]",
            issued_at_ms: Some(ahead_ms),
            decider: "run",
            rolled_back: None,
            retain: Duration::from_secs(60),
        };
        let item = d.item();
        let expires = match item.get(ATTR_EXPIRES_AT) {
            Some(aws_sdk_dynamodb::types::AttributeValue::N(n)) => n.parse::<u64>().ok(),
            _ => None,
        };
        assert!(
            expires >= Some(ahead_ms.div_ceil(1000) + 60),
            "expires at {expires:?}, issued at {ahead_ms} ms"
        );
    }

    #[test]
    fn a_decided_header_is_completed_outside_the_sweep_index() {
        let d = Decided {
            tx_id: "t-1",
            requests_json: "[]",
            issued_at_ms: None,
            decider: "run",
            rolled_back: Some((RollbackReason::ConditionFailed, 1)),
            retain: Duration::from_secs(60),
        };
        let item = d.item();
        assert!(!item.contains_key(crate::txn::format::ATTR_SWEEP_KEY));
        let header = TxHeader::try_from(&item).expect("a header");
        assert_eq!(header.state, TxState::Completed);
        assert_eq!(header.decision(), Some(TxState::RolledBack));
        assert_eq!(header.reason, Some(RollbackReason::ConditionFailed));
        assert_eq!(header.failed_request, Some(1));
        assert_eq!(header.decider.as_deref(), Some("run"));
        assert_eq!(
            header.requests_hash,
            Some(super::super::requests_hash("[]"))
        );
    }
}
