//! The journal's stream as the roll-up reads it: its shards (and their parents), each shard's
//! checkpoint (an item of the journal table), and pages of records after a checkpoint.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::{
    AttributeValue as StreamValue, OperationType, ShardIteratorType,
};

use super::entry::{
    event, padded_seq, Event, CHECKPOINT_PREFIX, DONE_ATTRIBUTE, JOURNAL_KEY_ATTRIBUTE,
    SEQ_ATTRIBUTE,
};
use super::Rollup;
use crate::ddb::{Cost, Read, StoreError};

/// One shard of the stream.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Shard {
    pub(super) id: String,
    pub(super) parent: Option<String>,
}

/// Where a shard was read to.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Checkpoint {
    /// The last sequence number read (as the stream spells it).
    pub(super) seq: Option<String>,
    /// The shard is closed and read to its end.
    pub(super) done: bool,
}

/// One page of a shard.
#[derive(Debug, Default)]
pub(super) struct Page {
    /// The `INSERT`s of journal items.
    pub(super) events: Vec<Event>,
    /// Records in the page (any kind).
    pub(super) records: usize,
    /// Records of journal items (not of the roll-up's own checkpoints): only these move a
    /// checkpoint, so that saving a checkpoint does not make work for the next read.
    pub(super) journal_records: usize,
    /// The last sequence number of the page.
    pub(super) last_seq: Option<String>,
    /// When the page's last record was written (epoch seconds, DynamoDB's approximation).
    pub(super) last_created_secs: Option<i64>,
    /// Where to read next (`None`: the shard is closed and read to its end).
    pub(super) next: Option<String>,
}

