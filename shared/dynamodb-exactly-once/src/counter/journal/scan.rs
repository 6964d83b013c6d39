//! The repair's reads of the journal: its dead letters, a parallel scan of the days' keys
//! summed per counter item and day as they come (memory: one entry per item-day, not per
//! key), and the keys of one item-day's refused group (listed one by one only then).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::types::AttributeValue;
use futures::StreamExt;

use super::days::{self, DAY_MS};
use super::entry::{
    journal_partition, ADD_ATTRIBUTE, ARRIVED_ATTRIBUTE, AT_ATTRIBUTE, ITEM_ATTRIBUTE,
    JOURNAL_KEY_ATTRIBUTE, JOURNAL_SORT_ATTRIBUTE,
};
use super::event::{DEAD_PARTITION, RESERVED_PREFIX};
use super::repair::{ItemDay, Repair, RepairDays, RepairProgress};
use crate::ddb::number::Number;
use crate::ddb::{Item, ItemKey, StoreError};

/// Journal keys (partition, sort) kept as dead letters.
pub(super) type Dead = HashSet<(String, String)>;

/// How much one bounded scan may read: journal items, and until when.
#[derive(Debug, Clone, Copy)]
pub(super) struct ScanBudget {
    pub(super) max_items: u64,
    pub(super) until: std::time::Instant,
}

impl ScanBudget {
    fn spent(&self, scanned: u64) -> bool {
        scanned >= self.max_items || std::time::Instant::now() >= self.until
    }

    /// The most items a page may read with `scanned` read (at least 1).
    fn left(&self, scanned: u64) -> i32 {
        i32::try_from(self.max_items.saturating_sub(scanned).max(1)).unwrap_or(i32::MAX)
    }
}

/// Item-days by (counter item, day).
type ByItemDay = BTreeMap<(String, u64), ItemDay>;

/// One journaled key as the repair reads it.
#[derive(Debug)]
pub(super) struct JournalKey {
    pub(super) journal: (String, String),
    pub(super) item: ItemKey,
    pub(super) day: u64,
    pub(super) add: BTreeMap<String, Number>,
    /// The record's arrival at its source (epoch seconds), if the writer knew it.
    pub(super) arrived: Option<u64>,
}

impl Repair {
    /// The journal keys of every dead letter (the roll-up's and the repair's).
    pub(super) async fn dead_letters(&self) -> Result<Dead, StoreError> {
        let items = self.query(DEAD_PARTITION, None).await?;
        Ok(items
            .iter()
            .filter_map(|i| Some((text(i, "journal_pk")?.into(), text(i, "journal_sk")?.into())))
            .collect())
    }

    /// The keys of `days` in the journal, but `dead`, summed per item-day; items scanned.
    pub(super) async fn scan(
        &self,
        days: RepairDays,
        dead: &Dead,
        progress: &(dyn Fn(RepairProgress) + Send + Sync),
    ) -> Result<(Vec<ItemDay>, u64), StoreError> {
        let (work, scanned, _) = self.scan_within(days, dead, progress, None).await?;
        Ok((work, scanned))
    }

