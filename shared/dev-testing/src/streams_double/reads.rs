//! The read side of one stream: `DescribeStream` pages, shard iterators (opaque base64 of
//! JSON: stream, shard, position, empty pages still to answer, issued-at clock) and
//! `GetRecords` pages.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};

use super::error::ApiError;
use super::model::{shard_json, Stream};

/// An iterator older than this (of the double's clock) is expired, as on AWS.
pub(crate) const ITERATOR_LIFETIME_MS: u64 = 15 * 60 * 1000;

/// `GetRecords` stops adding records past this many bytes of record JSON (AWS: 1 MB).
const PAGE_BYTES: usize = 1 << 20;

/// What a shard iterator holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Position {
    pub stream: String,
    pub shard: String,
    /// The next record served is the first with a number above this.
    pub after: u128,
    /// Empty pages still to answer before records.
    pub empty_pages: usize,
    pub issued_ms: u64,
}

impl Position {
    /// The opaque iterator string.
    pub fn encode(&self) -> String {
        let inner = json!({
            "a": self.stream,
            "s": self.shard,
            "p": self.after.to_string(),
            "e": self.empty_pages,
            "t": self.issued_ms,
        });
        URL_SAFE_NO_PAD.encode(inner.to_string())
    }

    /// Read an iterator string back.
    pub fn decode(iterator: &str) -> Result<Position, ApiError> {
        let invalid = || ApiError::validation(format!("Invalid ShardIterator: {iterator}"));
        let bytes = URL_SAFE_NO_PAD.decode(iterator).map_err(|_| invalid())?;
        let inner: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
        let text = |k: &str| inner.get(k).and_then(Value::as_str).ok_or_else(invalid);
        let number = |k: &str| inner.get(k).and_then(Value::as_u64).ok_or_else(invalid);
        Ok(Position {
            stream: text("a")?.to_string(),
            shard: text("s")?.to_string(),
            after: text("p")?.parse().map_err(|_| invalid())?,
            empty_pages: usize::try_from(number("e")?).map_err(|_| invalid())?,
            issued_ms: number("t")?,
        })
    }
}

/// `GetShardIterator`: where the iterator of `kind` starts in `shard_id`.
pub(crate) fn shard_iterator(
    stream: &Stream,
    shard_id: &str,
    kind: &str,
    sequence: Option<&str>,
    now_ms: u64,
    empty_pages: usize,
) -> Result<Position, ApiError> {
    let shard = stream.shard(shard_id)?;
    if shard.gone {
        return Err(ApiError::not_found(format!(
            "Shard {shard_id} is past the retention period"
        )));
    }
    let requested = || -> Result<u128, ApiError> {
        let text = sequence.ok_or_else(|| {
            ApiError::validation(format!("SequenceNumber is required for {kind}"))
        })?;
        let n: u128 = text
            .parse()
            .map_err(|_| ApiError::validation(format!("Invalid SequenceNumber {text}")))?;
        if n < shard.start || shard.end.is_some_and(|end| n > end) {
            return Err(ApiError::validation(format!(
                "Invalid SequenceNumber {text} for shard {shard_id}"
            )));
        }
        if shard.trimmed_through.is_some_and(|t| n <= t) {
            return Err(ApiError::trimmed(format!(
                "SequenceNumber {text} of shard {shard_id} is beyond the retention period"
            )));
        }
        Ok(n)
    };
    let after = match kind {
        "TRIM_HORIZON" => shard.trimmed_through.unwrap_or(shard.start),
        "LATEST" => shard.last_seq(),
        "AT_SEQUENCE_NUMBER" => requested()? - 1,
        "AFTER_SEQUENCE_NUMBER" => requested()?,
        other => {
            return Err(ApiError::validation(format!(
                "Invalid ShardIteratorType {other}"
            )))
        }
    };
    Ok(Position {
        stream: stream.arn.clone(),
        shard: shard_id.to_string(),
        after,
        empty_pages,
        issued_ms: now_ms,
    })
}

/// One `GetRecords` page.
#[derive(Debug)]
pub(crate) struct Page {
    pub records: Vec<Value>,
    pub next: Option<Position>,
}

/// `GetRecords` from `position`: at most `limit` records (and about 1 MB).
pub(crate) fn get_records(
    stream: &Stream,
    position: &Position,
    limit: usize,
    now_ms: u64,
) -> Result<Page, ApiError> {
    if now_ms.saturating_sub(position.issued_ms) > ITERATOR_LIFETIME_MS {
        return Err(ApiError::expired("Iterator expired"));
    }
    let shard = stream.shard(&position.shard)?;
    let next = |after: u128, empty_pages: usize| Position {
        after,
        empty_pages,
        issued_ms: now_ms,
        ..position.clone()
    };
    if position.empty_pages > 0 {
        return Ok(Page {
            records: Vec::new(),
            next: Some(next(position.after, position.empty_pages - 1)),
        });
    }
    if shard.trimmed_through.is_some_and(|t| position.after < t) {
        return Err(ApiError::trimmed(format!(
            "Records of shard {} after {} are beyond the retention period",
            shard.id, position.after
        )));
    }
    let first = shard.records.partition_point(|r| r.seq <= position.after);
    let mut records = Vec::new();
    let (mut bytes, mut after) = (0, position.after);
    for record in shard.records.iter().skip(first) {
        if records.len() >= limit || (bytes + record.size > PAGE_BYTES && !records.is_empty()) {
            break;
        }
        bytes += record.size;
        after = record.seq;
        records.push(record.json.clone());
    }
    let finished = shard.end.is_some_and(|end| after >= end);
    Ok(Page {
        records,
        next: (!finished).then(|| next(after, 0)),
    })
}

/// One `DescribeStream` answer: the stream's description with up to `limit` listed shards
/// after `exclusive_start`.
pub(crate) fn describe(
    stream: &Stream,
    limit: usize,
    exclusive_start: Option<&str>,
) -> Result<Value, ApiError> {
    let from = match exclusive_start {
        Some(id) => {
            stream
                .shards
                .iter()
                .position(|s| s.id == id)
                .ok_or_else(|| {
                    ApiError::validation(format!("ExclusiveStartShardId {id} is not a shard"))
                })?
                + 1
        }
        None => 0,
    };
    if stream.vanished() {
        return Err(ApiError::not_found(format!(
            "Requested resource not found: Stream: {} not found",
            stream.arn
        )));
    }
    let candidates: Vec<_> = stream.shards[from..].iter().filter(|s| !s.gone).collect();
    let page = &candidates[..limit.min(candidates.len())];
    let mut description = stream.meta.description.clone();
    description["StreamArn"] = json!(stream.arn);
    let status = match stream.disabled_ms {
        Some(_) => "DISABLED",
        None => "ENABLED",
    };
    description["StreamStatus"] = json!(status);
    description["Shards"] = page.iter().map(|s| shard_json(s)).collect();
    if let Some(obj) = description.as_object_mut() {
        obj.remove("LastEvaluatedShardId");
    }
    if candidates.len() > page.len() {
        if let Some(last) = page.last() {
            description["LastEvaluatedShardId"] = json!(last.id);
        }
    }
    Ok(json!({ "StreamDescription": description }))
}
