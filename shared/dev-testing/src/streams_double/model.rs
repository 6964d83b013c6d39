//! One stream as the double serves it: partitions owning hash ranges, each with one open shard;
//! the lineage of closed shards (rollover, split); records with the double's own sequence
//! numbers and creation times; trimming after the retention period.

use std::collections::{HashMap, VecDeque};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::error::ApiError;

/// The first sequence number of every stream: 21 digits, like AWS's.
const FIRST_SEQUENCE: u128 = 100_000_000_000_000_000_000;

/// The lineage rules shared by all streams of one double (from its [`Shape`](super::Shape)).
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    /// The clock (epoch ms) when the double started: rollovers and splits count from it.
    pub origin_ms: u64,
    pub partitions: usize,
    pub rollover_ms: Option<u64>,
    pub split_ms: Option<u64>,
    pub retention_ms: u64,
}

/// A record as kept: its JSON (already rewritten), sequence number and creation clock.
#[derive(Debug)]
pub(crate) struct Record {
    pub seq: u128,
    pub created_ms: u64,
    pub json: Value,
    pub size: usize,
}

/// A shard: open while `end` is `None`.
#[derive(Debug)]
pub(crate) struct Shard {
    pub id: String,
    pub parent: Option<String>,
    /// A number reserved at creation, below every record's of the shard.
    pub start: u128,
    pub end: Option<u128>,
    pub closed_ms: Option<u64>,
    pub records: VecDeque<Record>,
    /// The number of the newest record trimmed (`None`: nothing trimmed yet).
    pub trimmed_through: Option<u128>,
    /// Closed, all its records trimmed and closed more than the retention ago: not listed.
    pub gone: bool,
}

impl Shard {
    /// The newest number the shard holds or held (its start when it never held a record).
    pub fn last_seq(&self) -> u128 {
        self.records
            .back()
            .map(|r| r.seq)
            .or(self.trimmed_through)
            .unwrap_or(self.start)
    }
}

#[derive(Debug, Clone, Copy)]
struct Partition {
    lo: u64,
    hi: u64,
    shard: usize,
}

/// What `DescribeStream` tells besides the shards (from upstream, or given for a synthetic
/// stream), and the table's partition key.
#[derive(Debug, Clone)]
pub(crate) struct StreamMeta {
    pub description: Value,
    pub hash_key: String,
}

/// One stream of the double.
#[derive(Debug)]
pub(crate) struct Stream {
    pub arn: String,
    pub meta: StreamMeta,
    pub shards: Vec<Shard>,
    index: HashMap<String, usize>,
    partitions: Vec<Partition>,
    next_seq: u128,
    rollovers: u64,
    splits: u64,
    next_split: usize,
    /// When the stream was disabled (its table's stream turned off): every shard closed then,
    /// no rollover or split after, records still readable until trimmed.
    pub disabled_ms: Option<u64>,
}