    /// [`Repair::scan`], stopped once `budget` is spent (then `false`: the sums are partial).
    pub(super) async fn scan_within(
        &self,
        days: RepairDays,
        dead: &Dead,
        progress: &(dyn Fn(RepairProgress) + Send + Sync),
        budget: Option<&ScanBudget>,
    ) -> Result<(Vec<ItemDay>, u64, bool), StoreError> {
        let cut = std::sync::atomic::AtomicBool::new(false);
        let table = &self.config.journal_table;
        let describe = self.ddb.describe_table().table_name(table).send().await;
        let estimate = describe
            .ok()
            .and_then(|o| o.table.and_then(|t| t.item_count))
            .and_then(|n| u64::try_from(n).ok());
        let scanned = AtomicU64::new(0);
        let segments: Vec<Result<ByItemDay, StoreError>> = futures::stream::iter(0..self.segments)
            .map(|segment| {
                let (scanned, cut) = (&scanned, &cut);
                async move {
                    let mut sums = ByItemDay::new();
                    let mut start: Option<Item> = None;
                    loop {
                        if budget.is_some_and(|b| b.spent(scanned.load(Ordering::Relaxed))) {
                            cut.store(true, Ordering::Relaxed);
                            return Ok(sums);
                        }
                        let limit = budget.map(|b| b.left(scanned.load(Ordering::Relaxed)));
                        let (items, n, next) =
                            self.scan_page(days, segment, start.take(), limit).await?;
                        let so_far = scanned.fetch_add(n, Ordering::Relaxed) + n;
                        progress(RepairProgress::Scanned {
                            items: so_far,
                            of: estimate,
                        });
                        for key in items.iter().filter_map(journal_key) {
                            if !dead.contains(&key.journal) {
                                add(&mut sums, key);
                            }
                        }
                        match next {
                            Some(key) => start = Some(key),
                            None => return Ok(sums),
                        }
                    }
                }
            })
            .buffer_unordered(usize::try_from(self.segments).unwrap_or(1))
            .collect()
            .await;
        let mut all = ByItemDay::new();
        for segment in segments {
            for (at, part) in segment? {
                merge(&mut all, at, part);
            }
        }
        let complete = !cut.into_inner();
        Ok((all.into_values().collect(), scanned.into_inner(), complete))
    }

    /// One page of one segment: the items of the days, how many were read, and where the
    /// next page starts.
    async fn scan_page(
        &self,
        days: RepairDays,
        segment: i32,
        start: Option<Item>,
        limit: Option<i32>,
    ) -> Result<(Vec<Item>, u64, Option<Item>), StoreError> {
        let out = self
            .ddb
            .scan()
            .table_name(&self.config.journal_table)
            .segment(segment)
            .total_segments(self.segments)
            .consistent_read(true)
            .filter_expression("#at BETWEEN :lo AND :hi")
            .expression_attribute_names("#at", AT_ATTRIBUTE)
            .expression_attribute_values(":lo", number(days.first * DAY_MS))
            .expression_attribute_values(":hi", number((days.last + 1) * DAY_MS - 1))
            .set_exclusive_start_key(start)
            .set_limit(limit)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("Scan", e))?;
        let next = out.last_evaluated_key.filter(|k| !k.is_empty());
        let read = u64::try_from(out.scanned_count).unwrap_or(0);
        Ok((out.items.unwrap_or_default(), read, next))
    }

    /// The keys of `item` and `day` (not dead) adding to exactly the counters `names`.
    pub(super) async fn group_keys(
        &self,
        item: &ItemKey,
        day: u64,
        names: &[String],
        dead: &Dead,
    ) -> Result<Vec<JournalKey>, StoreError> {
        let mut keys = self.item_day_keys(item, day, dead).await?;
        keys.retain(|k| k.add.keys().eq(names.iter()));
        Ok(keys)
    }

    /// The keys of `item` and `day` (not dead), from its journal partitions.
    pub(super) async fn item_day_keys(
        &self,
        item: &ItemKey,
        day: u64,
        dead: &Dead,
    ) -> Result<Vec<JournalKey>, StoreError> {
        let spread = self.config.counter.journal_spread;
        let tag = journal_partition(item, "", 1);
        let partitions: Vec<String> = match spread {
            0 | 1 => vec![tag],
            n => (0..n).map(|i| format!("{tag}#{i}")).collect(),
        };
        let mut keys = Vec::new();
        for pk in partitions {
            for found in self
                .query(&pk, Some(day))
                .await?
                .iter()
                .filter_map(journal_key)
            {
                if found.day == day && &found.item == item && !dead.contains(&found.journal) {
                    keys.push(found);
                }
            }
        }
        Ok(keys)
    }

    /// Every item of journal partition `pk` (first put on `day`, if given), consistent.
    async fn query(&self, pk: &str, day: Option<u64>) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let mut request = self
                .ddb
                .query()
                .table_name(&self.config.journal_table)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", JOURNAL_KEY_ATTRIBUTE)
                .expression_attribute_values(":pk", AttributeValue::S(pk.into()))
                .consistent_read(true)
                .set_exclusive_start_key(start.take());
            if let Some(day) = day {
                request = request
                    .filter_expression("#at BETWEEN :lo AND :hi")
                    .expression_attribute_names("#at", AT_ATTRIBUTE)
                    .expression_attribute_values(":lo", number(day * DAY_MS))
                    .expression_attribute_values(":hi", number((day + 1) * DAY_MS - 1));
            }
            let out = request
                .send()
                .await
                .map_err(|e| StoreError::from_sdk("Query", e))?;
            items.extend(out.items.unwrap_or_default());
            match out.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(key) => start = Some(key),
                None => return Ok(items),
            }
        }
    }
}

