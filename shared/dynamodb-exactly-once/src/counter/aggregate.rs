//! Aggregation: item changes (DynamoDB stream records) as counter records, so that an
//! aggregate stays exact under redelivery. The idempotency key is the change's event id
//! (`eventID`, unique per stream record), so a redelivered change counts once within the
//! window, like any counter record.
//!
//! The aggregate item is `{<key attribute>: <the source's group_by value>}` (plus a constant
//! sort key when the table has one); every configured
//! counter gets a delta (zero included, so each change is one record of one item):
//!
//! | change | `count` counter | each `sum` counter of attribute `a` |
//! |---|---|---|
//! | `INSERT` | `+1` | `+NewImage.a` |
//! | `MODIFY` | `0` | `NewImage.a − OldImage.a` |
//! | `REMOVE` | `−1` | `−OldImage.a` |
//!
//! A missing attribute counts as 0; a value that is not a number is rejected (`invalid_delta`);
//! differences are exact (DynamoDB's 38 digits: a difference beyond them is `invalid_number`). The group value is read from `Keys` (best: it never
//! changes), else from the images; a `MODIFY` that moves an item to another group is rejected
//! (`invalid_change`): moving it would take two items' writes, which one idempotent counter
//! record cannot do. Sums and `REMOVE`s need `OldImage` (stream view `NEW_AND_OLD_IMAGES`).
//!
//! Write cost and failure modes are the counter's; the mapping only builds the record.

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Map, Value};

use super::aggregation::Aggregation;
use super::{Counter, CounterRecord};
use crate::change::{ChangeKind, ItemChange};
use crate::ddb::number::{Number, NumberError};
use crate::ddb::Item;
use crate::rejection::{quote, Rejection, RejectionCode};

impl Aggregation {
    /// The counter record of a change (see the module's table).
    pub(super) fn record(
        &self,
        counter: &Counter,
        change: &ItemChange,
    ) -> Result<CounterRecord, Rejection> {
        let (new, old) = self.images(change)?;
        let group = self.group_value(change, new, old)?;
        let mut add = Map::new();
        if let Some(name) = &self.count {
            let delta = match change.kind {
                ChangeKind::Insert => 1,
                ChangeKind::Modify => 0,
                ChangeKind::Remove => -1,
            };
            add.insert(name.clone(), Value::from(delta));
        }
        for (name, attribute) in &self.sums {
            let zero = || Number::parse("0");
            let value = |image: Option<&Item>| {
                image
                    .map_or_else(zero, |i| number(i, attribute))
                    .map_err(|e| {
                        Rejection::new(
                            RejectionCode::InvalidDelta,
                            format!("{}: {e}", quote(attribute)),
                        )
                    })
            };
            let delta = value(new)?
                .checked_add(&value(old)?.negated())
                .map_err(|e| {
                    Rejection::new(
                        RejectionCode::InvalidNumber,
                        format!("the change of {}: {e}", quote(attribute)),
                    )
                })?;
            add.insert(name.clone(), Value::Number(delta.to_json()));
        }
        let mut key = Map::new();
        key.insert(self.key_attribute.clone(), group);
        if let Some((attribute, value)) = &self.sort_key {
            key.insert(attribute.clone(), Value::from(value.clone()));
        }
        let body = serde_json::json!({
            "key": key,
            "add": add,
            "idempotencyKey": change.event_id,
        });
        counter.parse_record(body.to_string().as_bytes())
    }

    /// The images a change of this kind contributes: (after, before). Sums need each one.
    fn images<'c>(
        &self,
        change: &'c ItemChange,
    ) -> Result<(Option<&'c Item>, Option<&'c Item>), Rejection> {
        let sums = !self.sums.is_empty();
        let new = match change.kind {
            ChangeKind::Remove => None,
            _ if sums => Some(change.require_new_image()?),
            _ => change.new_image.as_ref(),
        };
        let old = match change.kind {
            ChangeKind::Insert => None,
            _ if sums => Some(change.require_old_image()?),
            _ => change.old_image.as_ref(),
        };
        Ok((new, old))
    }

    /// The group value as JSON: from `Keys`, else from the images (which must agree).
    fn group_value(
        &self,
        change: &ItemChange,
        new: Option<&Item>,
        old: Option<&Item>,
    ) -> Result<Value, Rejection> {
        let name = &self.group_by;
        let value = match change.keys.get(name) {
            Some(v) => v,
            None => {
                let (a, b) = (new.and_then(|i| i.get(name)), old.and_then(|i| i.get(name)));
                if let (Some(a), Some(b)) = (a, b) {
                    if a != b {
                        return Err(Rejection::new(
                            RejectionCode::InvalidChange,
                            format!("the change moves the item to another {} group; aggregate by a key attribute", quote(name)),
                        ));
                    }
                }
                a.or(b).ok_or_else(|| {
                    Rejection::new(
                        RejectionCode::InvalidChange,
                        format!("the item has no group attribute {}", quote(name)),
                    )
                })?
            }
        };
        match value {
            AttributeValue::S(s) => Ok(Value::from(s.clone())),
            AttributeValue::N(n) => Number::parse(n)
                .map(|n| Value::Number(n.to_json()))
                .map_err(|e| {
                    Rejection::new(
                        RejectionCode::InvalidKey,
                        format!("the group value of {}: {e}", quote(name)),
                    )
                }),
            _ => Err(Rejection::new(
                RejectionCode::InvalidKey,
                format!(
                    "the group value of {} must be a string or a number",
                    quote(name)
                ),
            )),
        }
    }
}

