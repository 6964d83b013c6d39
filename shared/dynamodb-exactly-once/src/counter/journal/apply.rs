//! Applying one counter item's journaled keys of a batch: one `UpdateItem` that adds their sum
//! and moves each lane's watermark, conditioned on each watermark being below that lane's
//! first key (and, on an item of the inline layout, on its key buckets being as read). What
//! the item no longer needs is removed after it (module `bound`).

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure,
};

use super::event::{parse_watermark, seq_value, watermark_value, Event, Seq};
use super::Rollup;
use crate::counter::bucket::{encode, Bucket};
use crate::counter::layout::{Grid, Layout};
use crate::ddb::{conditional, Cond, Cost, ErrorClass, Item, ItemKey, Placeholders, StoreError};

/// Conditional rounds for one item before the roll-up gives up on it for this pass.
const MAX_ROUNDS: usize = 8;

/// What applying one item's events did.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct ItemApplied {
    /// Keys added by this pass.
    pub(super) applied: usize,
    /// Keys found applied already (below the watermark, or in an inline key bucket).
    pub(super) duplicates: usize,
    /// Updates made.
    pub(super) updates: usize,
    /// Keys not counted: they arrived before the item forgot inline keys (at that time).
    pub(super) too_old: Vec<(Event, u64)>,
}

/// An item of the inline layout as the last `ALL_OLD` showed it: the update is conditioned on
/// its layout and the sizes of its buckets, and removes the buckets that expired.
#[derive(Debug, Clone)]
struct Inline {
    guard: AttributeValue,
    sizes: Vec<(String, usize)>,
    kept: BTreeSet<Bucket>,
    expired: Vec<String>,
    /// `<prefix>forgot` to set, when removing `expired` raises it.
    forgotten: Option<u64>,
}

impl Rollup {
    /// Add `events` (one item's, sorted by shard then sequence number) once each.
    pub(super) async fn apply_events(
        &self,
        key: &ItemKey,
        mut events: Vec<Event>,
        names: &[String],
        cost: &Cost,
    ) -> Result<ItemApplied, StoreError> {
        let total = events.len();
        let mut inline: Option<Inline> = None;
        let mut too_old = Vec::new();
        for _ in 0..MAX_ROUNDS {
            if events.is_empty() {
                return Ok(ItemApplied {
                    duplicates: total - too_old.len(),
                    too_old,
                    ..ItemApplied::default()
                });
            }
            match self
                .update(key, &events, names, inline.as_ref(), cost)
                .await?
            {
                Cond::Done(new) => {
                    self.bound_item(key, new.as_ref(), cost).await;
                    let counted = events.iter().filter(|e| !e.add.is_empty()).count();
                    return Ok(ItemApplied {
                        applied: counted,
                        duplicates: total - events.len() - too_old.len(),
                        updates: 1,
                        too_old,
                    });
                }
                Cond::Failed { old: None } => inline = None, // deleted meanwhile
                Cond::Failed { old: Some(old) } => {
                    too_old.extend(self.forgotten_events(&old, &mut events));
                    self.drop_repaired(&old, &mut events);
                    inline = self.reread(&old, &mut events, names);
                }
            }
        }
        Err(StoreError::Contention {
            what: format!("counter item {}", key.canonical()),
            attempts: MAX_ROUNDS,
        })
    }

