//! Applying one counter item's journaled keys from one shard: one `UpdateItem` that adds their
//! sum and moves the shard's watermark, conditioned on the watermark being below them (and,
//! on an item of the inline layout, on its key buckets being as read).

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure,
};

use super::entry::{parse_watermark, shard_tag, watermark_value, Event, WATERMARK_KEEP_SECONDS};
use super::Rollup;
use crate::counter::layout::{encode, Bucket, Grid, Layout};
use crate::ddb::{conditional, Cond, Cost, Item, ItemKey, Placeholders, StoreError};

/// Conditional rounds for one item before the roll-up gives up on it for this run.
const MAX_ROUNDS: usize = 8;
/// A parent shard's watermark is removed this long after it last moved: longer than a
/// roll-up run may last ([`super::rollup::MAX_RUN`]), so that no run still applying the
/// parent's records can find it gone.
pub(super) const PARENT_KEEP_SECONDS: u64 = 20 * 60;

/// The shard an item's keys come from, as watermark attribute names.
#[derive(Debug, Clone)]
pub(super) struct Source {
    /// `<prefix>w_<tag>` of the shard.
    pub(super) watermark: String,
    /// The parent shard's watermark attribute: removed once it has not moved for
    /// [`PARENT_KEEP_SECONDS`] (its records are all applied before the child's are read; the
    /// delay covers a run of the parent that is still in flight).
    pub(super) parent: Option<String>,
}

impl Source {
    pub(super) fn new(prefix: &str, shard: &str, parent: Option<&str>) -> Self {
        Source {
            watermark: format!("{prefix}w_{}", shard_tag(shard)),
            parent: parent.map(|p| format!("{prefix}w_{}", shard_tag(p))),
        }
    }
}

/// What applying one item did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct ItemApplied {
    /// Keys added by this run.
    pub(super) applied: usize,
    /// Keys found applied already (below the watermark, or in an inline key bucket).
    pub(super) duplicates: usize,
}

/// An item of the inline layout as the last `ALL_OLD` showed it: the update is conditioned on
/// its layout and the sizes of its buckets, and removes the buckets that expired.
#[derive(Debug, Clone)]
struct Inline {
    guard: AttributeValue,
    sizes: Vec<(String, usize)>,
    kept: BTreeSet<Bucket>,
    expired: Vec<String>,
}

impl Rollup {
    /// Add `events` (one item's, one shard's, ascending) once each.
    pub(super) async fn apply_item(
        &self,
        key: &ItemKey,
        mut events: Vec<Event>,
        source: &Source,
        cost: &Cost,
    ) -> Result<ItemApplied, StoreError> {
        let total = events.len();
        let mut inline: Option<Inline> = None;
        for _ in 0..MAX_ROUNDS {
            if events.is_empty() {
                return Ok(ItemApplied {
                    applied: 0,
                    duplicates: total,
                });
            }
            match self
                .update(key, &events, source, inline.as_ref(), cost)
                .await?
            {
                Cond::Done(new) => {
                    self.prune_watermarks(key, new, source, cost).await;
                    return Ok(ItemApplied {
                        applied: events.len(),
                        duplicates: total - events.len(),
                    });
                }
                Cond::Failed { old: None } => inline = None, // deleted meanwhile
                Cond::Failed { old: Some(old) } => {
                    inline = self.reread(&old, &mut events, source);
                }
            }
        }
        Err(StoreError::Contention {
            what: format!("counter item {}", key.canonical()),
            attempts: MAX_ROUNDS,
        })
    }

    /// After a failed condition: drop the events at or below the watermark and those whose
    /// key an inline bucket holds; the inline layout to pin, if any.
    fn reread(&self, old: &Item, events: &mut Vec<Event>, source: &Source) -> Option<Inline> {
        if let Some(AttributeValue::S(mark)) = old.get(&source.watermark) {
            if let Some((seq, _)) = parse_watermark(mark) {
                events.retain(|e| e.seq.as_str() > seq);
            }
        }
        let config = &self.config.counter;
        let guard = old.get(&config.bucket_attribute())?.clone();
        let now = self.clock.now_secs();
        let (layout, keys) = Layout::read(config, &Grid::of(config), old, now);
        events.retain(|e| !keys.contains(&e.hash));
        let mut sizes = Vec::new();
        let mut kept = BTreeSet::new();
        let mut expired = Vec::new();
        for bucket in layout.buckets {
            let name = config.keys_attribute(&bucket);
            let size = match old.get(&name) {
                Some(AttributeValue::Ss(keys)) => keys.len(),
                _ => 0,
            };
            sizes.push((name.clone(), size));
            match bucket.until < now {
                true => expired.push(name),
                false => {
                    kept.insert(bucket);
                }
            }
        }
        Some(Inline {
            guard,
            sizes,
            kept,
            expired,
        })
    }

