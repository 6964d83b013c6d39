//! The repair of one counter item for one day: the journal's sum of the day's keys replaces
//! the roll-up's day sums, the difference goes to the counters, the day is marked repaired;
//! on the condition that the day sums are still as read (see [`super::repair`]). Keys the
//! roll-up would refuse are kept as dead letters instead: those adding to a counter the item
//! holds as another type, and, on an item migrated from the inline mode, those that arrived
//! before the item forgot inline keys (`<prefix>forgot`: `too_old`, see [`super::migrate`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure,
};

use super::days;
use super::dead::RollupDeadLetter;
use super::migrate::{forgotten, too_old_reason};
use super::repair::{ItemDay, Repair};
use super::scan::{add_to, Dead, JournalKey};
use crate::ddb::number::Number;
use crate::ddb::{conditional, Cond, Cost, Item, ItemKey, Placeholders, Read, StoreError};

/// An item-day's keys by the set of counters they add to: how many, and their sums.
type Groups = BTreeMap<Vec<String>, (usize, BTreeMap<String, Number>)>;

/// What the migration guard of one item-day needs: the earliest arrival of its keys, the
/// counter item as read, the keys already dead letters.
#[derive(Clone, Copy)]
struct Guard<'a> {
    earliest: Option<u64>,
    old: &'a Item,
    dead: &'a Dead,
}

/// The repair's dead letter of journal key `k` of counter item `item`.
fn letter(item: &ItemKey, k: &JournalKey, reason: String) -> RollupDeadLetter {
    RollupDeadLetter {
        shard: "repair".into(),
        seq: format!("{}/{}", k.journal.0, k.journal.1),
        reason,
        journal_key: Some(k.journal.clone()),
        item: Some(item.canonical().to_string()),
        add: k.add.clone(),
    }
}

/// Rounds (a roll-up changing the day sums meanwhile) before giving up on an item-day.
const MAX_ROUNDS: usize = 8;

/// What repairing one item-day did.
#[derive(Debug, Default)]
pub(super) struct Recounted {
    /// The counters changed (the roll-up had not counted every key of the day).
    pub(super) corrected: bool,
    /// Keys kept as dead letters.
    pub(super) dead_letters: usize,
}

impl Repair {
    /// Repair the counters of `work`'s item for its day.
    pub(super) async fn recount(
        &self,
        work: ItemDay,
        dead: &Dead,
        cost: &Cost,
    ) -> Result<Recounted, StoreError> {
        let prefix = &self.config.counter.attribute_prefix;
        let (item, day) = (&work.item, work.day);
        let mut groups = work.groups;
        let mut done = Recounted::default();
        let mut too_old = HashSet::new();
        for _ in 0..MAX_ROUNDS {
            let table = &self.config.counter.table;
            let old = crate::ddb::read::get_item(&self.ddb, table, item, Read::Consistent)
                .await?
                .unwrap_or_default();
            let guard = Guard {
                earliest: work.arrived,
                old: &old,
                dead,
            };
            done.dead_letters += self
                .keep_too_old(item, day, guard, &mut groups, &mut too_old, cost)
                .await?;
            done.dead_letters += self
                .keep_refused(&work.item, day, &old, &mut groups, dead, cost)
                .await?;
            let mut truth = BTreeMap::new();
            for (_, sums) in groups.values() {
                add_to(&mut truth, sums.clone())?;
            }
            let counted = days::sums_of(prefix, &old, day);
            let names: BTreeSet<&String> = truth.keys().chain(counted.keys()).collect();
            let value = |m: &BTreeMap<String, Number>, n: &str| {
                m.get(n).map_or_else(|| "0".to_string(), Number::canonical)
            };
            let exact = names.iter().all(|n| value(&truth, n) == value(&counted, n));
            if exact && days::repaired(prefix, &old, day) {
                return Ok(done);
            }
            match self.replace(item, day, &truth, &counted, cost).await? {
                Cond::Done(()) => {
                    done.corrected = !exact;
                    return Ok(done);
                }
                Cond::Failed { .. } => continue,
            }
        }
        Err(StoreError::Contention {
            what: format!("the repair of counter item {}", item.canonical()),
            attempts: MAX_ROUNDS,
        })
    }

    /// Keep the keys adding to a counter `old` holds as another type as dead letters (the
    /// roll-up would have): their groups leave `groups`. How many.
    async fn keep_refused(
        &self,
        item: &ItemKey,
        day: u64,
        old: &Item,
        groups: &mut Groups,
        dead: &Dead,
        cost: &Cost,
    ) -> Result<usize, StoreError> {
        let refused = |names: &Vec<String>| {
            names.iter().any(|n| {
                old.get(n)
                    .is_some_and(|v| !matches!(v, AttributeValue::N(_)))
            })
        };
        let bad: Vec<Vec<String>> = groups.keys().filter(|n| refused(n)).cloned().collect();
        let mut kept = 0;
        for names in bad {
            let keys = self.group_keys(item, day, &names, dead).await?;
            let letters: Vec<Item> = keys
                .iter()
                .map(|k| {
                    let reason = "the item holds a counter of this key as another type";
                    letter(item, k, reason.into()).to_item()
                })
                .collect();
            kept += letters.len();
            crate::ddb::batch::put_all(&self.ddb, &self.config.journal_table, letters, cost)
                .await?;
            groups.remove(&names);
        }
        Ok(kept)
    }

