//! Replication: item changes (DynamoDB stream records) as ratchet records, so that a replica
//! converges to the source table whatever the redelivery, order or shard parallelism.
//!
//! | change | record |
//! |---|---|
//! | `INSERT`, `MODIFY` | put of `NewImage`, minus the skipped attributes ([`Replication`]) |
//! | `MODIFY` whose `NewImage` has `<deleted attribute> = true` (a ratchet source's tombstone) | delete |
//! | `REMOVE` (a request or TTL) | delete (a tombstone in the replica) |
//!
//! The timestamp is the change's sequence number ([`Ts::from_digits`]: up to 40 digits in
//! DynamoDB Streams, stored as a fixed-width digit string). Sequence numbers grow with the
//! changes of one item (a key's changes stay in one shard, in order), so the greatest one is
//! the source's latest state, and the ratchet keeps it whatever arrived when. Images stay
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
    if matches!(
        image.get(&config.deleted_attribute),
        Some(AttributeValue::Bool(true))
    ) {
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
            ("Timestamp".into(), AttributeValue::N("5".into())),
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