    /// One conditional update: `Done` with the item after it.
    async fn update(
        &self,
        key: &ItemKey,
        events: &[Event],
        source: &Source,
        inline: Option<&Inline>,
        cost: &Cost,
    ) -> Result<Cond<Option<Item>>, StoreError> {
        let mut p = Placeholders::new("j");
        let mut sums: BTreeMap<&str, i128> = BTreeMap::new();
        for event in events {
            for (name, delta) in &event.add {
                *sums.entry(name.as_str()).or_default() += i128::from(*delta);
            }
        }
        let (first, last) = match (events.first(), events.last()) {
            (Some(first), Some(last)) => (first.seq.clone(), last.seq.clone()),
            _ => return Ok(Cond::Done(None)),
        };
        let w = p.name(source.watermark.clone());
        let mark = p.value(AttributeValue::S(watermark_value(
            &last,
            self.clock.now_secs(),
        )));
        let below = p.value(AttributeValue::S(first));
        let mut set = vec![format!("{w} = {mark}")];
        let add: Vec<String> = sums
            .into_iter()
            .map(|(name, sum)| {
                let n = p.name(name);
                format!("{n} {}", p.value(AttributeValue::N(sum.to_string())))
            })
            .collect();
        let mut remove: Vec<String> = Vec::new();
        let mut condition = format!("(attribute_not_exists({w}) OR {w} < {below})");
        let lay = p.name(self.config.counter.bucket_attribute());
        match inline {
            None => condition.push_str(&format!(" AND attribute_not_exists({lay})")),
            Some(inline) => {
                let seen = p.value(inline.guard.clone());
                condition.push_str(&format!(" AND {lay} = {seen}"));
                for (name, size) in &inline.sizes {
                    let b = p.name(name.clone());
                    match size {
                        0 => condition.push_str(&format!(" AND attribute_not_exists({b})")),
                        n => {
                            let v = p.value(AttributeValue::N(n.to_string()));
                            condition.push_str(&format!(" AND size({b}) = {v}"));
                        }
                    }
                }
                remove.extend(inline.expired.iter().map(|name| p.name(name.clone())));
                match inline.kept.is_empty() {
                    true => remove.push(lay.clone()),
                    false => {
                        let layout = p.value(AttributeValue::S(encode(&inline.kept)));
                        set.push(format!("{lay} = {layout}"));
                    }
                }
            }
        }
        let mut expression = format!("SET {}", set.join(", "));
        if !add.is_empty() {
            expression.push_str(&format!(" ADD {}", add.join(", ")));
        }
        if !remove.is_empty() {
            expression.push_str(&format!(" REMOVE {}", remove.join(", ")));
        }
        let (names, values) = p.into_maps();
        let result = self
            .ddb
            .update_item()
            .table_name(&self.config.counter.table)
            .set_key(Some(key.to_item()?))
            .update_expression(expression)
            .condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        if let Ok(out) = &result {
            cost.add(out.consumed_capacity());
        }
        match conditional("UpdateItem", result) {
            Ok(Cond::Done(out)) => Ok(Cond::Done(out.attributes)),
            Ok(Cond::Failed { old }) => {
                cost.add_failed_condition(old.as_ref());
                Ok(Cond::Failed { old })
            }
            Err(err) => {
                cost.add_failed();
                Err(err)
            }
        }
    }

    /// Remove watermarks that have not moved for [`WATERMARK_KEEP_SECONDS`] (shards whose
    /// records have all left the stream), and the parent's after [`PARENT_KEEP_SECONDS`],
    /// each only if it is still the value seen. Best effort: a failure leaves them for a later
    /// run. The item then holds about one watermark per shard writing it.
    async fn prune_watermarks(
        &self,
        key: &ItemKey,
        item: Option<Item>,
        source: &Source,
        cost: &Cost,
    ) {
        let Some(item) = item else { return };
        let prefix = format!("{}w_", self.config.counter.attribute_prefix);
        let now = self.clock.now_secs();
        let stale: Vec<(String, AttributeValue)> =
            item.into_iter()
                .filter(|(name, _)| name.starts_with(&prefix) && *name != source.watermark)
                .filter(|(name, value)| {
                    let keep = match source.parent.as_ref() == Some(name) {
                        true => PARENT_KEEP_SECONDS,
                        false => WATERMARK_KEEP_SECONDS,
                    };
                    match value {
                        AttributeValue::S(mark) => parse_watermark(mark)
                            .is_some_and(|(_, at)| at.saturating_add(keep) < now),
                        _ => false,
                    }
                })
                .take(50)
                .collect();
        if stale.is_empty() {
            return;
        }
        let mut p = Placeholders::new("s");
        let mut names = Vec::new();
        let mut conditions = Vec::new();
        for (name, value) in stale {
            let n = p.name(name);
            conditions.push(format!("{n} = {}", p.value(value)));
            names.push(n);
        }
        let (attribute_names, values) = p.into_maps();
        let Ok(key) = key.to_item() else { return };
        let result = self
            .ddb
            .update_item()
            .table_name(&self.config.counter.table)
            .set_key(Some(key))
            .update_expression(format!("REMOVE {}", names.join(", ")))
            .condition_expression(conditions.join(" AND "))
            .set_expression_attribute_names(attribute_names)
            .set_expression_attribute_values(values)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => cost.add(out.consumed_capacity()),
            Err(_) => cost.add_failed(),
        }
    }
}