impl Rollup {
    /// The journal table's current stream.
    pub(super) async fn stream_arn(&self) -> Result<String, StoreError> {
        let out = self
            .ddb
            .describe_table()
            .table_name(&self.config.journal_table)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("DescribeTable", e))?;
        out.table()
            .and_then(|t| t.latest_stream_arn())
            .map(str::to_string)
            .ok_or_else(|| {
                StoreError::Inconsistent(format!(
                    "journal table {} has no stream (it needs StreamViewType NEW_IMAGE)",
                    self.config.journal_table
                ))
            })
    }

    /// Every shard of the stream, in the order DynamoDB lists them.
    pub(super) async fn shards(&self, arn: &str) -> Result<Vec<Shard>, StoreError> {
        let mut shards = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let out = self
                .streams
                .describe_stream()
                .stream_arn(arn)
                .set_exclusive_start_shard_id(start.take())
                .send()
                .await
                .map_err(|e| StoreError::from_sdk("DescribeStream", e))?;
            let Some(description) = out.stream_description else {
                break;
            };
            for shard in description.shards() {
                if let Some(id) = shard.shard_id() {
                    shards.push(Shard {
                        id: id.to_string(),
                        parent: shard.parent_shard_id().map(str::to_string),
                    });
                }
            }
            match description.last_evaluated_shard_id {
                Some(last) => start = Some(last),
                None => break,
            }
        }
        Ok(shards)
    }

    /// A shard's checkpoint (default: never read).
    pub(super) async fn checkpoint(&self, shard: &str) -> Result<Checkpoint, StoreError> {
        let key = checkpoint_key(shard)?;
        let item = crate::ddb::read::get_item(
            &self.ddb,
            &self.config.journal_table,
            &key,
            Read::Consistent,
        )
        .await?;
        let Some(item) = item else {
            return Ok(Checkpoint::default());
        };
        Ok(Checkpoint {
            seq: match item.get(SEQ_ATTRIBUTE) {
                Some(AttributeValue::S(seq)) => Some(seq.clone()),
                _ => None,
            },
            done: matches!(item.get(DONE_ATTRIBUTE), Some(AttributeValue::Bool(true))),
        })
    }

    /// Record that `shard` was read to `checkpoint` (unconditional: a checkpoint only says
    /// where to start reading; the watermarks keep the counts exact).
    pub(super) async fn save_checkpoint(
        &self,
        shard: &str,
        checkpoint: &Checkpoint,
        cost: &Cost,
    ) -> Result<(), StoreError> {
        let mut item = checkpoint_key(shard)?.to_item()?;
        if let Some(seq) = &checkpoint.seq {
            item.insert(SEQ_ATTRIBUTE.into(), AttributeValue::S(seq.clone()));
        }
        item.insert(DONE_ATTRIBUTE.into(), AttributeValue::Bool(checkpoint.done));
        let out = self
            .ddb
            .put_item()
            .table_name(&self.config.journal_table)
            .set_item(Some(item))
            .return_consumed_capacity(aws_sdk_dynamodb::types::ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("PutItem", e))?;
        cost.add(out.consumed_capacity());
        Ok(())
    }

    /// An iterator after `checkpoint` (or at the oldest record kept). `trimmed` is `true` when
    /// the records after the checkpoint are no longer in the stream (read from the oldest).
    pub(super) async fn iterator(
        &self,
        arn: &str,
        shard: &str,
        checkpoint: &Checkpoint,
    ) -> Result<(Option<String>, bool), StoreError> {
        let request = |kind: ShardIteratorType, seq: Option<String>| {
            self.streams
                .get_shard_iterator()
                .stream_arn(arn)
                .shard_id(shard)
                .shard_iterator_type(kind)
                .set_sequence_number(seq)
                .send()
        };
        if let Some(seq) = &checkpoint.seq {
            match request(ShardIteratorType::AfterSequenceNumber, Some(seq.clone())).await {
                Ok(out) => return Ok((out.shard_iterator, false)),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_trimmed_data_access_exception()) =>
                {
                    let out = request(ShardIteratorType::TrimHorizon, None)
                        .await
                        .map_err(|e| StoreError::from_sdk("GetShardIterator", e))?;
                    return Ok((out.shard_iterator, true));
                }
                Err(e) => return Err(StoreError::from_sdk("GetShardIterator", e)),
            }
        }
        let out = request(ShardIteratorType::TrimHorizon, None)
            .await
            .map_err(|e| StoreError::from_sdk("GetShardIterator", e))?;
        Ok((out.shard_iterator, false))
    }

    /// One page of records from `iterator`.
    pub(super) async fn page(&self, iterator: String) -> Result<Page, StoreError> {
        let out = self
            .streams
            .get_records()
            .shard_iterator(iterator)
            .limit(self.config.records_per_call)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetRecords", e))?;
        let mut page = Page {
            next: out.next_shard_iterator.clone(),
            ..Page::default()
        };
        for record in out.records() {
            page.records += 1;
            let Some(change) = record.dynamodb() else {
                continue;
            };
            let Some(seq) = change.sequence_number() else {
                continue;
            };
            page.last_seq = Some(seq.to_string());
            if let Some(created) = change.approximate_creation_date_time() {
                page.last_created_secs = Some(created.secs());
            }
            let checkpoint = match change.keys().and_then(|k| k.get(JOURNAL_KEY_ATTRIBUTE)) {
                Some(StreamValue::S(pk)) => pk.starts_with(CHECKPOINT_PREFIX),
                _ => false,
            };
            if checkpoint {
                continue;
            }
            page.journal_records += 1;
            if record.event_name() != Some(&OperationType::Insert) {
                continue; // a key put again (MODIFY), a TTL deletion (REMOVE)
            }
            let image = change.new_image().cloned().unwrap_or_else(HashMap::new);
            if let Some(event) = event(seq, &image)? {
                page.events.push(event);
            }
        }
        if page.last_seq.as_deref().and_then(padded_seq).is_none() && page.records > 0 {
            return Err(StoreError::Inconsistent(
                "stream records without sequence numbers".into(),
            ));
        }
        Ok(page)
    }
}

/// The key of a shard's checkpoint item.
fn checkpoint_key(shard: &str) -> Result<crate::ddb::ItemKey, StoreError> {
    let id = format!("{CHECKPOINT_PREFIX}{shard}");
    crate::ddb::ItemKey::partition(JOURNAL_KEY_ATTRIBUTE, id.as_str())
        .map_err(|e| StoreError::Inconsistent(format!("checkpoint key of shard {shard}: {e}")))
}
