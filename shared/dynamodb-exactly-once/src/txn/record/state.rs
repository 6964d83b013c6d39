//! [`TxTable::get_state`]: a header's state without its commit tokens or requests.

use crate::txn::format::{
    ATTR_ATTEMPT, ATTR_DECIDER, ATTR_DECISION, ATTR_FAILED_REQUEST, ATTR_ISSUED_AT,
    ATTR_LAST_TOUCHED, ATTR_PART, ATTR_REASON, ATTR_REASON_DETAIL, ATTR_REQUESTS_HASH, ATTR_STATE,
    ATTR_TX_ID, ATTR_VERSION,
};
use std::collections::HashMap;

use super::{header_key, TxHeader};
use crate::ddb::error::StoreError;

use super::table::TxTable;

/// The attributes [`TxTable::get_state`] reads.
const PROJECTION_STATE: &str =
    "#txpid, #txppart, #txpst, #txpver, #txpatt, #txpdec, #txprsn, #txprsd, #txpfr, #txpby, #txpts, #txphash, #txpiss";

fn state_names() -> HashMap<String, String> {
    [
        ("#txpid", ATTR_TX_ID),
        ("#txppart", ATTR_PART),
        ("#txpst", ATTR_STATE),
        ("#txpver", ATTR_VERSION),
        ("#txpatt", ATTR_ATTEMPT),
        ("#txpdec", ATTR_DECISION),
        ("#txprsn", ATTR_REASON),
        ("#txprsd", ATTR_REASON_DETAIL),
        ("#txpfr", ATTR_FAILED_REQUEST),
        ("#txpby", ATTR_DECIDER),
        ("#txpts", ATTR_LAST_TOUCHED),
        ("#txphash", ATTR_REQUESTS_HASH),
        ("#txpiss", ATTR_ISSUED_AT),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

impl TxTable {
    /// Read a header's state only (strongly consistent): `State`, `Version`, `Attempt`,
    /// `Decision`, `Reason`, `FailedRequest`, `DecidedBy`, `LastTouched`, without the commit
    /// `Tokens` or inline `Requests`, which make a large transaction's header up to 350 KB.
    /// What a contender waiting on a pending holder reads at every wait step; its `tokens`
    /// are empty (read the whole header with [`Self::get`] when they matter: a commit).
    pub(crate) async fn get_state(&self, tx_id: &str) -> Result<Option<TxHeader>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(header_key(tx_id)))
            .consistent_read(true)
            .projection_expression(PROJECTION_STATE)
            .set_expression_attribute_names(Some(state_names()))
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        out.item.as_ref().map(TxHeader::try_from).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_projection_names_every_placeholder_and_leaves_tokens_and_requests_out() {
        let names = state_names();
        for placeholder in PROJECTION_STATE.split(", ") {
            assert!(names.contains_key(placeholder), "{placeholder}");
        }
        let read: Vec<&str> = names.values().map(String::as_str).collect();
        assert!(!read.contains(&super::super::ATTR_TOKENS));
        assert!(!read.contains(&super::super::ATTR_REQUESTS));
        for needed in [ATTR_TX_ID, ATTR_STATE, ATTR_VERSION] {
            assert!(read.contains(&needed), "TxHeader needs {needed}");
        }
    }
}