/// An image's numeric attribute, exact (0 when absent).
fn number(image: &Item, attribute: &str) -> Result<Number, NumberError> {
    match image.get(attribute) {
        None | Some(AttributeValue::Null(_)) => Number::parse("0"),
        Some(AttributeValue::N(n)) => Number::parse(n),
        Some(_) => Err(NumberError::NotANumber(quote(attribute))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::format::DEFAULT_AGGREGATE_KEY_ATTRIBUTE;
    use crate::counter::CounterConfig;

    fn counter() -> Counter {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        Counter::new(
            aws_sdk_dynamodb::Client::from_conf(conf),
            CounterConfig::builder("totals").build().expect("valid"),
        )
    }

    fn aggregation() -> Aggregation {
        Aggregation::builder("Customer")
            .sort_key("SK", "totals")
            .count("orders")
            .sum("amount", "Amount")
            .build()
            .expect("valid")
    }

    fn order(customer: &str, amount: &str) -> Item {
        Item::from([
            ("Id".into(), AttributeValue::S("o1".into())),
            ("Customer".into(), AttributeValue::S(customer.into())),
            ("Amount".into(), AttributeValue::N(amount.into())),
        ])
    }

    fn change(kind: ChangeKind, new: Option<Item>, old: Option<Item>) -> ItemChange {
        ItemChange {
            event_id: "evt-1".into(),
            kind,
            keys: Item::from([("Id".into(), AttributeValue::S("o1".into()))]),
            new_image: new,
            old_image: old,
            sequence_number: "1".into(),
        }
    }

    fn deltas(c: &ItemChange) -> Result<Vec<(String, i64)>, RejectionCode> {
        let record = aggregation().record(&counter(), c).map_err(|r| r.code)?;
        assert_eq!(record.idempotency_key, "evt-1");
        assert_eq!(record.key.canonical(), r#"{"PK":"ann","SK":"totals"}"#);
        Ok(record
            .add
            .into_iter()
            .map(|(k, v)| (k, v.to_i64().expect("an integer")))
            .collect())
    }

    #[test]
    fn inserts_modifies_and_removes_give_the_documented_deltas() {
        let d = |a: &str, n: i64| (a.to_string(), n);
        let insert = change(ChangeKind::Insert, Some(order("ann", "30")), None);
        assert_eq!(deltas(&insert), Ok(vec![d("amount", 30), d("orders", 1)]));
        let modify = change(
            ChangeKind::Modify,
            Some(order("ann", "45")),
            Some(order("ann", "30")),
        );
        assert_eq!(deltas(&modify), Ok(vec![d("amount", 15), d("orders", 0)]));
        let remove = change(ChangeKind::Remove, None, Some(order("ann", "45")));
        assert_eq!(deltas(&remove), Ok(vec![d("amount", -45), d("orders", -1)]));
    }

    #[test]
    fn unusable_changes_are_rejected_with_their_code() {
        let moved = change(
            ChangeKind::Modify,
            Some(order("bob", "1")),
            Some(order("ann", "1")),
        );
        assert_eq!(deltas(&moved), Err(RejectionCode::InvalidChange));
        let keys_only = change(ChangeKind::Modify, None, None);
        assert_eq!(deltas(&keys_only), Err(RejectionCode::InvalidChange));
        let mut text = order("ann", "1");
        text.insert("Amount".into(), AttributeValue::S("1".into()));
        let not_a_number = change(ChangeKind::Insert, Some(text), None);
        assert_eq!(deltas(&not_a_number), Err(RejectionCode::InvalidDelta));
    }

    #[test]
    fn decimal_and_38_digit_sums_are_exact() {
        let old = "12345678901234567890.123456789012345678";
        let modify = change(
            ChangeKind::Modify,
            Some(order("ann", "12345678901234567890.123456789012345679")),
            Some(order("ann", old)),
        );
        let record = aggregation().record(&counter(), &modify).expect("record");
        assert_eq!(record.add["amount"].canonical(), "0.000000000000000001");
    }

    #[test]
    fn an_aggregation_needs_named_attributes_and_a_counter() {
        let none = Aggregation::builder("Customer")
            .build()
            .expect_err("no counter");
        assert_eq!(none.setting, "aggregation");
        let unnamed = Aggregation::builder("Customer").count("").build();
        assert!(unnamed.is_err());
        let a = aggregation();
        assert_eq!(a.group_by(), "Customer");
        assert_eq!(a.key_attribute(), DEFAULT_AGGREGATE_KEY_ATTRIBUTE);
        assert_eq!(a.sort_key(), Some(("SK", "totals")));
        assert_eq!(a.count(), Some("orders"));
        assert_eq!(a.sums(), &[("amount".to_string(), "Amount".to_string())]);
    }
}