/// The partition hash of a key value: the first 8 bytes of SHA-256 of its canonical JSON.
pub(crate) fn key_hash(value: &Value) -> u64 {
    let digest = Sha256::digest(value.to_string().as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

fn boundaries(every: Option<u64>, origin: u64, now: u64) -> u64 {
    match every {
        Some(t) if t > 0 && now > origin => (now - origin) / t,
        _ => 0,
    }
}

impl Stream {
    /// A stream first seen at `now_ms`, with `rules.partitions` partitions of equal ranges.
    pub fn new(arn: &str, meta: StreamMeta, rules: &Rules, now_ms: u64) -> Stream {
        let mut stream = Stream {
            arn: arn.to_string(),
            meta,
            shards: Vec::new(),
            index: HashMap::new(),
            partitions: Vec::new(),
            next_seq: FIRST_SEQUENCE,
            rollovers: boundaries(rules.rollover_ms, rules.origin_ms, now_ms),
            splits: boundaries(rules.split_ms, rules.origin_ms, now_ms),
            next_split: 0,
            disabled_ms: None,
        };
        let n = rules.partitions.max(1) as u128;
        let width = (u128::from(u64::MAX) + 1) / n;
        for i in 0..n {
            let lo = (i * width) as u64;
            let hi = if i + 1 == n {
                u64::MAX
            } else {
                ((i + 1) * width - 1) as u64
            };
            let shard = stream.open_shard(None, now_ms);
            stream.partitions.push(Partition { lo, hi, shard });
        }
        stream
    }

    fn take_seq(&mut self) -> u128 {
        self.next_seq += 1;
        self.next_seq
    }

    fn open_shard(&mut self, parent: Option<String>, now_ms: u64) -> usize {
        let start = self.take_seq();
        let ordinal = self.shards.len();
        let digest = Sha256::digest(format!("{}/{ordinal}", self.arn).as_bytes());
        let suffix: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        let id = format!("shardId-{now_ms:020}-{suffix}");
        self.index.insert(id.clone(), ordinal);
        self.shards.push(Shard {
            id,
            parent,
            start,
            end: None,
            closed_ms: None,
            records: VecDeque::new(),
            trimmed_through: None,
            gone: false,
        });
        ordinal
    }

    fn close_shard(&mut self, ordinal: usize, at_ms: u64) -> String {
        let shard = &mut self.shards[ordinal];
        shard.end = Some(shard.last_seq());
        shard.closed_ms = Some(at_ms);
        shard.id.clone()
    }

    /// Disable the stream at `now_ms` (after the lineage due by then): its open shards close,
    /// nothing rolls over or splits any more, and what it holds is read until trimmed.
    pub fn disable(&mut self, rules: &Rules, now_ms: u64) {
        self.advance(rules, now_ms);
        for p in 0..self.partitions.len() {
            self.close_shard(self.partitions[p].shard, now_ms);
        }
        self.disabled_ms = Some(now_ms);
    }

    /// Disabled, and every record trimmed: `DescribeStream` no longer knows it.
    pub fn vanished(&self) -> bool {
        self.disabled_ms.is_some() && self.shards.iter().all(|s| s.gone)
    }

    /// Apply every rollover and split due by `now_ms` in clock order, then trim.
    pub fn advance(&mut self, rules: &Rules, now_ms: u64) {
        if self.disabled_ms.is_some() {
            self.trim(rules.retention_ms, now_ms);
            return;
        }
        loop {
            let at = |every: Option<u64>, done: u64| {
                every
                    .filter(|t| *t > 0)
                    .map(|t| rules.origin_ms + (done + 1) * t)
            };
            let roll = at(rules.rollover_ms, self.rollovers).filter(|t| *t <= now_ms);
            let split = at(rules.split_ms, self.splits).filter(|t| *t <= now_ms);
            match (roll, split) {
                (Some(r), s) if s.is_none_or(|s| r <= s) => {
                    self.rollovers += 1;
                    self.rollover(r);
                }
                (_, Some(s)) => {
                    self.splits += 1;
                    self.split(s);
                }
                _ => break,
            }
        }
        self.trim(rules.retention_ms, now_ms);
    }

    fn rollover(&mut self, at_ms: u64) {
        for p in 0..self.partitions.len() {
            let parent = self.close_shard(self.partitions[p].shard, at_ms);
            self.partitions[p].shard = self.open_shard(Some(parent), at_ms);
        }
    }

    fn split(&mut self, at_ms: u64) {
        let p = self.next_split % self.partitions.len();
        let Partition { lo, hi, shard } = self.partitions[p];
        if lo == hi {
            self.next_split = p + 1;
            return;
        }
        let parent = self.close_shard(shard, at_ms);
        let mid = lo + (hi - lo) / 2;
        let left = self.open_shard(Some(parent.clone()), at_ms);
        let right = self.open_shard(Some(parent), at_ms);
        self.partitions[p] = Partition {
            lo,
            hi: mid,
            shard: left,
        };
        self.partitions.insert(
            p + 1,
            Partition {
                lo: mid + 1,
                hi,
                shard: right,
            },
        );
        self.next_split = p + 2;
    }

    fn trim(&mut self, retention_ms: u64, now_ms: u64) {
        for shard in &mut self.shards {
            while let Some(oldest) = shard.records.front() {
                if oldest.created_ms.saturating_add(retention_ms) >= now_ms {
                    break;
                }
                shard.trimmed_through = Some(oldest.seq);
                shard.records.pop_front();
            }
            let expired = shard
                .closed_ms
                .is_some_and(|c| c.saturating_add(retention_ms) < now_ms);
            if expired && shard.records.is_empty() {
                shard.gone = true;
            }
        }
    }

    /// Keep `record` (stream-record JSON) as written now: the double's sequence number and
    /// creation time, in the open shard of the partition owning its key's hash.
    pub fn ingest(&mut self, mut record: Value, now_ms: u64) -> Result<(), String> {
        if self.disabled_ms.is_some() {
            return Err(format!("stream {} is disabled", self.arn));
        }
        let key = record
            .pointer(&format!("/dynamodb/Keys/{}", self.meta.hash_key))
            .cloned()
            .ok_or_else(|| format!("record without dynamodb.Keys.{}", self.meta.hash_key))?;
        let hash = key_hash(&key);
        let ordinal = self
            .partitions
            .iter()
            .find(|p| p.lo <= hash && hash <= p.hi)
            .map(|p| p.shard)
            .ok_or("no partition owns the hash")?;
        let seq = self.take_seq();
        let Some(dynamodb) = record.get_mut("dynamodb").and_then(Value::as_object_mut) else {
            return Err("record without a dynamodb object".into());
        };
        dynamodb.insert("SequenceNumber".into(), json!(seq.to_string()));
        dynamodb.insert(
            "ApproximateCreationDateTime".into(),
            json!(now_ms as f64 / 1000.0),
        );
        let size = record.to_string().len();
        self.shards[ordinal].records.push_back(Record {
            seq,
            created_ms: now_ms,
            json: record,
            size,
        });
        Ok(())
    }

    /// The shard `id`, listed or not.
    pub fn shard(&self, id: &str) -> Result<&Shard, ApiError> {
        self.index
            .get(id)
            .map(|i| &self.shards[*i])
            .ok_or_else(|| ApiError::not_found(format!("Shard {id} not found in {}", self.arn)))
    }

    /// The shards `DescribeStream` lists, in creation order.
    pub fn listed(&self) -> impl Iterator<Item = &Shard> {
        self.shards.iter().filter(|s| !s.gone)
    }
}

/// A shard as `DescribeStream` shows it.
pub(crate) fn shard_json(shard: &Shard) -> Value {
    let mut range = json!({ "StartingSequenceNumber": shard.start.to_string() });
    if let Some(end) = shard.end {
        range["EndingSequenceNumber"] = json!(end.to_string());
    }
    let mut out = json!({ "ShardId": shard.id, "SequenceNumberRange": range });
    if let Some(parent) = &shard.parent {
        out["ParentShardId"] = json!(parent);
    }
    out
}
