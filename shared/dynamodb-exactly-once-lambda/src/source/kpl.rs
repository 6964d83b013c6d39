//! KPL de-aggregation: Kinesis records written in the aggregation format of the Kinesis
//! Producer Library (also used by the Kinesis Agent and many Flink/Spark sinks), expanded into
//! the user records they carry.
//!
//! Format: the magic bytes `F3 89 9A C2`, a protobuf `AggregatedRecord` (a table of partition
//! keys, a table of explicit hash keys, and the user records, each naming its keys by index
//! into the tables), then the MD5 digest (16 bytes) of the protobuf bytes.
//!
//! Invariants:
//! * every user record of a well-formed aggregate becomes one [`SourceRecord`] whose `id` is
//!   the aggregate's sequence number (what Lambda checkpoints on and what a partial batch
//!   response names), with its index as [`SubRecord::sub_sequence_number`] and its own
//!   partition key and explicit hash key from the tables;
//! * a record that starts with the magic bytes but is not a well-formed aggregate (checksum
//!   mismatch, protobuf that does not decode, a key index outside its table, a user record
//!   without data, no user records at all, more than [`MAX_USER_RECORDS`] user records) is
//!   kept whole, and [`defect`] gives the `bad_aggregate` rejection with which the pipeline
//!   dead-letters it: nothing of it is applied, nothing is lost.
//!
//! Bounded work: an aggregate is expanded into at most [`MAX_USER_RECORDS`] records. Each
//! user record costs its own position, parse, write or dead letter, and one failure brings the
//! whole aggregate back; a producer that packs more (a bug: 6 bytes make an empty user record,
//! so 1 MB holds 170,000) would exhaust the function's memory or never finish within one
//! invocation, reported on every try. Such an aggregate is one dead letter instead.
//!
//! Failure reporting: when a user record is reported for redelivery, its aggregate's sequence
//! number goes into `batchItemFailures` (once, however many of its user records failed);
//! Lambda then delivers the whole aggregate again, and the user records that succeeded are
//! applied again: as duplicates by an idempotent protocol; a protocol that is not
//! ([`Protocol::redelivery`](dynamodb_exactly_once::Protocol::redelivery)) recognises them only
//! as far as it remembers their deliveries (the document writer: its op tokens, kept by time).
//!
//! Cost: decoding and one MD5 over the protobuf per aggregate; no DynamoDB call. Tags of user
//! records are not read (protobuf skips them as unknown fields).

use md5::{Digest, Md5};
use prost::Message;
use serde::{Deserialize, Serialize};

use dynamodb_exactly_once::{Rejection, RejectionCode};

use super::{SourceKind, SourceRecord};

/// The first bytes of every aggregated record.
pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];

/// Length of the MD5 digest that ends an aggregated record.
const DIGEST_LEN: usize = 16;

/// The most user records an aggregate is expanded into; a larger one is kept whole
/// (`bad_aggregate`). The KPL's default aggregate (51,200 bytes) of records of 5 bytes or more
/// stays below it.
pub(crate) const MAX_USER_RECORDS: usize = 10_000;

/// A user record's place in its KPL aggregate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SubRecord {
    /// Its index in the aggregate (the KCL's sub-sequence number).
    pub sub_sequence_number: u64,
    /// The explicit hash key the producer gave it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explicit_hash_key: Option<String>,
}

impl SubRecord {
    /// The user record at `sub_sequence_number`, without an explicit hash key.
    pub fn new(sub_sequence_number: u64) -> Self {
        SubRecord {
            sub_sequence_number,
            explicit_hash_key: None,
        }
    }
}

/// The KPL's `AggregatedRecord` message (proto2).
#[derive(Clone, PartialEq, Message)]
struct AggregatedRecord {
    #[prost(string, repeated, tag = "1")]
    partition_key_table: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    explicit_hash_key_table: Vec<String>,
    #[prost(message, repeated, tag = "3")]
    records: Vec<UserRecordMessage>,
}

/// The KPL's `Record` message (`tags`, field 4, skipped).
#[derive(Clone, PartialEq, Message)]
struct UserRecordMessage {
    #[prost(uint64, optional, tag = "1")]
    partition_key_index: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    explicit_hash_key_index: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "3")]
    data: Option<Vec<u8>>,
}

/// One decoded user record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct UserRecord {
    partition_key: String,
    explicit_hash_key: Option<String>,
    data: Vec<u8>,
}

/// Whether a Kinesis record body is in the aggregation format (by its magic bytes).
pub(crate) fn is_aggregate(body: &[u8]) -> bool {
    body.starts_with(&MAGIC)
}

