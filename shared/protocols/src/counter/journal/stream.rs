//! The journal's stream as the roll-up reads it: the table's stream (checked once per run),
//! its shards with their lineage, iterators after a checkpoint, and pages of records.

use aws_sdk_dynamodb::types::StreamViewType;
use aws_sdk_dynamodbstreams::types::{OperationType, ShardIteratorType};

use std::collections::BTreeSet;

use super::checkpoint::Checkpoints;
use super::event::{decode, Decoded};
use super::Rollup;
use crate::ddb::StoreError;

/// One shard of the stream.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Shard {
    /// The stream that lists it (the table's latest, or an earlier one still being finished).
    pub(super) stream: String,
    pub(super) id: String,
    pub(super) parent: Option<String>,
    /// The shard has an ending sequence number: it is closed and will get no more records.
    pub(super) closed: bool,
}

/// One page of a shard, decoded.
#[derive(Debug, Default)]
pub(super) struct Page {
    /// Records in the page, in order: sequence number, creation time (epoch seconds),
    /// and what the record is to the roll-up.
    pub(super) records: Vec<(String, Option<i64>, Decoded)>,
    /// Where to read next (`None`: the shard is closed and read to its end).
    pub(super) next: Option<String>,
}

/// How a shard iterator was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Start {
    /// After the checkpoint's sequence number.
    AfterCheckpoint,
    /// At the oldest record kept: the shard had no checkpoint.
    TrimHorizon,
    /// At the oldest record kept because the records after the checkpoint have left the
    /// stream: what lay between is lost to the roll-up.
    Trimmed,
}

