#[test]
fn sweep_keys_are_stable_and_listed() {
    let key = super::sweep_key("t-1");
    assert!(key.starts_with("open#"));
    assert_eq!(key, super::sweep_key("t-1"));
    assert!(super::sweep_keys().contains(&key));
}

use super::*;

#[test]
fn owner_round_trips() {
    assert_eq!(parse_owner(&owner("t-1", 3)), Some(("t-1", 3)));
    let keeps = lock_value(&owner("t#k", 3), true);
    assert_eq!(keeps, "t#k#3#k");
    assert!(keeps_values(&keeps) && !keeps_values(&owner("t#k", 3)));
    assert_eq!(parse_owner(&keeps), Some(("t#k", 3)));
    // What a version without the suffix does: its attempt is no number, no owner.
    let (_, attempt) = keeps.rsplit_once('#').expect("a separator");
    assert!(attempt.parse::<u64>().is_err());
}

#[test]
fn headers_decode_with_typed_reasons() {
    let mut item = header_key("t-1");
    item.insert(ATTR_STATE.into(), s("completed"));
    item.insert(ATTR_VERSION.into(), n(4));
    item.insert(ATTR_REASON.into(), s("conflict"));
    item.insert(ATTR_DECISION.into(), s("rolled_back"));
    item.insert(
        ATTR_TOKENS.into(),
        AttributeValue::M(Item::from([("1".to_string(), s("abc"))])),
    );
    let header = TxHeader::try_from(&item).expect("header");
    assert_eq!(header.reason, Some(RollbackReason::Conflict));
    assert_eq!(header.decision(), Some(TxState::RolledBack));
    assert_eq!(header.tokens, BTreeMap::from([(1, "abc".to_string())]));
    assert_eq!((header.attempt, header.parts), (1, 0));

    item.insert(ATTR_REASON.into(), s("from_the_future"));
    let header = TxHeader::try_from(&item).expect("unknown reasons decode");
    assert_eq!(
        header.reason,
        Some(RollbackReason::Other("from_the_future".into()))
    );

    item.insert(ATTR_STATE.into(), s("exploded"));
    assert!(matches!(
        TxHeader::try_from(&item),
        Err(StoreError::Inconsistent(_))
    ));
}

#[test]
fn reasons_round_trip() {
    for reason in [
        RollbackReason::ConditionFailed,
        RollbackReason::InvalidRequest,
        RollbackReason::Conflict,
        RollbackReason::Abandoned,
        RollbackReason::Read,
    ] {
        assert_eq!(RollbackReason::parse(reason.as_str()), reason);
    }
}

/// The reasons the release before `item_too_large` (`4aa95ce`) parses as final: every
/// final reason this release stores must be one of them, or a redelivery reaching that
/// release would restart a transaction this one ended (review X2).
#[test]
fn every_final_reason_is_stored_as_one_the_previous_release_reads_as_final() {
    const PREVIOUS_FINAL: [&str; 3] = ["condition_failed", "invalid_request", "read"];
    for reason in [
        RollbackReason::ConditionFailed,
        RollbackReason::InvalidRequest,
        RollbackReason::Conflict,
        RollbackReason::Abandoned,
        RollbackReason::Read,
        RollbackReason::ItemTooLarge,
    ] {
        let (stored, detail) = reason.stored();
        assert_eq!(
            PREVIOUS_FINAL.contains(&stored),
            reason.is_final(),
            "{reason:?} stored as {stored:?}"
        );
        assert_eq!(RollbackReason::parse_stored(stored, detail), reason);
    }
    // A record this release wrote before the detail existed still reads as it was.
    assert_eq!(
        RollbackReason::parse_stored("item_too_large", None),
        RollbackReason::ItemTooLarge
    );
}
