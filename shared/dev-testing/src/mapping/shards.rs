//! The shards of the stream as the mapping follows them: the listing (`DescribeStream`),
//! lineage, iterators, reads, and each shard's checkpoint.

use std::collections::VecDeque;

use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use futures::future::join_all;

use super::lanes::Lane;
use super::payload::{record_json, StreamRecord};
use super::{Checkpoint, Mapping, MappingError, StartingPosition, TrimmedSkip};

/// `GetRecords` pages one shard reads per step at most.
const PAGES_PER_STEP: usize = 4;

/// One shard.
#[derive(Debug)]
pub(crate) struct Shard {
    pub id: String,
    pub parent: Option<String>,
    /// Where a shard with nothing read starts.
    start: ShardIteratorType,
    iterator: Option<String>,
    /// The last record read (the next iterator starts after it).
    read_after: Option<String>,
    /// Read to its end (no next iterator).
    pub ended: bool,
    /// The last page held fewer records than asked: the reader is at the shard's tip.
    pub caught_up: bool,
    /// No longer listed (trimmed away): done, whatever it held.
    pub gone: bool,
    /// Records read and not yet passed by the checkpoint, in order.
    read_log: VecDeque<(u128, String)>,
    checkpoint: Option<String>,
    pub lanes: Vec<Lane>,
    pub done: bool,
}

impl Shard {
    fn new(id: String, parent: Option<String>, start: ShardIteratorType, lanes: usize) -> Shard {
        Shard {
            id,
            parent,
            start,
            iterator: None,
            read_after: None,
            ended: false,
            caught_up: false,
            gone: false,
            read_log: VecDeque::new(),
            checkpoint: None,
            lanes: (0..lanes).map(|_| Lane::default()).collect(),
            done: false,
        }
    }

    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            sequence_number: self.checkpoint.clone(),
            done: self.done,
        }
    }

    /// Records in the lanes.
    pub fn pending(&self) -> usize {
        self.lanes.iter().map(|l| l.pending.len()).sum()
    }

    /// Move the checkpoint past every record read before the lowest pending one.
    pub fn advance_checkpoint(&mut self) {
        let lowest = self
            .lanes
            .iter()
            .filter_map(|l| l.pending.front())
            .map(|r| r.seq)
            .min();
        while let Some((seq, _)) = self.read_log.front() {
            if lowest.is_some_and(|low| *seq >= low) {
                break;
            }
            self.checkpoint = self.read_log.pop_front().map(|(_, text)| text);
        }
    }
}