/// Add `key` to its item-day's group (a sum past 38 digits marks the item-day).
fn add(sums: &mut ByItemDay, key: JournalKey) {
    let names: Vec<String> = key.add.keys().cloned().collect();
    let entry = sums
        .entry((key.item.canonical().to_string(), key.day))
        .or_insert_with(|| ItemDay {
            item: key.item.clone(),
            day: key.day,
            keys: 0,
            arrived: None,
            overflow: None,
            groups: BTreeMap::new(),
        });
    entry.keys += 1;
    entry.arrived = earliest(entry.arrived, key.arrived);
    let group = entry.groups.entry(names).or_default();
    group.0 += 1;
    if let Err(e) = add_to(&mut group.1, key.add) {
        entry.overflow.get_or_insert(e.to_string());
    }
}

/// Add `deltas` to `sums`, name by name.
pub(super) fn add_to(
    sums: &mut BTreeMap<String, Number>,
    deltas: BTreeMap<String, Number>,
) -> Result<(), StoreError> {
    for (name, delta) in deltas {
        let sum = match sums.get(&name) {
            Some(sum) => sum.checked_add(&delta),
            None => Ok(delta),
        };
        let sum = sum.map_err(|e| StoreError::Inconsistent(format!("a day's sum: {e}")))?;
        sums.insert(name, sum);
    }
    Ok(())
}

/// Add a segment's `part` of an item-day to the whole (a sum past 38 digits marks it).
fn merge(all: &mut ByItemDay, at: (String, u64), part: ItemDay) {
    let Some(whole) = all.get_mut(&at) else {
        all.insert(at, part);
        return;
    };
    whole.keys += part.keys;
    whole.arrived = earliest(whole.arrived, part.arrived);
    if let Some(reason) = part.overflow {
        whole.overflow.get_or_insert(reason);
    }
    for (names, (n, sums)) in part.groups {
        let group = whole.groups.entry(names).or_default();
        group.0 += n;
        if let Err(e) = add_to(&mut group.1, sums) {
            whole.overflow.get_or_insert(e.to_string());
        }
    }
}

/// The earlier of two arrival times (either may be unknown).
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn number(n: u64) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s),
        _ => None,
    }
}

/// A journal item's key, counter item, day and deltas (`None`: not a journaled key, or one
/// the roll-up could not read either).
fn journal_key(item: &Item) -> Option<JournalKey> {
    let pk = text(item, JOURNAL_KEY_ATTRIBUTE)?;
    if pk.starts_with(RESERVED_PREFIX) {
        return None;
    }
    let sk = text(item, JOURNAL_SORT_ATTRIBUTE)?;
    let Some(AttributeValue::M(key)) = item.get(ITEM_ATTRIBUTE) else {
        return None;
    };
    let Some(AttributeValue::N(at)) = item.get(AT_ATTRIBUTE) else {
        return None;
    };
    let Some(AttributeValue::M(add)) = item.get(ADD_ATTRIBUTE) else {
        return None;
    };
    let add = add
        .iter()
        .map(|(name, v)| match v {
            AttributeValue::N(n) => Number::parse(n).ok().map(|n| (name.clone(), n)),
            _ => None,
        })
        .collect::<Option<_>>()?;
    Some(JournalKey {
        journal: (pk.to_string(), sk.to_string()),
        item: ItemKey::from_item(key).ok()?,
        day: days::day_of_ms(at.parse().ok()?),
        add,
        arrived: match item.get(ARRIVED_ATTRIBUTE) {
            Some(AttributeValue::N(n)) => n.parse().ok(),
            _ => None,
        },
    })
}