    /// Keep the keys that arrived before `guard.old` forgot inline keys as `too_old` dead
    /// letters, as the roll-up would have (once each: `removed` holds those already taken out
    /// of `groups`). How many were kept now.
    async fn keep_too_old(
        &self,
        item: &ItemKey,
        day: u64,
        guard: Guard<'_>,
        groups: &mut Groups,
        removed: &mut HashSet<(String, String)>,
        cost: &Cost,
    ) -> Result<usize, StoreError> {
        let name = self.config.counter.forgotten_attribute();
        let Some(forgot) = forgotten(guard.old, &name) else {
            return Ok(0);
        };
        if guard.earliest.is_none_or(|a| a >= forgot) {
            return Ok(0);
        }
        let keys: Vec<JournalKey> = self
            .item_day_keys(item, day, guard.dead)
            .await?
            .into_iter()
            .filter(|k| k.arrived.is_some_and(|a| a < forgot) && !removed.contains(&k.journal))
            .collect();
        let letters: Vec<Item> = keys
            .iter()
            .map(|k| {
                let arrived = k.arrived.unwrap_or_default();
                letter(item, k, too_old_reason(arrived, forgot)).to_item()
            })
            .collect();
        crate::ddb::batch::put_all(&self.ddb, &self.config.journal_table, letters, cost).await?;
        for key in &keys {
            removed.insert(key.journal.clone());
            let names: Vec<String> = key.add.keys().cloned().collect();
            if let Some(group) = groups.get_mut(&names) {
                group.0 = group.0.saturating_sub(1);
                let minus = key.add.iter().map(|(n, d)| (n.clone(), d.negated()));
                add_to(&mut group.1, minus.collect())?;
                if group.0 == 0 {
                    groups.remove(&names);
                }
            }
        }
        Ok(keys.len())
    }

    /// `total += truth − counted; d_D := truth; r_D := now`, if the day sums are `counted`.
    async fn replace(
        &self,
        item: &ItemKey,
        day: u64,
        truth: &BTreeMap<String, Number>,
        counted: &BTreeMap<String, Number>,
        cost: &Cost,
    ) -> Result<Cond<()>, StoreError> {
        let prefix = &self.config.counter.attribute_prefix;
        let mut p = Placeholders::new("r");
        let (mut set, mut add, mut conditions) = (Vec::new(), Vec::new(), Vec::new());
        let zero = Number::from(0);
        let names: BTreeSet<&String> = truth.keys().chain(counted.keys()).collect();
        for name in names {
            let t = truth.get(name).unwrap_or(&zero);
            let sum = p.name(days::sum_name(prefix, day, name));
            set.push(format!(
                "{sum} = {}",
                p.value(AttributeValue::N(t.canonical()))
            ));
            match counted.get(name) {
                Some(c) => {
                    conditions.push(format!(
                        "{sum} = {}",
                        p.value(AttributeValue::N(c.canonical()))
                    ));
                }
                None => conditions.push(format!("attribute_not_exists({sum})")),
            }
            let diff = t
                .checked_add(&counted.get(name).unwrap_or(&zero).negated())
                .map_err(|e| StoreError::Inconsistent(format!("a repair's difference: {e}")))?;
            if !diff.is_zero() {
                let n = p.name(name.clone());
                add.push(format!(
                    "{n} {}",
                    p.value(AttributeValue::N(diff.canonical()))
                ));
            }
        }
        let mark = p.name(days::mark_name(prefix, day));
        set.push(format!(
            "{mark} = {}",
            p.value(AttributeValue::N(self.clock.now_secs().to_string()))
        ));
        let mut expression = format!("SET {}", set.join(", "));
        if !add.is_empty() {
            expression.push_str(&format!(" ADD {}", add.join(", ")));
        }
        let (names, values) = p.into_maps();
        let mut request = self
            .ddb
            .update_item()
            .table_name(&self.config.counter.table)
            .set_key(Some(item.to_item()?))
            .update_expression(expression)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        if !conditions.is_empty() {
            request = request.condition_expression(conditions.join(" AND "));
        }
        let result = request.send().await;
        if let Ok(out) = &result {
            cost.add(out.consumed_capacity());
        }
        match conditional("UpdateItem", result)? {
            Cond::Done(_) => Ok(Cond::Done(())),
            Cond::Failed { old } => {
                cost.add_failed_condition(old.as_ref());
                Ok(Cond::Failed { old })
            }
        }
    }
}