/// A Kinesis record as the records to apply: its user records when it is a well-formed
/// aggregate; otherwise itself (a plain record, or a malformed aggregate kept whole, see
/// [`defect`]). `Batch::from_event` calls this for every Kinesis record; a batch built by
/// other means should too.
pub(crate) fn expand(record: SourceRecord) -> Vec<SourceRecord> {
    if record.position.sub_record.is_some() || !is_aggregate(&record.body) {
        return vec![record];
    }
    let Ok(users) = decode(&record.body) else {
        return vec![record];
    };
    users
        .into_iter()
        .zip(0u64..)
        .map(|(user, n)| {
            let mut position = record.position.clone();
            position.partition_key = Some(user.partition_key);
            position.sub_record = Some(SubRecord {
                sub_sequence_number: n,
                explicit_hash_key: user.explicit_hash_key,
            });
            SourceRecord {
                position,
                body: user.data,
            }
        })
        .collect()
}

/// Why a Kinesis record that looks like an aggregate (magic bytes, not a sub-record) cannot be
/// expanded: the `bad_aggregate` rejection it is dead-lettered with. `None` for every other
/// record.
pub fn defect(record: &SourceRecord) -> Option<Rejection> {
    let position = &record.position;
    if position.kind != SourceKind::Kinesis
        || position.sub_record.is_some()
        || !is_aggregate(&record.body)
    {
        return None;
    }
    decode(&record.body)
        .err()
        .map(|message| Rejection::new(RejectionCode::BadAggregate, message))
}

/// Check and decode an aggregate (starting with [`MAGIC`]); the error says what is wrong.
fn decode(body: &[u8]) -> Result<Vec<UserRecord>, String> {
    let Some(rest) = body.strip_prefix(&MAGIC) else {
        return Err("the record does not start with the aggregation magic bytes".into());
    };
    let Some(split) = rest.len().checked_sub(DIGEST_LEN) else {
        return Err(format!(
            "the aggregate ({} bytes) is too short to hold its MD5 checksum",
            body.len()
        ));
    };
    let (message, digest) = rest.split_at(split);
    if Md5::digest(message).as_slice() != digest {
        return Err(format!(
            "the aggregate's MD5 checksum does not match its {} protobuf bytes \
             (corrupted or truncated)",
            message.len()
        ));
    }
    let aggregate = AggregatedRecord::decode(message)
        .map_err(|e| format!("the aggregate's protobuf does not decode: {e}"))?;
    if aggregate.records.is_empty() {
        return Err("the aggregate holds no user records".into());
    }
    if aggregate.records.len() > MAX_USER_RECORDS {
        return Err(format!(
            "the aggregate holds {} user records, more than the {MAX_USER_RECORDS} one \
             invocation expands; kept whole (split it into smaller aggregates to replay it)",
            aggregate.records.len()
        ));
    }
    let AggregatedRecord {
        partition_key_table: keys,
        explicit_hash_key_table: hash_keys,
        records,
    } = aggregate;
    records
        .into_iter()
        .enumerate()
        .map(|(i, r)| user_record(i, r, &keys, &hash_keys))
        .collect()
}

