//! The roll-up's side of the journal's items: decoding stream images into events, stream
//! sequence numbers, the watermark attributes of a counter item, and the reserved partitions
//! of the roll-up's own items (dead letters).

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

use super::entry::{
    ADD_ATTRIBUTE, ARRIVED_ATTRIBUTE, AT_ATTRIBUTE, ITEM_ATTRIBUTE, JOURNAL_KEY_ATTRIBUTE,
    JOURNAL_SORT_ATTRIBUTE,
};
use crate::ddb::number::Number;
use crate::ddb::{Item, ItemKey};
pub(crate) use crate::counter::format::{RESERVED_PREFIX, DEAD_PARTITION};

/// How long DynamoDB Streams keeps a record (24 hours): after it, the record is trimmed and no
/// reader (an event source mapping included) can get it.
pub(super) const STREAM_RETENTION_SECS: u64 = 86_400;

/// Digits a sequence number may have (DynamoDB Streams: 21 to 40).
pub(super) const SEQ_DIGITS: usize = 40;
/// Bytes of a sequence number as a watermark holds it (big-endian; 10^40 < 256^17).
const SEQ_BYTES: usize = 17;

/// A stream sequence number, as a fixed-width big-endian integer: ordered as the numbers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Seq([u8; SEQ_BYTES]);

impl Seq {
    /// The sequence number spelled `digits` (`None`: not 1 to 40 decimal digits).
    pub(super) fn parse(digits: &str) -> Option<Seq> {
        if digits.is_empty() || digits.len() > SEQ_DIGITS {
            return None;
        }
        let mut bytes = [0u8; SEQ_BYTES];
        for d in digits.bytes() {
            if !d.is_ascii_digit() {
                return None;
            }
            let mut carry = u16::from(d - b'0');
            for byte in bytes.iter_mut().rev() {
                let v = u16::from(*byte) * 10 + carry;
                *byte = (v & 0xff) as u8;
                carry = v >> 8;
            }
        }
        Some(Seq(bytes))
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// One journaled key as the roll-up reads it from an `INSERT`'s new image.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Event {
    /// The batch's lane it came through (its index in the batch's lanes).
    pub(super) shard: usize,
    /// The stream record's sequence number.
    pub(super) seq: Seq,
    /// The sequence number as the stream spells it (dead letters name it).
    pub(super) seq_text: String,
    /// The counter item.
    pub(super) item: ItemKey,
    /// Counter name → delta.
    pub(super) add: BTreeMap<String, Number>,
    /// The idempotency key's hash (the journal item's sort key).
    pub(super) hash: String,
    /// The journal item's partition key.
    pub(super) pk: String,
    /// The key's first put (epoch ms), when the image has it.
    pub(super) at_ms: Option<u64>,
    /// When the record's source received it (epoch s), when the image has it.
    pub(super) arrived: Option<u64>,
}

/// What one stream record of the journal is to the roll-up.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Decoded {
    /// A journaled key.
    Event(Box<Event>),
    /// Nothing to count: a key put again, a TTL deletion.
    Skip,
    /// The roll-up's own items (checkpoints, dead letters): they never move a checkpoint, so
    /// that saving one makes no work for the next run.
    Own,
    /// An image the journal's writer did not write (a stray item, a stream without new
    /// images): kept as a dead letter with this reason, never counted, never a run error.
    Invalid(String),
}

/// Decode one stream record of the journal (`insert`: an `INSERT`) whose key and new image
/// are attribute values (as an event source mapping delivers them).
pub(super) fn decode_item(
    shard: usize,
    seq: &str,
    insert: bool,
    keys: Option<&Item>,
    image: Option<&Item>,
) -> Decoded {
    let reserved = |m: Option<&Item>| {
        matches!(m.and_then(|m| m.get(JOURNAL_KEY_ATTRIBUTE)),
            Some(AttributeValue::S(pk)) if pk.starts_with(RESERVED_PREFIX))
    };
    if reserved(keys) || reserved(image) {
        return Decoded::Own;
    }
    if !insert {
        return Decoded::Skip;
    }
    let Some(image) = image else {
        return Decoded::Invalid(
            "an INSERT without a new image (the stream needs NEW_IMAGE)".into(),
        );
    };
    match event(shard, seq, image) {
        Ok(event) => Decoded::Event(Box::new(event)),
        Err(reason) => Decoded::Invalid(reason),
    }
}

fn event(shard: usize, seq: &str, image: &Item) -> Result<Event, String> {
    let Some(AttributeValue::S(pk)) = image.get(JOURNAL_KEY_ATTRIBUTE) else {
        return Err("no journal partition key".into());
    };
    let Some(AttributeValue::S(hash)) = image.get(JOURNAL_SORT_ATTRIBUTE) else {
        return Err("no key hash (sort key)".into());
    };
    let Some(AttributeValue::M(key)) = image.get(ITEM_ATTRIBUTE) else {
        return Err("no counter item key".into());
    };
    let item = ItemKey::from_item(key).map_err(|e| format!("counter item key: {e}"))?;
    let Some(AttributeValue::M(add)) = image.get(ADD_ATTRIBUTE) else {
        return Err("no deltas".into());
    };
    let add = add
        .iter()
        .map(|(name, value)| match value {
            AttributeValue::N(n) => Number::parse(n)
                .map(|d| (name.clone(), d))
                .map_err(|_| format!("delta of {}", crate::text::quote(name))),
            _ => Err("delta type".into()),
        })
        .collect::<Result<_, String>>()?;
    let number = |name: &str| match image.get(name) {
        Some(AttributeValue::N(n)) => n.parse().ok(),
        _ => None,
    };
    let at_ms = number(AT_ATTRIBUTE);
    let arrived = number(ARRIVED_ATTRIBUTE);
    Ok(Event {
        shard,
        seq: Seq::parse(seq).ok_or("sequence number")?,
        seq_text: seq.to_string(),
        item,
        add,
        hash: hash.clone(),
        pk: pk.clone(),
        at_ms,
        arrived,
    })
}

