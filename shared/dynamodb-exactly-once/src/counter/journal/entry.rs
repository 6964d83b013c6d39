//! The journal table's items as the writer puts them (one per idempotency key): names and
//! encoding. The roll-up's side (stream images, sequence numbers, watermarks, its own items)
//! is in `event`.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

pub(crate) use crate::counter::format::{
    ADD_ATTRIBUTE, ARRIVED_ATTRIBUTE, AT_ATTRIBUTE, ITEM_ATTRIBUTE, JOURNAL_KEY_ATTRIBUTE,
    JOURNAL_SORT_ATTRIBUTE, TTL_ATTRIBUTE,
};
use crate::counter::CounterRecord;
use crate::ddb::{Item, ItemKey, StoreError};

/// A journal item is kept at least this long after its first put, whatever the window of the
/// writer that put it first (the TTL is the first put's: a put again leaves the item as it
/// is), so that every writer at the default window or below finds it.
pub(crate) const MIN_RETENTION: std::time::Duration =
    crate::counter::config::DEFAULT_JOURNAL_WINDOW;
/// A journal item is kept this much longer than the window: a writer whose clock is up to an
/// hour behind still keeps its keys for the whole window.
pub(crate) const TTL_SLACK_SECONDS: u64 = 3600;
/// Records per `BatchWriteItem` (DynamoDB's limit).
pub(crate) const MAX_JOURNAL_BATCH: usize = crate::ddb::batch::BATCH_WRITE_ITEMS;

/// The partition key of `item`'s journal items: 96 bits of SHA-256 over its canonical key,
/// base64url (16 characters), and with `spread` above 1, `#` and the key's sub-partition
/// (0 to spread - 1, from the key's hash): a hot counter's keys spread over that many
/// partitions.
pub(super) fn journal_partition(item: &ItemKey, hash: &str, spread: u32) -> String {
    let tag = URL_SAFE_NO_PAD.encode(&Sha256::digest(item.canonical().as_bytes())[..12]);
    if spread <= 1 {
        return tag;
    }
    let digest = Sha256::digest(hash.as_bytes());
    let n = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    format!("{tag}#{}", n % spread)
}

/// The journal key (partition, sort) of `record`.
pub(super) fn journal_key(record: &CounterRecord, spread: u32) -> (String, String) {
    (
        journal_partition(&record.key, &record.hashed_key, spread),
        record.hashed_key.clone(),
    )
}

/// The journal item of `record`, kept until `ttl` (epoch seconds).
pub(super) fn journal_item(
    record: &CounterRecord,
    spread: u32,
    ttl: u64,
    now_ms: u64,
) -> Result<Item, StoreError> {
    let (pk, sk) = journal_key(record, spread);
    let add = record
        .add
        .iter()
        .map(|(name, delta)| (name.clone(), AttributeValue::N(delta.canonical())))
        .collect();
    let mut item = HashMap::from([
        (JOURNAL_KEY_ATTRIBUTE.to_string(), AttributeValue::S(pk)),
        (JOURNAL_SORT_ATTRIBUTE.to_string(), AttributeValue::S(sk)),
        (
            ITEM_ATTRIBUTE.to_string(),
            AttributeValue::M(record.key.to_item()?),
        ),
        (ADD_ATTRIBUTE.to_string(), AttributeValue::M(add)),
        (
            TTL_ATTRIBUTE.to_string(),
            AttributeValue::N(ttl.to_string()),
        ),
        (
            AT_ATTRIBUTE.to_string(),
            AttributeValue::N(now_ms.to_string()),
        ),
    ]);
    if let Some(arrived) = record.arrived {
        item.insert(
            ARRIVED_ATTRIBUTE.to_string(),
            AttributeValue::N(arrived.to_string()),
        );
    }
    Ok(item)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_items_keys_share_a_partition_unless_spread() {
        let item = ItemKey::partition("PK", "a").expect("key");
        let p1 = journal_partition(&item, "h1", 1);
        assert_eq!(p1, journal_partition(&item, "h2", 1));
        assert_eq!(p1.len(), 16);
        let spread: std::collections::BTreeSet<String> = (0..64)
            .map(|i| journal_partition(&item, &format!("h{i}"), 4))
            .collect();
        assert_eq!(spread.len(), 4, "{spread:?}");
        assert!(spread.iter().all(|p| p.starts_with(&format!("{p1}#"))));
    }
}