/// One user record with its keys looked up in the tables.
fn user_record(
    i: usize,
    record: UserRecordMessage,
    keys: &[String],
    hash_keys: &[String],
) -> Result<UserRecord, String> {
    let lookup = |table: &[String], index: u64, what: &str| {
        usize::try_from(index)
            .ok()
            .and_then(|k| table.get(k))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "user record {i} names {what} {index} of a table of {}",
                    table.len()
                )
            })
    };
    let index = record
        .partition_key_index
        .ok_or_else(|| format!("user record {i} has no partition key index"))?;
    let partition_key = lookup(keys, index, "partition key")?;
    let explicit_hash_key = match record.explicit_hash_key_index {
        Some(index) => Some(lookup(hash_keys, index, "explicit hash key")?),
        None => None,
    };
    let data = record
        .data
        .ok_or_else(|| format!("user record {i} has no data"))?;
    Ok(UserRecord {
        partition_key,
        explicit_hash_key,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{Batch, SourcePosition};

    fn aggregate(message: &AggregatedRecord) -> Vec<u8> {
        let bytes = message.encode_to_vec();
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&bytes);
        out.extend_from_slice(Md5::digest(&bytes).as_slice());
        out
    }

    fn user(key: u64, hash: Option<u64>, data: &str) -> UserRecordMessage {
        UserRecordMessage {
            partition_key_index: Some(key),
            explicit_hash_key_index: hash,
            data: Some(data.as_bytes().to_vec()),
        }
    }

    fn record(body: Vec<u8>) -> SourceRecord {
        SourceRecord {
            position: SourcePosition {
                kind: SourceKind::Kinesis,
                source_arn: Some("arn:s".into()),
                id: "49".into(),
                shard_id: Some("shardId-0".into()),
                partition_key: Some("outer".into()),
                message_group_id: None,
                sqs_sequence_number: None,
                sub_record: None,
                event_id: None,
                arrived_at_ms: Some(7),
                kafka: None,
            },
            body,
        }
    }

    fn two_users() -> AggregatedRecord {
        AggregatedRecord {
            partition_key_table: vec!["a".into(), "b".into()],
            explicit_hash_key_table: vec!["123".into()],
            records: vec![user(0, None, "first"), user(1, Some(0), "second")],
        }
    }

    #[test]
    fn an_aggregate_expands_into_user_records_with_their_own_positions() {
        let expanded = expand(record(aggregate(&two_users())));
        assert_eq!(expanded.len(), 2);
        assert_eq!(expanded[0].body, b"first");
        assert_eq!(expanded[1].body, b"second");
        for (n, r) in expanded.iter().enumerate() {
            assert_eq!(r.position.id, "49", "the parent's sequence number");
            assert_eq!(r.position.arrived_at_ms, Some(7));
            let sub = r.position.sub_record.as_ref().expect("sub-record");
            assert_eq!(sub.sub_sequence_number, n as u64);
            assert!(defect(r).is_none());
        }
        assert_eq!(expanded[0].position.partition_key.as_deref(), Some("a"));
        assert_eq!(expanded[1].position.partition_key.as_deref(), Some("b"));
        let hash = expanded[1].position.sub_record.as_ref();
        assert_eq!(
            hash.and_then(|s| s.explicit_hash_key.as_deref()),
            Some("123")
        );
    }

    #[test]
    fn plain_records_pass_through() {
        let plain = record(b"{\"op\":\"put\"}".to_vec());
        let expanded = expand(plain.clone());
        assert_eq!(expanded.len(), 1);
        assert_eq!(expanded[0].body, plain.body);
        assert!(defect(&plain).is_none());
    }

    fn rejected(body: Vec<u8>) -> String {
        let r = record(body);
        assert_eq!(expand(r.clone()).len(), 1, "kept whole");
        let why = defect(&r).expect("a defect");
        assert_eq!(why.code, RejectionCode::BadAggregate);
        why.message
    }

    #[test]
    fn malformed_aggregates_are_kept_whole_with_a_reason() {
        let good = aggregate(&two_users());
        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(rejected(flipped).contains("MD5"));
        assert!(rejected(good[..good.len() - 3].to_vec()).contains("MD5"));
        assert!(rejected(MAGIC.to_vec()).contains("too short"));

        // A checksum over bytes that are not an AggregatedRecord.
        let garbage = [0x1a, 0xff, 0xff, 0xff];
        let mut body = MAGIC.to_vec();
        body.extend_from_slice(&garbage);
        body.extend_from_slice(Md5::digest(garbage).as_slice());
        assert!(rejected(body).contains("protobuf"));

        let mut bad_index = two_users();
        bad_index.records[1].partition_key_index = Some(5);
        assert!(rejected(aggregate(&bad_index)).contains("partition key 5 of a table of 2"));
        let mut bad_hash = two_users();
        bad_hash.records[1].explicit_hash_key_index = Some(1);
        assert!(rejected(aggregate(&bad_hash)).contains("explicit hash key 1"));
        let mut no_data = two_users();
        no_data.records[0].data = None;
        assert!(rejected(aggregate(&no_data)).contains("no data"));
        let empty = AggregatedRecord::default();
        assert!(rejected(aggregate(&empty)).contains("no user records"));
    }

    #[test]
    fn the_fixture_made_by_the_python_aggregator_expands() {
        // events/ratchet-kinesis-aggregated.json: made by aws-kinesis-agg (scripts/kpl-events.py).
        let event: serde_json::Value = serde_json::from_str(include_str!(
            "../../../../events/ratchet-kinesis-aggregated.json"
        ))
        .expect("fixture");
        let parents = event["Records"].as_array().map_or(0, Vec::len);
        let batch = Batch::from_event(event).expect("kinesis");
        assert!(batch.records.len() > parents, "sub-records expanded");
        for r in &batch.records {
            assert!(defect(r).is_none());
            assert!(serde_json::from_slice::<serde_json::Value>(&r.body).is_ok());
        }
    }
}
