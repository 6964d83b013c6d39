//! The journal's items (one per idempotency key, and the roll-up's checkpoints) and the
//! watermark attribute of a counter item: names, encoding, and decoding from stream images.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::AttributeValue as StreamValue;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::counter::CounterRecord;
use crate::ddb::{Item, ItemKey, StoreError};

/// The journal table's hash key (S).
pub const JOURNAL_KEY_ATTRIBUTE: &str = "pk";
/// The journal items' TTL attribute (N, epoch seconds): the table's TTL must be on it.
pub const TTL_ATTRIBUTE: &str = "ttl";
/// A journal item is kept at least this long after its last put, whatever the window: a
/// writer with a shorter window putting a key again does not shorten the key's life below
/// the default window of the others (the TTL is the last put's).
pub const MIN_RETENTION: std::time::Duration = crate::counter::config::DEFAULT_JOURNAL_WINDOW;
/// A journal item is kept this much longer than the window: a writer whose clock is up to an
/// hour behind still keeps its keys for the whole window.
pub const TTL_SLACK_SECONDS: u64 = 3600;
/// Records per `BatchWriteItem` (DynamoDB's limit).
pub const MAX_JOURNAL_BATCH: usize = crate::ddb::batch::BATCH_WRITE_ITEMS;
/// A shard's watermark is removed from a counter item this long after it last moved: the
/// stream keeps a record 24 hours, so no record at or below it can be read again.
pub const WATERMARK_KEEP_SECONDS: u64 = 2 * 86_400;

/// The counter item's key (M).
pub(super) const ITEM_ATTRIBUTE: &str = "k";
/// Counter name → delta (M of N).
pub(super) const ADD_ATTRIBUTE: &str = "add";
/// The idempotency key's hash (S), as [`crate::counter::hash_key`] gives it.
pub(super) const HASH_ATTRIBUTE: &str = "h";
/// Epoch milliseconds of the put (N).
pub(super) const AT_ATTRIBUTE: &str = "at";
/// Checkpoint items' keys start with this (never a journal key: those are base64url).
pub(super) const CHECKPOINT_PREFIX: &str = "~rollup#";
/// A checkpoint's last sequence number read (S).
pub(super) const SEQ_ATTRIBUTE: &str = "seq";
/// A checkpoint's shard is closed and read to its end (BOOL).
pub(super) const DONE_ATTRIBUTE: &str = "done";
/// Digits a sequence number is padded to (DynamoDB Streams: 21 to 40), so that sequence
/// numbers compare as strings.
pub(super) const SEQ_DIGITS: usize = 40;

/// The journal key of `record`: 128 bits of SHA-256 over the counter item's canonical key and
/// the idempotency key's hash, base64url (22 characters).
pub(super) fn journal_key(record: &CounterRecord) -> String {
    let mut digest = Sha256::new();
    digest.update(record.key.canonical().as_bytes());
    digest.update(b"\n");
    digest.update(record.hashed_key.as_bytes());
    URL_SAFE_NO_PAD.encode(&digest.finalize()[..16])
}

/// The journal item of `record`, kept until `ttl` (epoch seconds).
pub(super) fn journal_item(
    record: &CounterRecord,
    ttl: u64,
    now_ms: u64,
) -> Result<Item, StoreError> {
    let add = record
        .add
        .iter()
        .map(|(name, delta)| (name.clone(), AttributeValue::N(delta.to_string())))
        .collect();
    Ok(HashMap::from([
        (
            JOURNAL_KEY_ATTRIBUTE.to_string(),
            AttributeValue::S(journal_key(record)),
        ),
        (
            ITEM_ATTRIBUTE.to_string(),
            AttributeValue::M(record.key.to_item()?),
        ),
        (ADD_ATTRIBUTE.to_string(), AttributeValue::M(add)),
        (
            HASH_ATTRIBUTE.to_string(),
            AttributeValue::S(record.hashed_key.clone()),
        ),
        (
            TTL_ATTRIBUTE.to_string(),
            AttributeValue::N(ttl.to_string()),
        ),
        (
            AT_ATTRIBUTE.to_string(),
            AttributeValue::N(now_ms.to_string()),
        ),
    ]))
}

/// One journaled key as the roll-up reads it from an `INSERT`'s new image.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Event {
    /// The stream record's sequence number, padded to [`SEQ_DIGITS`].
    pub(super) seq: String,
    /// The counter item.
    pub(super) item: ItemKey,
    /// Counter name → delta.
    pub(super) add: BTreeMap<String, i64>,
    /// The idempotency key's hash.
    pub(super) hash: String,
}

