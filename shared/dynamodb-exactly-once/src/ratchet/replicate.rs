//! Replication: item changes (DynamoDB stream records) as ratchet records, so that a replica
//! converges to the source table whatever the redelivery, order or shard parallelism.
//!
//! | change | record |
//! |---|---|
//! | `INSERT`, `MODIFY` | put of `NewImage`, minus the skipped attributes ([`Replication`]) |
//! | `INSERT`, `MODIFY` of a ratchet-written item (a put token, a timestamp, no flag, no TTL) | put, the source's version attributes replaced by the replica's |
//! | `MODIFY` whose `NewImage` is a ratchet source's tombstone (tie-break `"1"`, flag `true`) | delete |
//! | `INSERT`, `MODIFY` with any other attribute named like a protocol attribute | refused, `reserved_attribute` (copying it would drop it or make a tombstone) |
//! | `REMOVE` (a request or TTL) | delete (a tombstone in the replica) |
//!
//! The timestamp is the change's sequence number ([`Ts::from_digits`]: up to 40 digits in
//! DynamoDB Streams, stored as a fixed-width digit string). Assumed (see the protocol page's
//! sequence-number contract): one item's later change has a greater sequence number, across
//! a parent shard and its children too; the greatest one is then the source's latest state,
//! and the ratchet keeps it whatever arrived when. Images stay
//! attribute values end to end (sets, binaries and 38-digit numbers are copied exactly); the
//! put's tie-break token hashes the typed canonical item ([`canonical_item`]).
//!
//! Write cost: the ratchet's (one conditional `PutItem` per key per batch). Failure modes: a
//! put without `NewImage` (a `KEYS_ONLY` or `OLD_IMAGE` stream), a sequence number that is not
//! digits, a key JSON cannot carry exactly (binary), or a source attribute named like one of
//! the replica's protocol attributes is rejected (`invalid_change`, `invalid_key`,
//! `reserved_attribute`) and kept as a dead letter.

use crate::ratchet::format::{DELETE_TOKEN, LAYOUT_ATTRIBUTE};
use aws_sdk_dynamodb::types::AttributeValue;

use super::config::{RatchetConfig, Replication};
use super::record::{check_key, delete, finish_put, is_put_token, put_token, RatchetRecord};
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
    check_key(config, &key)?;
    if change.kind == ChangeKind::Remove {
        return Ok(delete(key, ts));
    }
    let image = change.require_new_image()?;
    if source_form(config, image)? == SourceForm::RatchetTombstone {
        return Ok(delete(key, ts));
    }
    let item: Item = image
        .iter()
        .filter(|(name, _)| *name != LAYOUT_ATTRIBUTE && !replication.skips(config, name))
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

/// What a source image is, judged by the replica's protocol attribute names.
#[derive(Debug, PartialEq, Eq)]
enum SourceForm {
    /// None of the names: the item's own attributes, copied.
    Plain,
    /// A ratchet-written live item (a version of the names' shape, no tombstone flag or TTL):
    /// its version attributes are the source's and give way to the replica's.
    RatchetItem,
    /// A ratchet-written tombstone (tie-break `"1"`, flag `true`): a delete.
    RatchetTombstone,
}

/// The source image's form; `reserved_attribute` when it uses one of the replica's protocol
/// names for data of its own (a soft-delete flag, a business timestamp, an expiry): copying it
/// would drop the attribute or read the item as a tombstone.
fn source_form(config: &RatchetConfig, image: &Item) -> Result<SourceForm, Rejection> {
    let present: Vec<usize> = config
        .protocol_attributes()
        .iter()
        .enumerate()
        .filter(|(_, name)| image.contains_key(**name))
        .map(|(i, _)| i)
        .collect();
    let Some(&first) = present.first() else {
        return Ok(SourceForm::Plain);
    };
    let token = image
        .get(&config.tie_break_attribute)
        .and_then(|v| v.as_s().ok());
    let has = |name: &str| image.contains_key(name);
    let tombstone_flag = image.get(&config.deleted_attribute) == Some(&AttributeValue::Bool(true));
    match token {
        Some(t) if t == DELETE_TOKEN && tombstone_flag => return Ok(SourceForm::RatchetTombstone),
        Some(t)
            if is_put_token(t)
                && has(&config.ts_attribute)
                && !has(&config.deleted_attribute)
                && !has(&config.ttl_attribute) =>
        {
            return Ok(SourceForm::RatchetItem)
        }
        _ => {}
    }
    let name = config.protocol_attributes()[first];
    Err(Rejection::new(
        RejectionCode::ReservedAttribute,
        format!(
            "source attribute {} is the replica's {} and the item is not ratchet-written: \
             name the replica's attribute otherwise ({})",
            quote(name),
            ROLE_SETTINGS[first].0,
            ROLE_SETTINGS[first].1
        ),
    ))
}

/// Each protocol attribute's role and setting, in [`RatchetConfig::protocol_attributes`] order.
const ROLE_SETTINGS: [(&str, &str); 4] = [
    ("timestamp", "RATCHET_TS_ATTRIBUTE"),
    ("tombstone flag", "RATCHET_DELETED_ATTRIBUTE"),
    ("tombstone expiry", "RATCHET_TTL_ATTRIBUTE"),
    ("tie-break", "RATCHET_TIE_BREAK_ATTRIBUTE"),
];

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
        let config = RatchetConfig::builder("t").build().expect("valid");
        replicate(&config, &Replication::default(), change)
    }

    #[test]
    fn puts_copy_the_image_without_protocol_attributes() {
        let image = Item::from([
            ("PK".into(), s("a")),
            ("Tags".into(), AttributeValue::Ss(vec!["x".into()])),
            ("Raw".into(), AttributeValue::B(Blob::new(vec![0, 255]))),
            ("_txLock".into(), s("tx")),
            ("ctr_bucket".into(), s("L")),
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
            ("Timestamp".into(), AttributeValue::N("7".into())),
            ("TieBreak".into(), s(DELETE_TOKEN)),
            ("Deleted".into(), AttributeValue::Bool(true)),
            ("TTL".into(), AttributeValue::N("1900000000".into())),
        ]);
        assert_eq!(
            map(&change(ChangeKind::Modify, Some(tombstone)))
                .expect("delete")
                .op,
            RatchetOp::Delete
        );
    }

    #[test]
    fn a_ratchet_source_item_replicates_under_the_replica_version() {
        let image = Item::from([
            ("PK".into(), s("a")),
            ("Timestamp".into(), AttributeValue::N("7".into())),
            ("TieBreak".into(), s(&format!("0{}", "ab".repeat(32)))),
            ("Rating".into(), AttributeValue::N("5".into())),
        ]);
        let record = map(&change(ChangeKind::Modify, Some(image))).expect("put");
        let RatchetOp::Put(item) = record.op else {
            panic!("a put");
        };
        assert_eq!(item["Timestamp"], record.ts.to_attribute());
        assert_eq!(item["TieBreak"], s(&record.token));
    }

    #[test]
    fn own_data_under_a_protocol_name_is_refused() {
        for (name, value) in [
            ("Deleted", AttributeValue::Bool(true)),
            ("Timestamp", AttributeValue::N("5".into())),
            ("TieBreak", s("x")),
            ("TTL", AttributeValue::N("1900000000".into())),
        ] {
            let image = Item::from([("PK".into(), s("a")), (name.into(), value)]);
            let rejection = map(&change(ChangeKind::Insert, Some(image))).expect_err(name);
            assert_eq!(rejection.code, RejectionCode::ReservedAttribute);
            assert!(rejection.message.contains(name), "{}", rejection.message);
        }
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
