//! A counter item bounded by construction: the attributes no record can still need are
//! removed, decided from the item's own attributes, never from a process's memory (any number
//! of processes, cold or warm, leave the same item).
//!
//! * A **watermark** holds the time it was written, which is no earlier than the creation of
//!   every record at or below it in its lane. Once that time is [`WATERMARK_HORIZON_SECS`]
//!   old (the stream's 24 hours, plus 6 hours for trimming's lag and clocks), every such
//!   record is out of the stream: no mapping (this one, a replaced one starting at
//!   `TRIM_HORIZON`, a second one) can deliver it again, whatever its
//!   `MaximumRecordAgeInSeconds`, so the watermark guards nothing.
//! * A **day sum** of a day that began [`super::KEEP_DAYS`] days ago or more (the repair
//!   recounts days begun at most [`super::REPAIR_DAYS`] ago).
//! * `<prefix>forgot` of an item without key buckets, once no record that arrived before it
//!   can still be journaled or read (module `migrate`).
//!
//! The update that adds an item's keys returns the item (`ALL_NEW`, at no cost). When it shows
//! [`STALE_MAX`] such attributes, or fewer that cost the item a write unit (its size rounded
//! up to a kilobyte would be smaller without them), or a stale `<prefix>forgot` (once per
//! migrated item), the same call follows with one
//! conditional `UpdateItem` removing them (each watermark and `<prefix>forgot` conditioned on
//! its value as seen, so that one moved meanwhile stays). A failed or refused removal is left
//! to the item's next update. Bound: an item holds its live watermarks (one per lane that
//! delivered its keys in the last 30 hours: about 8 at a rollover every 4 hours), its day sums
//! of the last [`super::KEEP_DAYS`] days and fewer than [`STALE_MAX`] stale attributes, and
//! never pays a write unit for those. Cost: one removal per [`STALE_MAX`] stale attributes at
//! most, billed like the update (the item's size before it).

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};

use super::event::{parse_watermark, STREAM_RETENTION_SECS};
use super::Rollup;
use crate::ddb::{conditional, Cond, Cost, Item, ItemKey, Placeholders};

/// How old a watermark's time must be before it guards nothing: 24 hours of stream retention
/// plus 6 hours.
pub(super) const WATERMARK_HORIZON_SECS: u64 = STREAM_RETENTION_SECS + 6 * 3600;
/// Stale attributes from which an item is cleaned whatever its size.
pub(super) const STALE_MAX: usize = 8;

/// A stale attribute and the value it must still have to be removed (`None`: any).
type Stale = (String, Option<AttributeValue>);

impl Rollup {
    /// The attributes of `item` no record can still need (see the module documentation).
    pub(super) fn stale_attributes(&self, item: &Item) -> Vec<Stale> {
        let counter = &self.config.counter;
        let now = self.clock.now_secs();
        let marks = format!("{}w_", counter.attribute_prefix);
        let mut stale: Vec<Stale> = item
            .iter()
            .filter(|(name, _)| name.starts_with(&marks))
            .filter(|(_, value)| {
                parse_watermark(value)
                    .is_some_and(|(_, at)| at.saturating_add(WATERMARK_HORIZON_SECS) < now)
            })
            .map(|(name, value)| (name.clone(), Some(value.clone())))
            .collect();
        let today = super::days::day_of_ms(self.clock.now_ms());
        stale.extend(
            super::days::stale(&counter.attribute_prefix, item, today)
                .into_iter()
                .map(|name| (name, None)),
        );
        let forgot = counter.forgotten_attribute();
        if !item.contains_key(&counter.bucket_attribute()) && self.forgotten_expired(item, now) {
            stale.extend(item.get(&forgot).map(|v| (forgot, Some(v.clone()))));
        }
        stale.sort_by(|a, b| a.0.cmp(&b.0));
        stale
    }

    /// After an update that left `item` (its `ALL_NEW`): remove its stale attributes when
    /// they are [`STALE_MAX`] or more, or cost it a write unit.
    pub(super) async fn bound_item(&self, key: &ItemKey, item: Option<&Item>, cost: &Cost) {
        let Some(item) = item else { return };
        let stale = self.stale_attributes(item);
        let forgot = self.config.counter.forgotten_attribute();
        let clean = stale.len() >= STALE_MAX
            || stale.iter().any(|(name, _)| *name == forgot)
            || costs_a_unit(item, &stale);
        if stale.is_empty() || !clean {
            return;
        }
        if let Err(e) = self.remove_stale(key, &stale, cost).await {
            tracing::warn!(error = %e, item = %key.canonical(), "journal roll-up: stale attributes not removed (the next update tries again)");
        }
    }

    async fn remove_stale(
        &self,
        key: &ItemKey,
        stale: &[Stale],
        cost: &Cost,
    ) -> Result<(), crate::ddb::StoreError> {
        let mut p = Placeholders::new("b");
        let mut remove = Vec::new();
        let mut conditions = Vec::new();
        for (name, value) in stale {
            let n = p.name(name.clone());
            match value {
                Some(v) => conditions.push(format!("{n} = {}", p.value(v.clone()))),
                None => conditions.push(format!("attribute_exists({n})")),
            }
            remove.push(n);
        }
        let (names, values) = p.into_maps();
        let result = self
            .ddb
            .update_item()
            .table_name(&self.config.counter.table)
            .set_key(Some(key.to_item()?))
            .update_expression(format!("REMOVE {}", remove.join(", ")))
            .condition_expression(conditions.join(" AND "))
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        if let Ok(out) = &result {
            cost.add(out.consumed_capacity());
        }
        match conditional("UpdateItem", result) {
            Ok(Cond::Done(_)) => Ok(()),
            Ok(Cond::Failed { old }) => {
                cost.add_failed_condition(old.as_ref());
                Ok(())
            }
            Err(e) => {
                cost.add_failed();
                Err(e)
            }
        }
    }
}

/// Whether `item` is billed more write units with its `stale` attributes than without.
fn costs_a_unit(item: &Item, stale: &[Stale]) -> bool {
    let units = |bytes: usize| bytes.div_ceil(1024);
    let mut without = item.clone();
    for (name, _) in stale {
        without.remove(name);
    }
    units(crate::ddb::item::item_size(item)) > units(crate::ddb::item::item_size(&without))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_attributes_cost_a_unit_only_when_they_cross_a_kilobyte() {
        let s = |n: usize| AttributeValue::S("x".repeat(n));
        let item = Item::from([("a".to_string(), s(900)), ("w".to_string(), s(200))]);
        let stale = [("w".to_string(), None)];
        assert!(costs_a_unit(&item, &stale));
        let small = Item::from([("a".to_string(), s(100)), ("w".to_string(), s(200))]);
        assert!(!costs_a_unit(&small, &stale));
    }
}
