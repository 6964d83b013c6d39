//! Replication: item changes (DynamoDB stream records) as ratchet records, so that a replica
//! converges to the source table whatever the redelivery, order or shard parallelism.
//!
//! | change | record |
//! |---|---|
//! | `INSERT`, `MODIFY` | put of `NewImage`, minus the skipped attributes ([`Replication`]) |
//! | `MODIFY` whose `NewImage` has `<deleted attribute> = true` (a ratchet source's tombstone: it also carries the timestamp and tie-break attributes) | delete |
//! | a `NewImage` that carries a protocol attribute name but is not a ratchet item | refused (`reserved_attribute`) |
//! | `REMOVE` (a request or TTL) | delete (a tombstone in the replica) |
//!
//! The timestamp is the change's sequence number ([`Ts::from_digits`]: up to 40 digits in
//! DynamoDB Streams, stored as a fixed-width digit string). The contract relied on: the
//! sequence numbers of one item's changes grow with the changes, across a stream's shard
//! lineage too (AWS documents per-item ordering in DynamoDB Streams, a child shard's records
//! following its parent's, and sequence numbers that increase over time; it does not state a
//! numeric comparison across shards in so many words, so this is the one assumption). Under
//! it the greatest one is the source's latest state, and the ratchet keeps it whatever arrived
//! when, in whatever order Lambda processes parent and child shards. Images stay
//! attribute values end to end (sets, binaries and 38-digit numbers are copied exactly); the
//! put's tie-break token hashes the typed canonical item ([`canonical_item`]).
//!
//! Write cost: the ratchet's (one conditional `PutItem` per key per batch). Failure modes: a
//! put without `NewImage` (a `KEYS_ONLY` or `OLD_IMAGE` stream), a sequence number that is not
//! digits, or a key JSON cannot carry exactly (binary) is rejected (`invalid_change`,
//! `invalid_key`) and kept as a dead letter.

use aws_sdk_dynamodb::types::AttributeValue;

use super::config::{RatchetConfig, Replication};
use super::record::{check_not_reserved, delete, finish_put, put_token, RatchetRecord};
use super::ts::Ts;
use crate::change::{ChangeKind, ItemChange};
use crate::ddb::item::{canonical_item, Item, ItemKey};
use crate::rejection::{quote, Rejection, RejectionCode};

/// Whether `image` was written by a ratchet with this replica's attribute names (it carries
/// the timestamp and the tie-break): then its protocol attributes are the source's own and
/// are not copied. An image of any other item that carries one of those names is refused
/// (`reserved_attribute`): reading its `Deleted: true` as a tombstone, or dropping its
/// `Timestamp` column, would corrupt the replica.
fn from_a_ratchet(config: &RatchetConfig, image: &Item) -> Result<bool, Rejection> {
    let ratchet =
        image.contains_key(&config.ts_attribute) && image.contains_key(&config.tie_break_attribute);
    if ratchet {
        return Ok(true);
    }
    let settings = [
        "ts_attribute",
        "deleted_attribute",
        "ttl_attribute",
        "tie_break_attribute",
    ];
    for (name, setting) in config.protocol_attributes().iter().zip(settings) {
        if image.contains_key(*name) {
            return Err(Rejection::new(
                RejectionCode::ReservedAttribute,
                format!(
                    "the source item has an attribute {} named like the replica's {setting}: \
                     set RATCHET_{} to a name the source does not use",
                    quote(name),
                    setting.to_uppercase()
                ),
            ));
        }
    }
    Ok(false)
}

/// A ratchet source's tombstone: its deleted flag set.
fn is_tombstone(config: &RatchetConfig, image: &Item) -> bool {
    matches!(
        image.get(&config.deleted_attribute),
        Some(AttributeValue::Bool(true))
    )
}

