//! What fits one item on the lock path: an `Update` or `Put` saves the item as its image
//! beside its new value, and both must fit DynamoDB's 400 KB item limit. The item is sized as
//! committed: the protocol attributes already on it (this attempt's lock, or another
//! transaction's lock and image) are never counted as its size.

use crate::txn::format::ATTR_IMAGE;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;

use crate::ddb::item::{item_size, item_to_json, Item};
use crate::txn::item::{lock_of, strip_protocol};
use crate::txn::record::parse_owner;
use crate::txn::request::Operation;
use crate::txn::resolve::Resolved;

/// DynamoDB's item size limit (400 KB).
const MAX_ITEM_BYTES: usize = 400 * 1024;
/// Bytes the protocol's attributes add to a locked item beside its image: the lock, the
/// token and the markers' names and values, with room to spare.
const LOCK_OVERHEAD_BYTES: usize = 256;

/// Why `r`'s lock write by the attempt `owner` could never fit one item, from the item as read
/// (`current`): an `Update` or `Put` saves the item as its image beside the new value, so both
/// must fit 400 KB. The image is the item as committed ([`committed_size`]); the new value is
/// estimated before it exists: a `Put`'s item, or an `Update`'s image plus its request's values
/// (an upper bound for `SET` and `ADD`). An item this attempt already holds passes: its lock
/// write landed. Deterministic for the same committed data (never on what a resumed attempt or
/// another transaction left on the item), and checked before anything is locked
/// (`item_too_large`), never after.
pub(in crate::txn) fn too_large_to_lock(
    owner: &str,
    r: &Resolved,
    current: Option<&Item>,
) -> Option<String> {
    let current = current?;
    let own = lock_of(current).and_then(parse_owner);
    if own.is_some() && own == parse_owner(owner) {
        return None;
    }
    let image = committed_size(current);
    let values = || -> usize {
        r.request
            .attribute_values()
            .map(|v| item_size(&v.into_iter().collect()))
            .unwrap_or_default()
    };
    let new = match &r.request.op {
        Operation::Put { item } => crate::ddb::item::json_to_item(item)
            .map(|i| item_size(&i))
            .unwrap_or_default(),
        Operation::Update { .. } => image + values(),
        Operation::Delete { .. } | Operation::ConditionCheck { .. } => return None,
    };
    let total = image + new + LOCK_OVERHEAD_BYTES;
    (total > MAX_ITEM_BYTES).then(|| {
        format!(
            "{} of item {} of table {}: the lock path saves its image ({image} bytes) beside its \
             new value (about {new} bytes), over DynamoDB's {MAX_ITEM_BYTES}-byte item limit",
            r.request.op.tag(),
            item_to_json(r.key.clone()).map_or(Value::Null, Value::Object),
            r.request.table,
        )
    })
}

/// The size of `item` once whatever holds it is decided, without protocol attributes: its
/// values, or the image another transaction's lock saved (whichever is larger, as either may be
/// what the lock write finds).
fn committed_size(item: &Item) -> usize {
    let values = item_size(&strip_protocol(item.clone()));
    let saved = match item.get(ATTR_IMAGE) {
        Some(AttributeValue::M(image)) => item_size(image),
        _ => 0,
    };
    values.max(saved)
}

/// Whether DynamoDB's message refusing a lock write is about the item's size ("Item size
/// has exceeded the maximum allowed size", "Item size to update has exceeded …").
pub(in crate::txn) fn item_size_exceeded(message: &str) -> bool {
    message.to_ascii_lowercase().contains("item size")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::txn::item::s;

    fn resolved(request: Value) -> Resolved {
        crate::txn::resolve::resolved_for_test(request)
    }

    fn item() -> Item {
        Item::from([("PK".to_string(), s("a"))])
    }

    #[test]
    fn an_update_that_cannot_carry_its_image_is_too_large_to_lock() {
        let r = resolved(json!({"Update":{"TableName":"Accounts","Key":{"PK":"a"},
            "UpdateExpression":"SET n = :n","ExpressionAttributeValues":{":n":1}}}));
        let mut big = item();
        big.insert("pad".into(), s("p".repeat(210_000)));
        let why = too_large_to_lock("t#1", &r, Some(&big)).expect("too large");
        assert!(
            why.contains("Update of item {\"PK\":\"a\"} of table Accounts"),
            "{why}"
        );
        let mut fits = item();
        fits.insert("pad".into(), s("p".repeat(190_000)));
        assert_eq!(too_large_to_lock("t#1", &r, Some(&fits)), None);
        assert_eq!(
            too_large_to_lock("t#1", &r, None),
            None,
            "no image: DynamoDB decides"
        );
        let check = resolved(
            json!({"ConditionCheck":{"TableName":"Accounts","Key":{"PK":"a"},
            "ConditionExpression":"attribute_exists(PK)"}}),
        );
        assert_eq!(
            too_large_to_lock("t#1", &check, Some(&big)),
            None,
            "a keep lock"
        );
        assert!(item_size_exceeded(
            "Item size to update has exceeded the maximum allowed size"
        ));
    }

    #[test]
    fn an_item_is_sized_as_committed_never_with_the_lock_and_image_on_it() {
        let r = resolved(json!({"Update":{"TableName":"Accounts","Key":{"PK":"a"},
            "UpdateExpression":"SET n = :n","ExpressionAttributeValues":{":n":1}}}));
        let mut values = item();
        values.insert("pad".into(), s("p".repeat(150_000)));
        // Held by another transaction: its new value beside the image it saved.
        let mut held = values.clone();
        held.insert(ATTR_IMAGE.into(), AttributeValue::M(values.clone()));
        held.insert("_txLock".into(), s("u#1"));
        held.insert("_txVer".into(), s("0123456789abcdef0123456789abcdef"));
        assert_eq!(committed_size(&held), item_size(&values));
        assert_eq!(too_large_to_lock("t#1", &r, Some(&held)), None);
        // Its image larger than its new value: the image counts.
        let mut small = item();
        small.insert(ATTR_IMAGE.into(), AttributeValue::M(values.clone()));
        assert_eq!(committed_size(&small), item_size(&values));
        // This attempt's own lock (any shape): the write landed, nothing to check.
        let mut big = held.clone();
        big.insert("pad".into(), s("p".repeat(250_000)));
        big.insert("_txLock".into(), s("t#1"));
        assert_eq!(too_large_to_lock("t#1", &r, Some(&big)), None);
        big.insert("_txLock".into(), s("t#1#k"));
        assert_eq!(too_large_to_lock("t#1", &r, Some(&big)), None);
        big.insert("_txLock".into(), s("t#2"));
        assert!(too_large_to_lock("t#1", &r, Some(&big)).is_some());
    }
}