impl Mapping {
    /// `DescribeStream` (every page): new shards are added, shards no longer listed are
    /// gone. Returns how many shards appeared or left.
    pub(crate) async fn refresh_shards(&mut self) -> Result<usize, MappingError> {
        let mut listed = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let out = self
                .client
                .describe_stream()
                .stream_arn(&self.stream_arn)
                .set_exclusive_start_shard_id(start.take())
                .send()
                .await
                .map_err(|e| MappingError::Streams {
                    operation: "DescribeStream",
                    source: Box::new(e),
                })?;
            let d = out
                .stream_description()
                .ok_or_else(|| MappingError::Malformed("no StreamDescription".into()))?;
            if self.hash_key.is_none() {
                self.hash_key = d
                    .key_schema()
                    .iter()
                    .find(|k| k.key_type().as_str() == "HASH")
                    .map(|k| k.attribute_name().to_string());
            }
            for s in d.shards() {
                let id = s.shard_id().unwrap_or_default().to_string();
                let closed = s
                    .sequence_number_range()
                    .and_then(|r| r.ending_sequence_number())
                    .is_some();
                listed.push((id, s.parent_shard_id().map(str::to_string), closed));
            }
            match d.last_evaluated_shard_id() {
                Some(last) => start = Some(last.to_string()),
                None => break,
            }
        }
        Ok(self.merge_listing(listed))
    }

    fn merge_listing(&mut self, listed: Vec<(String, Option<String>, bool)>) -> usize {
        let mut changes = 0;
        let first = !self.listed_once;
        self.listed_once = true;
        for (id, parent, closed) in &listed {
            if self.shards.contains_key(id) {
                continue;
            }
            let latest = first && self.config.starting_position == StartingPosition::Latest;
            let start = if latest {
                ShardIteratorType::Latest
            } else {
                ShardIteratorType::TrimHorizon
            };
            let mut shard = Shard::new(
                id.clone(),
                parent.clone(),
                start,
                self.config.parallelization_factor,
            );
            if latest && *closed {
                // LATEST: a shard closed before the mapping started holds nothing new.
                shard.ended = true;
                shard.done = true;
            }
            self.shards.insert(id.clone(), shard);
            self.order.push(id.clone());
            changes += 1;
        }
        for id in &self.order {
            let Some(shard) = self.shards.get_mut(id) else {
                continue;
            };
            if !shard.done && !listed.iter().any(|(l, _, _)| l == id) {
                shard.gone = true;
                changes += 1;
            }
        }
        changes
    }

    /// Whether `id` may be read: not done, and its parent done or unknown.
    pub(crate) fn readable(&self, id: &str) -> bool {
        let Some(shard) = self.shards.get(id) else {
            return false;
        };
        !shard.done
            && !shard.gone
            && shard
                .parent
                .as_ref()
                .and_then(|p| self.shards.get(p))
                .is_none_or(|p| p.done)
    }

    /// Read every readable shard that has room in its lanes, all at once.
    pub(crate) async fn read_shards(&mut self) -> usize {
        let target = self.config.batch_size * self.config.parallelization_factor;
        let limit = i32::try_from(target.min(1000)).unwrap_or(1000);
        let ids: Vec<String> = self
            .order
            .iter()
            .filter(|id| self.readable(id))
            .filter(|id| {
                self.shards
                    .get(*id)
                    .is_some_and(|s| !s.ended && s.pending() < target)
            })
            .cloned()
            .collect();
        let mut taken: Vec<Shard> = ids.iter().filter_map(|id| self.shards.remove(id)).collect();
        let client = &self.client;
        let arn = self.stream_arn.as_str();
        let hash_key = self.hash_key.as_deref();
        let reads = taken
            .iter_mut()
            .map(|shard| read_shard(client, arn, hash_key, shard, limit));
        let results = join_all(reads).await;
        let mut total = 0;
        for (shard, result) in taken.into_iter().zip(results) {
            let id = shard.id.clone();
            self.shards.insert(id.clone(), shard);
            total += self.take_read(&id, result);
        }
        total
    }

    /// File what one shard's read gave: records into lanes (or past the filter).
    fn take_read(&mut self, id: &str, read: Read) -> usize {
        self.stats.read_errors += read.errors;
        self.stats.trimmed_skips += read.trimmed.len() as u64;
        self.trimmed
            .extend(read.trimmed.into_iter().map(|after| TrimmedSkip {
                shard_id: id.to_string(),
                after,
            }));
        let now = self.clock.now_ms();
        let n = read.records.len();
        self.stats.records_read += n as u64;
        let lanes = self.config.parallelization_factor;
        let Some(shard) = self.shards.get_mut(id) else {
            return n;
        };
        for r in read.records {
            shard.read_log.push_back((r.seq, r.seq_text.clone()));
            if !self.config.filters.accepts(&r.json) {
                self.stats.records_filtered += 1;
                continue;
            }
            let lane = lane_of(&r.partition_key, lanes);
            shard.lanes[lane].push(r, now);
        }
        shard.advance_checkpoint();
        n
    }

    /// Mark shards done (read to their end, nothing pending, no window open); returns how many.
    pub(crate) fn finish_shards(&mut self) -> usize {
        let mut changes = 0;
        for shard in self.shards.values_mut() {
            let idle = shard.lanes.iter().all(Lane::is_idle);
            if !shard.done && (shard.gone || (shard.ended && idle)) {
                shard.advance_checkpoint();
                shard.done = true;
                changes += 1;
            }
        }
        changes
    }
}

/// The lane of a partition key (`ParallelizationFactor` lanes).
fn lane_of(partition_key: &str, lanes: usize) -> usize {
    if lanes <= 1 {
        return 0;
    }
    let digest = <sha2::Sha256 as sha2::Digest>::digest(partition_key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % lanes as u64) as usize
}