/// The ratchet record of a change (see the module's table).
pub(super) fn replicate(
    config: &RatchetConfig,
    replication: &Replication,
    change: &ItemChange,
) -> Result<RatchetRecord, Rejection> {
    let ts = Ts::from_digits(&change.sequence_number).map_err(|e| {
        Rejection::new(
            RejectionCode::InvalidChange,
            format!("sequence number: {e}"),
        )
    })?;
    let key = ItemKey::from_item(&change.keys)
        .map_err(|m| Rejection::new(RejectionCode::InvalidKey, m))?;
    for name in change.keys.keys() {
        check_not_reserved(config, name)?;
    }
    if change.kind == ChangeKind::Remove {
        return Ok(delete(key, ts));
    }
    let image = change.require_new_image()?;
    if from_a_ratchet(config, image)? && is_tombstone(config, image) {
        return Ok(delete(key, ts));
    }
    let item: Item = image
        .iter()
        .filter(|(name, _)| !replication.skips(config, name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    for (name, value) in &change.keys {
        if item.get(name) != Some(value) {
            return Err(Rejection::new(
                RejectionCode::KeyMismatch,
                format!("NewImage attribute {} disagrees with Keys", quote(name)),
            ));
        }
    }
    let token = put_token(&canonical_item(&item));
    finish_put(config, key, ts, token, item)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ratchet::RatchetOp;
    use aws_sdk_dynamodb::primitives::Blob;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    fn change(kind: ChangeKind, new: Option<Item>) -> ItemChange {
        ItemChange {
            event_id: "e".into(),
            kind,
            keys: Item::from([("PK".into(), s("a"))]),
            new_image: new,
            old_image: None,
            sequence_number: "4421584500000000017450439000".into(),
        }
    }

    fn map(change: &ItemChange) -> Result<RatchetRecord, Rejection> {
        replicate(&RatchetConfig::new("t"), &Replication::default(), change)
    }

    #[test]
    fn puts_copy_the_image_without_protocol_attributes() {
        let image = Item::from([
            ("PK".into(), s("a")),
            ("Tags".into(), AttributeValue::Ss(vec!["x".into()])),
            ("Raw".into(), AttributeValue::B(Blob::new(vec![0, 255]))),
            ("_txLock".into(), s("tx")),
            ("ctr_bucket".into(), s("L")),
            // A ratchet source's own version: not copied.
            ("Timestamp".into(), AttributeValue::N("5".into())),
            ("TieBreak".into(), s("t")),
        ]);
        let record = map(&change(ChangeKind::Modify, Some(image))).expect("put");
        assert_eq!(record.ts.to_string(), "4421584500000000017450439000");
        let RatchetOp::Put(item) = record.op else {
            panic!("a put");
        };
        let mut names: Vec<&str> = item.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["PK", "Raw", "Tags", "TieBreak", "Timestamp"]);
        assert_eq!(item["Timestamp"], record.ts.to_attribute());
    }

    #[test]
    fn removes_and_source_tombstones_are_deletes() {
        assert_eq!(
            map(&change(ChangeKind::Remove, None)).expect("delete").op,
            RatchetOp::Delete
        );
        let tombstone = Item::from([
            ("PK".into(), s("a")),
            ("Deleted".into(), AttributeValue::Bool(true)),
            ("Timestamp".into(), AttributeValue::N("5".into())),
            ("TieBreak".into(), s("t")),
        ]);
        assert_eq!(
            map(&change(ChangeKind::Modify, Some(tombstone)))
                .expect("delete")
                .op,
            RatchetOp::Delete
        );
    }

    #[test]
    fn unusable_changes_are_rejected_with_their_code() {
        let code = |c: &ItemChange| map(c).err().map(|r| r.code);
        assert_eq!(
            code(&change(ChangeKind::Insert, None)),
            Some(RejectionCode::InvalidChange)
        );
        let mut bad_seq = change(ChangeKind::Remove, None);
        bad_seq.sequence_number = "12ab".into();
        assert_eq!(code(&bad_seq), Some(RejectionCode::InvalidChange));
        let mut binary_key = change(ChangeKind::Remove, None);
        binary_key.keys = Item::from([("PK".into(), AttributeValue::B(Blob::new(vec![1])))]);
        assert_eq!(code(&binary_key), Some(RejectionCode::InvalidKey));
        let other = Item::from([("PK".into(), s("b"))]);
        assert_eq!(
            code(&change(ChangeKind::Insert, Some(other))),
            Some(RejectionCode::KeyMismatch)
        );
    }
}
