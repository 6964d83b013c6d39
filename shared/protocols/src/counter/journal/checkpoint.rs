//! The roll-up's checkpoints: one item per shard (where it was read to, whether it is done,
//! when its last record read was created, which stream lists it) and one record of the last complete pass, all in
//! one partition of the journal table, so that one `Query` reads them.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::entry::{JOURNAL_KEY_ATTRIBUTE, JOURNAL_SORT_ATTRIBUTE, TTL_ATTRIBUTE};
use super::event::{PASS_SORT, ROLLUP_PARTITION};
use super::Rollup;
use crate::ddb::{Cost, Item, StoreError};

/// The record of the last complete pass is saved at most this often.
const PASS_EVERY_MS: u64 = 3600 * 1000;

const SEQ: &str = "seq";
const DONE: &str = "done";
const CREATED: &str = "created";
const SAVED: &str = "saved";
const LOST: &str = "lost";
const COMPLETE: &str = "complete";
const STREAM: &str = "stream";

/// Where a shard was read to.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Checkpoint {
    /// The last sequence number read (as the stream spells it).
    pub(super) seq: Option<String>,
    /// The shard is closed and read to its end, every key of it applied.
    pub(super) done: bool,
    /// When the last record read was created (epoch seconds, DynamoDB's approximation).
    pub(super) created_secs: Option<u64>,
    /// When this checkpoint was saved (epoch seconds, the roll-up's clock).
    pub(super) saved_secs: u64,
    /// The shard left the stream before it was read to its end: its gap was reported.
    pub(super) lost: bool,
    /// When the journal's TTL deletes this checkpoint (a done shard's, once its shard has
    /// left the stream).
    pub(super) ttl_secs: Option<u64>,
    /// The stream (ARN) that lists the shard (`None`: saved by a version that did not say,
    /// taken to be the latest).
    pub(super) stream: Option<String>,
}

/// Every checkpoint of the journal, and the start of the last pass that read every shard to
/// the point where it began (epoch ms).
#[derive(Debug, Clone, Default)]
pub(super) struct Checkpoints {
    pub(super) shards: HashMap<String, Checkpoint>,
    pub(super) complete_ms: Option<u64>,
}

impl Rollup {
    /// The scheduled roll-up's saved checkpoint of `shard`, if any (one strongly consistent
    /// `GetItem`): every record of the shard at or before it was applied (or dead-lettered).
    pub(super) async fn scheduled_checkpoint(
        &self,
        shard: &str,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.config.journal_table)
            .set_key(Some(key(shard)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        Ok(out.item.as_ref().map(checkpoint))
    }

    /// Read every checkpoint (one strongly consistent `Query`, paginated).
    pub(super) async fn checkpoints(&self) -> Result<Checkpoints, StoreError> {
        let mut found = Checkpoints::default();
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
                let Some(AttributeValue::S(sk)) = item.get(JOURNAL_SORT_ATTRIBUTE) else {
                    continue;
                };
                if sk == PASS_SORT {
                    found.complete_ms = number(item, COMPLETE);
                    continue;
                }
                found.shards.insert(sk.clone(), checkpoint(item));
            }
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        Ok(found)
    }

    /// Save `checkpoints` (unconditional puts in `BatchWriteItem`s: a checkpoint only says
    /// where to start reading; the watermarks keep the counts exact).
    pub(super) async fn save_checkpoints(
        &self,
        checkpoints: Vec<(String, Checkpoint)>,
        complete_ms: Option<u64>,
        cost: &Cost,
    ) -> Result<(), StoreError> {
        let mut items: Vec<Item> = checkpoints
            .iter()
            .map(|(shard, c)| checkpoint_item(shard, c))
            .collect();
        if let Some(ms) = complete_ms {
            let mut pass = key(PASS_SORT);
            pass.insert(COMPLETE.into(), AttributeValue::N(ms.to_string()));
            items.push(pass);
        }
        crate::ddb::batch::put_all(&self.ddb, &self.config.journal_table, items, cost).await
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

fn flag(item: &Item, name: &str) -> bool {
    matches!(item.get(name), Some(AttributeValue::Bool(true)))
}

fn checkpoint(item: &Item) -> Checkpoint {
    Checkpoint {
        seq: match item.get(SEQ) {
            Some(AttributeValue::S(seq)) => Some(seq.clone()),
            _ => None,
        },
        done: flag(item, DONE),
        created_secs: number(item, CREATED),
        saved_secs: number(item, SAVED).unwrap_or(0),
        lost: flag(item, LOST),
        ttl_secs: number(item, TTL_ATTRIBUTE),
        stream: match item.get(STREAM) {
            Some(AttributeValue::S(arn)) => Some(arn.clone()),
            _ => None,
        },
    }
}

fn checkpoint_item(shard: &str, c: &Checkpoint) -> Item {
    let mut item = key(shard);
    if let Some(seq) = &c.seq {
        item.insert(SEQ.into(), AttributeValue::S(seq.clone()));
    }
    if let Some(created) = c.created_secs {
        item.insert(CREATED.into(), AttributeValue::N(created.to_string()));
    }
    item.insert(DONE.into(), AttributeValue::Bool(c.done));
    item.insert(LOST.into(), AttributeValue::Bool(c.lost));
    item.insert(SAVED.into(), AttributeValue::N(c.saved_secs.to_string()));
    if let Some(stream) = &c.stream {
        item.insert(STREAM.into(), AttributeValue::S(stream.clone()));
    }
    if let Some(ttl) = c.ttl_secs {
        item.insert(TTL_ATTRIBUTE.into(), AttributeValue::N(ttl.to_string()));
    }
    item
}

/// The complete-pass record to save (epoch ms of the run's start), hourly: a `complete` run
/// whose stored record is an hour old or missing; noted in `checkpoints`.
pub(super) fn pass_record(complete: bool, checkpoints: &mut Checkpoints, started_ms: u64) -> Option<u64> {
    let stale = checkpoints
        .complete_ms
        .is_none_or(|at| at.saturating_add(PASS_EVERY_MS) <= started_ms);
    let pass_ms = (complete && stale).then_some(started_ms);
    if pass_ms.is_some() {
        checkpoints.complete_ms = pass_ms;
    }
    pass_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_reads_back_as_saved_with_its_stream() {
        let saved = Checkpoint {
            seq: Some("4421584500000000017450".into()),
            done: true,
            created_secs: Some(1_800_000_000),
            saved_secs: 1_800_000_060,
            lost: false,
            ttl_secs: Some(1_800_093_660),
            stream: Some(
                "arn:aws:dynamodb:us-east-1:1:table/j/stream/2026-11-27T09:00:00.000".into(),
            ),
        };
        assert_eq!(checkpoint(&checkpoint_item("shardId-1", &saved)), saved);
        let before = Checkpoint {
            stream: None,
            ..saved.clone()
        };
        let mut item = checkpoint_item("shardId-1", &saved);
        item.remove(STREAM);
        assert_eq!(
            checkpoint(&item),
            before,
            "saved by a version that did not say"
        );
    }
}
