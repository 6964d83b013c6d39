//! The in-place upgrade from the scheduled roll-up of earlier versions: its checkpoints (one
//! item per shard in the journal table's `~rollup` partition) say which records it applied.
//!
//! The mapping starts at `TRIM_HORIZON` and delivers every record the stream still holds,
//! those the scheduled roll-up applied included. Most are turned away by the watermarks it
//! wrote, but it removed a done shard's watermarks 20 minutes after the shard was done, while
//! the stream keeps a record 24 hours: a batch's records at or before the shard's saved
//! checkpoint (every record of a shard it finished) are dropped as duplicates.
//!
//! The read is bounded: the scheduled roll-up saved its checkpoints at least hourly while it
//! ran, so once [`UPGRADE_SECS`] have passed since the latest one it saved, no record it
//! applied can still be delivered and nothing is read any more. A process learns that latest
//! time with one `Query` of the partition (none saved: a stack that never ran it, nothing
//! read again); within the period each batch reads its shard's checkpoint (one consistent
//! `GetItem`), so that a scheduled run still going during the deploy is seen. Every process
//! decides from the same items: what it keeps in memory only saves the `Query`.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::entry::{JOURNAL_KEY_ATTRIBUTE, JOURNAL_SORT_ATTRIBUTE};
use super::event::{Seq, ROLLUP_PARTITION, STREAM_RETENTION_SECS};
use super::Rollup;
use crate::ddb::{Item, StoreError};

/// How long after the scheduled roll-up's last checkpoint its records may still be delivered:
/// the stream's 24 hours, plus the hour between two of its saves, plus an hour of clocks.
pub(super) const UPGRADE_SECS: u64 = STREAM_RETENTION_SECS + 2 * 3600;

const SEQ: &str = "seq";
const DONE: &str = "done";
const SAVED: &str = "saved";

/// Where the scheduled roll-up had applied a shard to.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Checkpoint {
    /// The last record applied (and every one before it).
    pub(super) seq: Option<Seq>,
    /// The shard was read to its end: every record of it applied.
    pub(super) done: bool,
    /// When it was saved (epoch seconds, the scheduled roll-up's clock).
    pub(super) saved_secs: u64,
}

impl Checkpoint {
    /// Whether the scheduled roll-up applied the record `seq` of this checkpoint's shard.
    pub(super) fn applied(&self, seq: Seq) -> bool {
        self.done || self.seq.is_some_and(|upto| seq <= upto)
    }
}

impl Rollup {
    /// The scheduled roll-up's checkpoint of `shard` while its records may still be delivered
    /// (`None`: none, or no longer needed).
    pub(super) async fn scheduled_checkpoint(
        &self,
        shard: &str,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let now = self.clock.now_secs();
        if self.upgrade_until().await? <= now {
            return Ok(None);
        }
        let out = self
            .ddb
            .get_item()
            .table_name(&self.config.journal_table)
            .set_key(Some(key(shard)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        let found = out.item.as_ref().map(checkpoint);
        if let Some(c) = &found {
            self.extend_upgrade(c.saved_secs);
        }
        Ok(found)
    }

    /// Until when (epoch seconds) the scheduled roll-up's checkpoints are read: [`UPGRADE_SECS`]
    /// after the latest one saved (0: none saved).
    async fn upgrade_until(&self) -> Result<u64, StoreError> {
        if let Some(until) = *self.upgrade.lock().unwrap_or_else(|p| p.into_inner()) {
            return Ok(until);
        }
        let latest = self.latest_saved().await?;
        let until = latest.map_or(0, |s| s.saturating_add(UPGRADE_SECS));
        let mut known = self.upgrade.lock().unwrap_or_else(|p| p.into_inner());
        let until = known.map_or(until, |k| k.max(until));
        *known = Some(until);
        Ok(until)
    }

    fn extend_upgrade(&self, saved_secs: u64) {
        let mut known = self.upgrade.lock().unwrap_or_else(|p| p.into_inner());
        let until = saved_secs.saturating_add(UPGRADE_SECS);
        *known = Some(known.map_or(until, |k| k.max(until)));
    }

    /// The latest save time of the scheduled roll-up's items (one consistent `Query`,
    /// paginated).
    async fn latest_saved(&self) -> Result<Option<u64>, StoreError> {
        let mut latest = None;
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .ddb
                .query()
                .table_name(&self.config.journal_table)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", JOURNAL_KEY_ATTRIBUTE)
                .expression_attribute_values(":pk", AttributeValue::S(ROLLUP_PARTITION.into()))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| StoreError::from_sdk("Query", e))?;
            for item in out.items() {
                // The pass record has no `saved`, only its time in `complete` (ms).
                let saved = number(item, SAVED).or_else(|| number(item, "complete").map(|ms| ms / 1000));
                latest = latest.max(saved);
            }
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(latest),
            }
        }
    }
}

fn key(sort: &str) -> Item {
    HashMap::from([
        (
            JOURNAL_KEY_ATTRIBUTE.to_string(),
            AttributeValue::S(ROLLUP_PARTITION.into()),
        ),
        (
            JOURNAL_SORT_ATTRIBUTE.to_string(),
            AttributeValue::S(sort.into()),
        ),
    ])
}

fn number(item: &Item, name: &str) -> Option<u64> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse().ok(),
        _ => None,
    }
}

fn checkpoint(item: &Item) -> Checkpoint {
    Checkpoint {
        seq: match item.get(SEQ) {
            Some(AttributeValue::S(seq)) => Seq::parse(seq),
            _ => None,
        },
        done: matches!(item.get(DONE), Some(AttributeValue::Bool(true))),
        saved_secs: number(item, SAVED).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_covers_its_records_up_to_its_sequence_number_or_all_once_done() {
        let item = HashMap::from([
            (SEQ.to_string(), AttributeValue::S("200".into())),
            (DONE.to_string(), AttributeValue::Bool(false)),
            (SAVED.to_string(), AttributeValue::N("1800000000".into())),
        ]);
        let c = checkpoint(&item);
        assert_eq!(c.saved_secs, 1_800_000_000);
        let seq = |s: &str| Seq::parse(s).expect("digits");
        assert!(c.applied(seq("200")) && c.applied(seq("99")) && !c.applied(seq("201")));
        let done = Checkpoint { done: true, ..c };
        assert!(done.applied(seq("999")));
    }
}