/// A sequence number padded to [`SEQ_DIGITS`] (`None`: not a sequence number).
pub(super) fn padded_seq(seq: &str) -> Option<String> {
    let digits =
        seq.len() <= SEQ_DIGITS && !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| format!("{seq:0>SEQ_DIGITS$}"))
}

/// The event of a journal item's new image (`None`: a checkpoint). An image the journal did
/// not write is an error: the roll-up must not skip a key silently.
pub(super) fn event(
    seq: &str,
    image: &HashMap<String, StreamValue>,
) -> Result<Option<Event>, StoreError> {
    let bad = |what: &str| StoreError::Inconsistent(format!("journal record {seq}: {what}"));
    let Some(StreamValue::S(pk)) = image.get(JOURNAL_KEY_ATTRIBUTE) else {
        return Err(bad("no journal key"));
    };
    if pk.starts_with(CHECKPOINT_PREFIX) {
        return Ok(None);
    }
    let Some(StreamValue::M(key)) = image.get(ITEM_ATTRIBUTE) else {
        return Err(bad("no counter item key"));
    };
    let key: Item = key
        .iter()
        .map(|(name, value)| {
            Ok((
                name.clone(),
                key_value(value).ok_or_else(|| bad("key type"))?,
            ))
        })
        .collect::<Result<_, StoreError>>()?;
    let item = ItemKey::from_item(&key).map_err(|e| bad(&e.to_string()))?;
    let Some(StreamValue::M(add)) = image.get(ADD_ATTRIBUTE) else {
        return Err(bad("no deltas"));
    };
    let add = add
        .iter()
        .map(|(name, value)| match value {
            StreamValue::N(n) => n
                .parse::<i64>()
                .map(|d| (name.clone(), d))
                .map_err(|_| bad("delta")),
            _ => Err(bad("delta type")),
        })
        .collect::<Result<_, _>>()?;
    let Some(StreamValue::S(hash)) = image.get(HASH_ATTRIBUTE) else {
        return Err(bad("no key hash"));
    };
    let seq = padded_seq(seq).ok_or_else(|| bad("sequence number"))?;
    Ok(Some(Event {
        seq,
        item,
        add,
        hash: hash.clone(),
    }))
}

/// A key attribute's value (S, N or B) in the DynamoDB client's type.
fn key_value(value: &StreamValue) -> Option<AttributeValue> {
    match value {
        StreamValue::S(s) => Some(AttributeValue::S(s.clone())),
        StreamValue::N(n) => Some(AttributeValue::N(n.clone())),
        StreamValue::B(b) => Some(AttributeValue::B(b.clone())),
        _ => None,
    }
}

/// A shard's short tag in a counter item's watermark name: 66 bits of SHA-256, base64url.
pub(super) fn shard_tag(shard_id: &str) -> String {
    URL_SAFE_NO_PAD.encode(&Sha256::digest(shard_id.as_bytes())[..9])
}

/// A watermark's value: the padded sequence number, `@`, the epoch seconds it was written.
/// Compared as a string with a padded sequence number `s`, it is `< s` exactly when its
/// sequence number is.
pub(super) fn watermark_value(seq: &str, now: u64) -> String {
    format!("{seq}@{now}")
}

/// A watermark's sequence number and time.
pub(super) fn parse_watermark(value: &str) -> Option<(&str, u64)> {
    let (seq, at) = value.split_once('@')?;
    Some((seq, at.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_compare_as_padded_strings() {
        let a = padded_seq("999").expect("digits");
        let b = padded_seq("1000").expect("digits");
        assert!(a < b);
        assert_eq!(a.len(), SEQ_DIGITS);
        assert!(padded_seq("12a").is_none() && padded_seq("").is_none());
        assert!(padded_seq(&"1".repeat(41)).is_none());
        // A watermark at `b` is not below `b` (applied), and is below anything later.
        let wm = watermark_value(&b, 1_700_000_000);
        assert!(wm.as_str() >= b.as_str());
        assert!(wm.as_str() < padded_seq("1001").expect("digits").as_str());
        assert!(wm.as_str() > a.as_str());
        assert_eq!(parse_watermark(&wm), Some((b.as_str(), 1_700_000_000)));
    }

    #[test]
    fn a_checkpoint_image_is_no_event_and_a_foreign_image_is_an_error() {
        let checkpoint = HashMap::from([(
            JOURNAL_KEY_ATTRIBUTE.to_string(),
            StreamValue::S(format!("{CHECKPOINT_PREFIX}shardId-1")),
        )]);
        assert_eq!(event("1", &checkpoint).expect("checkpoint"), None);
        let foreign = HashMap::from([(
            JOURNAL_KEY_ATTRIBUTE.to_string(),
            StreamValue::S("abc".into()),
        )]);
        assert!(event("2", &foreign).is_err());
    }
}