/// A shard's tag in a counter item's watermark name: 48 bits of SHA-256, base64url.
pub(super) fn shard_tag(shard_id: &str) -> String {
    URL_SAFE_NO_PAD.encode(&Sha256::digest(shard_id.as_bytes())[..6])
}

/// The watermark attribute of `shard` on a counter item: `<prefix>w_<tag>`.
pub(super) fn watermark_name(prefix: &str, shard_id: &str) -> String {
    format!("{prefix}w_{}", shard_tag(shard_id))
}

/// A watermark's value (B, 21 bytes): the sequence number's 17 bytes, then the epoch seconds
/// it was written (4 bytes). Compared with a sequence number's 17 bytes `s` (unsigned, byte
/// by byte, as DynamoDB compares binary values), it is `< s` exactly when its sequence
/// number is: an equal prefix makes it the longer, so the greater.
pub(super) fn watermark_value(seq: &Seq, now_secs: u64) -> AttributeValue {
    let mut bytes = seq.bytes().to_vec();
    let secs = u32::try_from(now_secs).unwrap_or(u32::MAX);
    bytes.extend_from_slice(&secs.to_be_bytes());
    AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(bytes))
}

/// A watermark's sequence number and time (`None`: not a watermark value).
pub(super) fn parse_watermark(value: &AttributeValue) -> Option<(Seq, u64)> {
    let AttributeValue::B(blob) = value else {
        return None;
    };
    let bytes = blob.as_ref();
    if bytes.len() != SEQ_BYTES + 4 {
        return None;
    }
    let mut seq = [0u8; SEQ_BYTES];
    seq.copy_from_slice(&bytes[..SEQ_BYTES]);
    let mut secs = [0u8; 4];
    secs.copy_from_slice(&bytes[SEQ_BYTES..]);
    Some((Seq(seq), u64::from(u32::from_be_bytes(secs))))
}

/// A sequence number as a condition's value (B, 17 bytes).
pub(super) fn seq_value(seq: &Seq) -> AttributeValue {
    AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(
        seq.bytes().to_vec(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(s: &str) -> Seq {
        Seq::parse(s).expect("digits")
    }

    #[test]
    fn sequence_numbers_order_as_numbers_whatever_their_length() {
        assert!(seq("999") < seq("1000"));
        assert!(seq("000000000000000000000000000000000000999") == seq("999"));
        assert!(seq(&"9".repeat(40)) > seq(&"9".repeat(39)));
        assert!(Seq::parse("12a").is_none() && Seq::parse("").is_none());
        assert!(Seq::parse(&"1".repeat(41)).is_none());
    }

    #[test]
    fn a_watermark_is_below_a_sequence_number_exactly_when_its_own_is() {
        let compare = |mark: &AttributeValue, s: &Seq| match mark {
            AttributeValue::B(b) => b.as_ref().cmp(s.bytes()),
            _ => panic!("binary"),
        };
        let at = seq("44215845000000000174504");
        let mark = watermark_value(&at, 1_800_000_000);
        assert_eq!(compare(&mark, &at), std::cmp::Ordering::Greater); // applied
        assert_eq!(
            compare(&mark, &seq("44215845000000000174505")),
            std::cmp::Ordering::Less
        );
        assert_eq!(
            compare(&mark, &seq("44215845000000000174503")),
            std::cmp::Ordering::Greater
        );
        assert_eq!(parse_watermark(&mark), Some((at, 1_800_000_000)));
        assert_eq!(
            watermark_name("ctr_", "shardId-1").len(),
            "ctr_w_".len() + 8
        );
    }

    #[test]
    fn the_roll_ups_own_items_are_skipped_and_a_foreign_image_is_invalid() {
        let own = Item::from([(
            JOURNAL_KEY_ATTRIBUTE.to_string(),
            AttributeValue::S(DEAD_PARTITION.to_string()),
        )]);
        assert_eq!(decode_item(0, "1", true, Some(&own), Some(&own)), Decoded::Own);
        let foreign = Item::from([(
            JOURNAL_KEY_ATTRIBUTE.to_string(),
            AttributeValue::S("abc".into()),
        )]);
        assert!(matches!(
            decode_item(0, "2", true, Some(&foreign), Some(&foreign)),
            Decoded::Invalid(_)
        ));
        assert!(matches!(
            decode_item(0, "3", true, Some(&foreign), None),
            Decoded::Invalid(_)
        ));
        assert_eq!(decode_item(0, "4", false, Some(&foreign), None), Decoded::Skip);
    }
}