impl Rollup {
    /// The journal table's current stream and when it was created (epoch ms: its label, or
    /// the table's creation), refused unless it carries new images and the table is no global
    /// table.
    pub(super) async fn stream_arn(&self) -> Result<(String, Option<u64>), StoreError> {
        let out = self
            .ddb
            .describe_table()
            .table_name(&self.config.journal_table)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("DescribeTable", e))?;
        let table = &self.config.journal_table;
        let refuse = |why: String| {
            Err(StoreError::Inconsistent(format!(
                "journal table {table}: {why}"
            )))
        };
        let Some(description) = out.table() else {
            return refuse("no description".into());
        };
        let view = description
            .stream_specification()
            .and_then(|s| s.stream_view_type());
        match view {
            Some(StreamViewType::NewImage | StreamViewType::NewAndOldImages) => {}
            other => {
                return refuse(format!(
                    "its stream must carry new images (StreamViewType NEW_IMAGE), not {other:?}"
                ))
            }
        }
        if !description.replicas().is_empty() {
            return refuse(
                "a global table's stream carries every replica's writes: one roll-up per \
                 region would count each key once per region; use a single-region journal"
                    .into(),
            );
        }
        let label = description.latest_stream_label().and_then(|label| {
            let text = format!("{}Z", label.trim_end_matches('Z'));
            aws_smithy_types::DateTime::from_str(
                &text,
                aws_smithy_types::date_time::Format::DateTime,
            )
            .ok()
        });
        let created = label
            .or_else(|| description.creation_date_time().copied())
            .and_then(|t| t.to_millis().ok())
            .and_then(|ms| u64::try_from(ms).ok());
        match description.latest_stream_arn() {
            Some(arn) => Ok((arn.to_string(), created)),
            None => refuse("no stream (it needs StreamViewType NEW_IMAGE)".into()),
        }
    }

    /// The shards to read: the latest stream's, and those of every earlier stream of the table
    /// a checkpoint not lost names (a stream disabled and enabled again is a new stream; the
    /// old one's records stay readable for 24 hours), until DynamoDB no longer knows it (then
    /// its unfinished shards are gaps: they are not listed).
    pub(super) async fn shards_to_read(
        &self,
        latest: &str,
        checkpoints: &Checkpoints,
    ) -> Result<Vec<Shard>, StoreError> {
        let earlier: BTreeSet<&str> = checkpoints
            .shards
            .values()
            .filter(|c| !c.lost)
            .filter_map(|c| c.stream.as_deref())
            .filter(|s| *s != latest)
            .collect();
        let mut shards = Vec::new();
        for arn in earlier {
            match self.shards(arn).await {
                Ok(listed) => shards.extend(listed),
                Err(None) => {} // trimmed and gone
                Err(Some(e)) => return Err(e),
            }
        }
        let listed = self
            .shards(latest)
            .await
            .map_err(|e| e.unwrap_or_else(|| missing(latest)))?;
        shards.extend(listed);
        Ok(shards)
    }

    /// Every shard of the stream, in the order DynamoDB lists them; `Err(None)` when the
    /// stream is not found.
    pub(super) async fn shards(&self, arn: &str) -> Result<Vec<Shard>, Option<StoreError>> {
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
                .map_err(|e| {
                    match e
                        .as_service_error()
                        .is_some_and(|e| e.is_resource_not_found_exception())
                    {
                        true => None,
                        false => Some(StoreError::from_sdk("DescribeStream", e)),
                    }
                })?;
            let Some(description) = out.stream_description else {
                break;
            };
            for shard in description.shards() {
                if let Some(id) = shard.shard_id() {
                    shards.push(Shard {
                        stream: arn.to_string(),
                        id: id.to_string(),
                        parent: shard.parent_shard_id().map(str::to_string),
                        closed: shard
                            .sequence_number_range()
                            .and_then(|r| r.ending_sequence_number())
                            .is_some(),
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

    /// An iterator after `seq` (or at the oldest record kept).
    pub(super) async fn iterator(
        &self,
        arn: &str,
        shard: &str,
        seq: Option<&str>,
    ) -> Result<(Option<String>, Start), StoreError> {
        let request = |kind: ShardIteratorType, seq: Option<String>| {
            self.streams
                .get_shard_iterator()
                .stream_arn(arn)
                .shard_id(shard)
                .shard_iterator_type(kind)
                .set_sequence_number(seq)
                .send()
        };
        if let Some(seq) = seq {
            match request(
                ShardIteratorType::AfterSequenceNumber,
                Some(seq.to_string()),
            )
            .await
            {
                Ok(out) => return Ok((out.shard_iterator, Start::AfterCheckpoint)),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_trimmed_data_access_exception()) =>
                {
                    let out = request(ShardIteratorType::TrimHorizon, None)
                        .await
                        .map_err(|e| StoreError::from_sdk("GetShardIterator", e))?;
                    return Ok((out.shard_iterator, Start::Trimmed));
                }
                Err(e) => return Err(StoreError::from_sdk("GetShardIterator", e)),
            }
        }
        let out = request(ShardIteratorType::TrimHorizon, None)
            .await
            .map_err(|e| StoreError::from_sdk("GetShardIterator", e))?;
        Ok((out.shard_iterator, Start::TrimHorizon))
    }

    /// One page of records from `iterator`; `Err(None)` when the iterator has expired (get
    /// another one), `Err(Some(_))` for any other failure.
    pub(super) async fn page(
        &self,
        shard: usize,
        iterator: String,
    ) -> Result<Page, Option<StoreError>> {
        let out = self
            .streams
            .get_records()
            .shard_iterator(iterator)
            .limit(self.config.records_per_call)
            .send()
            .await
            .map_err(|e| {
                match e
                    .as_service_error()
                    .is_some_and(|e| e.is_expired_iterator_exception())
                {
                    true => None,
                    false => Some(StoreError::from_sdk("GetRecords", e)),
                }
            })?;
        let mut page = Page {
            next: out.next_shard_iterator.clone(),
            ..Page::default()
        };
        for record in out.records() {
            let Some(change) = record.dynamodb() else {
                continue;
            };
            let Some(seq) = change.sequence_number() else {
                continue;
            };
            let created = change.approximate_creation_date_time().map(|t| t.secs());
            let insert = record.event_name() == Some(&OperationType::Insert);
            let decoded = decode(shard, seq, insert, change.keys(), change.new_image());
            page.records.push((seq.to_string(), created, decoded));
        }
        Ok(page)
    }
}

fn missing(arn: &str) -> StoreError {
    StoreError::Inconsistent(format!("the journal's stream {arn} is not found"))
}