    /// After a failed condition: drop the events at or below their shard's watermark and those
    /// whose key an inline bucket holds; the inline layout to pin, if any.
    fn reread(&self, old: &Item, events: &mut Vec<Event>, names: &[String]) -> Option<Inline> {
        events.retain(|e| {
            let mark = names
                .get(e.shard)
                .and_then(|n| old.get(n))
                .and_then(parse_watermark);
            mark.is_none_or(|(seq, _)| e.seq > seq)
        });
        let config = &self.config.counter;
        let guard = old.get(&config.bucket_attribute())?.clone();
        let now = self.clock.now_secs();
        let (layout, keys) = Layout::read(config, old);
        events.retain(|e| !keys.contains(&e.hash));
        let mut sizes = Vec::new();
        let mut kept = BTreeSet::new();
        let mut expired = Vec::new();
        let gone: Vec<Bucket> = layout
            .buckets
            .iter()
            .filter(|b| b.until < now)
            .copied()
            .collect();
        let forgotten = Grid::of(config)
            .forgotten_after(&gone, &layout)
            .filter(|f| !gone.is_empty() && Some(*f) != layout.forgotten);
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
            forgotten,
        })
    }

    /// One conditional update: `Done` with the item after it.
    async fn update(
        &self,
        key: &ItemKey,
        events: &[Event],
        names: &[String],
        inline: Option<&Inline>,
        cost: &Cost,
    ) -> Result<Cond<Option<Item>>, StoreError> {
        let mut p = Placeholders::new("j");
        let sums = crate::counter::update::sum_deltas(events.iter().map(|e| &e.add))
            .map_err(|e| refused_sum(format!("the deltas of one roll-up write: {e}")))?;
        // Per shard: the first and last sequence numbers of its events.
        let mut spans: BTreeMap<usize, (Seq, Seq)> = BTreeMap::new();
        for event in events {
            spans
                .entry(event.shard)
                .and_modify(|(_, last)| *last = event.seq)
                .or_insert((event.seq, event.seq));
        }
        let now = self.clock.now_secs();
        let mut set = Vec::new();
        let mut conditions = Vec::new();
        self.not_forgotten(&mut p, events, &mut conditions);
        for (shard, (first, last)) in &spans {
            let Some(name) = names.get(*shard) else {
                return Err(StoreError::Inconsistent(format!("no shard {shard}")));
            };
            let w = p.name(name.clone());
            let mark = p.value(watermark_value(last, now));
            let below = p.value(seq_value(first));
            set.push(format!("{w} = {mark}"));
            conditions.push(format!("(attribute_not_exists({w}) OR {w} < {below})"));
        }
        let mut add: Vec<String> = sums
            .into_iter()
            .map(|(name, sum)| {
                let n = p.name(name);
                format!("{n} {}", p.value(AttributeValue::N(sum.canonical())))
            })
            .collect();
        self.add_day_sums(&mut p, events, &mut add, &mut conditions)?;
        let mut remove: Vec<String> = Vec::new();
        self.pin_inline(&mut p, inline, &mut set, &mut conditions, &mut remove);
        let mut expression = format!("SET {}", set.join(", "));
        if !add.is_empty() {
            expression.push_str(&format!(" ADD {}", add.join(", ")));
        }
        if !remove.is_empty() {
            expression.push_str(&format!(" REMOVE {}", remove.join(", ")));
        }
        let (attribute_names, values) = p.into_maps();
        let result = self
            .ddb
            .update_item()
            .table_name(&self.config.counter.table)
            .set_key(Some(key.to_item()?))
            .update_expression(expression)
            .condition_expression(conditions.join(" AND "))
            .set_expression_attribute_names(attribute_names)
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

    /// The update's part for an item of the inline layout: its layout and bucket sizes as
    /// read, the expired buckets removed.
    fn pin_inline(
        &self,
        p: &mut Placeholders,
        inline: Option<&Inline>,
        set: &mut Vec<String>,
        conditions: &mut Vec<String>,
        remove: &mut Vec<String>,
    ) {
        let lay = p.name(self.config.counter.bucket_attribute());
        let Some(inline) = inline else {
            conditions.push(format!("attribute_not_exists({lay})"));
            return;
        };
        let seen = p.value(inline.guard.clone());
        conditions.push(format!("{lay} = {seen}"));
        for (name, size) in &inline.sizes {
            let b = p.name(name.clone());
            match size {
                0 => conditions.push(format!("attribute_not_exists({b})")),
                n => {
                    let v = p.value(AttributeValue::N(n.to_string()));
                    conditions.push(format!("size({b}) = {v}"));
                }
            }
        }
        remove.extend(inline.expired.iter().map(|name| p.name(name.clone())));
        if let Some(forgotten) = inline.forgotten {
            let fg = p.name(self.config.counter.forgotten_attribute());
            let at = p.value(AttributeValue::N(forgotten.to_string()));
            set.push(format!("{fg} = {at}"));
        }
        match inline.kept.is_empty() {
            true => remove.push(lay),
            false => {
                let layout = p.value(AttributeValue::S(encode(&inline.kept)));
                set.push(format!("{lay} = {layout}"));
            }
        }
    }
}

/// A sum of deltas DynamoDB cannot hold (past 38 digits or its range): refused as DynamoDB
/// refuses such an `ADD`, so that the refused record is isolated as a dead letter and the rest
/// of its item counts (never a failure that blocks the shard).
fn refused_sum(message: String) -> StoreError {
    StoreError::Sdk {
        operation: "UpdateItem",
        class: ErrorClass::InvalidRequest,
        code: "ValidationException".into(),
        message,
        source: None,
    }
}

/// The day sums ([`super::days`]): each update adds its keys' deltas to their day's sums too,
/// on the condition that none of those days is marked repaired; a refused update drops the
/// keys of the repaired days (the repair counted them) and keeps them for their watermarks.
impl Rollup {
    /// Add `events`' day sums to `add`, and a condition per day that it is not repaired; the
    /// attributes added to.
    fn add_day_sums(
        &self,
        p: &mut Placeholders,
        events: &[Event],
        add: &mut Vec<String>,
        conditions: &mut Vec<String>,
    ) -> Result<BTreeSet<String>, StoreError> {
        let prefix = &self.config.counter.attribute_prefix;
        let (sums, days) = super::days::day_sums(events).map_err(refused_sum)?;
        let mut added = BTreeSet::new();
        for ((day, name), sum) in sums {
            let attribute = super::days::sum_name(prefix, day, &name);
            added.insert(attribute.clone());
            let n = p.name(attribute);
            add.push(format!(
                "{n} {}",
                p.value(AttributeValue::N(sum.canonical()))
            ));
        }
        for day in days {
            let mark = p.name(super::days::mark_name(prefix, day));
            conditions.push(format!("attribute_not_exists({mark})"));
        }
        Ok(added)
    }

    /// After a refused update: the keys of the days `old` marks repaired add nothing.
    fn drop_repaired(&self, old: &Item, events: &mut [Event]) {
        let prefix = &self.config.counter.attribute_prefix;
        for event in events.iter_mut() {
            if super::days::event_day(event).is_some_and(|d| super::days::repaired(prefix, old, d))
            {
                event.add.clear();
            }
        }
    }
}