/// What one shard's read gave.
#[derive(Debug, Default)]
struct Read {
    records: Vec<StreamRecord>,
    /// Positions skipped as trimmed (the last record read before each).
    trimmed: Vec<Option<String>>,
    errors: u64,
}

/// Up to [`PAGES_PER_STEP`] pages of `shard`, stopping at a page with records but fewer
/// than `limit`, or at the shard's end.
async fn read_shard(
    client: &aws_sdk_dynamodbstreams::Client,
    arn: &str,
    hash_key: Option<&str>,
    shard: &mut Shard,
    limit: i32,
) -> Read {
    let mut read = Read::default();
    let mut pages = 0;
    // Two more calls than pages: an expired iterator or a trimmed position is taken again
    // in the same step.
    for _ in 0..PAGES_PER_STEP + 2 {
        let iterator = match iterator(client, arn, shard, &mut read).await {
            Next::Iterator(it) => it,
            Next::Again => continue,
            Next::Stop => return read,
        };
        let sent = client
            .get_records()
            .shard_iterator(iterator)
            .limit(limit)
            .send()
            .await;
        shard.iterator = None;
        let out = match sent {
            Ok(out) => out,
            Err(e) => {
                let service = e.as_service_error();
                if service.is_some_and(|s| s.is_trimmed_data_access_exception()) {
                    trimmed(shard, &mut read);
                    continue;
                }
                if service.is_some_and(|s| s.is_expired_iterator_exception()) {
                    continue;
                }
                read.errors += 1;
                return read;
            }
        };
        pages += 1;
        shard.iterator = out.next_shard_iterator().map(str::to_string);
        shard.ended = shard.iterator.is_none();
        let page = out.records();
        shard.caught_up = page.len() < limit as usize;
        for r in page {
            match record_json(r, arn, hash_key) {
                Ok(rec) => {
                    shard.read_after = Some(rec.seq_text.clone());
                    read.records.push(rec);
                }
                Err(_) => read.errors += 1,
            }
        }
        let full = read.records.len() >= limit as usize;
        if shard.ended || (!page.is_empty() && shard.caught_up) || full || pages == PAGES_PER_STEP {
            return read;
        }
    }
    read
}

/// A position older than the stream keeps: restart at `TRIM_HORIZON`, as Lambda does.
fn trimmed(shard: &mut Shard, read: &mut Read) {
    read.trimmed.push(shard.read_after.take());
    shard.start = ShardIteratorType::TrimHorizon;
    shard.iterator = None;
}

/// What to read with next.
enum Next {
    Iterator(String),
    /// Repositioned (trimmed): ask again.
    Again,
    /// The call failed (counted) or the shard is gone.
    Stop,
}

/// The shard's iterator, taken again (after the last record read, or at its start) when it
/// has none.
async fn iterator(
    client: &aws_sdk_dynamodbstreams::Client,
    arn: &str,
    shard: &mut Shard,
    read: &mut Read,
) -> Next {
    if let Some(it) = &shard.iterator {
        return Next::Iterator(it.clone());
    }
    let mut call = client
        .get_shard_iterator()
        .stream_arn(arn)
        .shard_id(&shard.id);
    call = match &shard.read_after {
        Some(seq) => call
            .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
            .sequence_number(seq),
        None => call.shard_iterator_type(shard.start.clone()),
    };
    match call.send().await {
        Ok(out) => match out.shard_iterator() {
            Some(it) => {
                shard.iterator = Some(it.to_string());
                Next::Iterator(it.to_string())
            }
            None => {
                shard.ended = true;
                Next::Stop
            }
        },
        Err(e) => {
            let service = e.as_service_error();
            if service.is_some_and(|s| s.is_trimmed_data_access_exception()) {
                trimmed(shard, read);
                return Next::Again;
            }
            if service.is_some_and(|s| s.is_resource_not_found_exception()) {
                shard.gone = true;
            } else {
                read.errors += 1;
            }
            Next::Stop
        }
    }
}
