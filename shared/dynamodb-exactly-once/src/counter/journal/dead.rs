//! Poison isolation: a counter item whose update DynamoDB refuses as invalid (its key does
//! not fit the counter table, a counter that is not a number on the item, an item grown over
//! 400 KB) never stops its shard. Its events are applied in halves, in order, until each
//! refused event stands alone; that event becomes a dead letter (kept in the journal table
//! with its journal key, counter item and deltas), its watermark moves past it, and the rest
//! is applied. A record the journal's writer did not write becomes a dead letter too.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;

use super::apply::ItemApplied;
use super::entry::{JOURNAL_KEY_ATTRIBUTE, JOURNAL_SORT_ATTRIBUTE};
use super::event::{Event, DEAD_PARTITION};
use super::Rollup;
use crate::ddb::error::ErrorClass;
use crate::ddb::{Cost, Item, ItemKey, Read, StoreError};

/// Longest reason kept with a dead letter (bytes).
const MAX_REASON_BYTES: usize = 300;

/// A journal record the roll-up could not count: kept in the journal table (partition
/// `~dead`, sort key `<shard>#<sequence number>`) and listed in the run's report.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RollupDeadLetter {
    /// The stream shard.
    pub shard: String,
    /// The stream record's sequence number.
    pub seq: String,
    /// Why it was not counted.
    pub reason: String,
    /// The journal item's key (partition, sort), when the image had one.
    pub journal_key: Option<(String, String)>,
    /// The counter item's canonical key, when the image had one.
    pub item: Option<String>,
    /// Counter name → delta, when the image had them.
    pub add: BTreeMap<String, crate::ddb::number::Number>,
}

impl RollupDeadLetter {
    pub(super) fn of_event(shard: &str, event: &Event, reason: &str) -> Self {
        RollupDeadLetter {
            shard: shard.to_string(),
            seq: event.seq_text.clone(),
            reason: crate::text::bounded(reason, MAX_REASON_BYTES),
            journal_key: Some((event.pk.clone(), event.hash.clone())),
            item: Some(event.item.canonical().to_string()),
            add: event.add.clone(),
        }
    }

    pub(super) fn of_record(shard: &str, seq: &str, reason: &str) -> Self {
        RollupDeadLetter {
            shard: shard.to_string(),
            seq: seq.to_string(),
            reason: crate::text::bounded(reason, MAX_REASON_BYTES),
            journal_key: None,
            item: None,
            add: BTreeMap::new(),
        }
    }

    pub(super) fn to_item(&self) -> Item {
        let s = |v: &str| AttributeValue::S(v.to_string());
        let mut item = HashMap::from([
            (JOURNAL_KEY_ATTRIBUTE.to_string(), s(DEAD_PARTITION)),
            (
                JOURNAL_SORT_ATTRIBUTE.to_string(),
                s(&format!("{}#{}", self.shard, self.seq)),
            ),
            ("reason".to_string(), s(&self.reason)),
        ]);
        if let Some((pk, sk)) = &self.journal_key {
            item.insert("journal_pk".into(), s(pk));
            item.insert("journal_sk".into(), s(sk));
        }
        if let Some(key) = &self.item {
            item.insert("item".into(), s(key));
        }
        if !self.add.is_empty() {
            let add = self
                .add
                .iter()
                .map(|(n, d)| (n.clone(), AttributeValue::N(d.canonical())))
                .collect();
            item.insert("add".into(), AttributeValue::M(add));
        }
        item
    }
}

/// What isolating one item's events did.
#[derive(Debug, Default)]
pub(super) struct Isolated {
    pub(super) applied: ItemApplied,
    /// Dead letters kept (the report lists them).
    pub(super) dead: Vec<RollupDeadLetter>,
    /// A failure that is not the events' fault: the rest is left for the next run.
    pub(super) failed: Option<StoreError>,
}

fn invalid(e: &StoreError) -> bool {
    e.class() == ErrorClass::InvalidRequest
}

impl Rollup {
    /// Apply `events` of `key` after DynamoDB refused them together as invalid.
    pub(super) async fn isolate(
        &self,
        key: &ItemKey,
        events: Vec<Event>,
        shard_ids: &[String],
        names: &[String],
        cost: &Cost,
    ) -> Isolated {
        let mut out = Isolated::default();
        let shard = |e: &Event| shard_ids.get(e.shard).cloned().unwrap_or_default();
        // A key the counter table refuses: nothing can ever be written to it.
        let probe =
            crate::ddb::read::get_item(&self.ddb, &self.config.counter.table, key, Read::Eventual);
        if let Err(e) = probe.await {
            if invalid(&e) {
                let reason = format!("the counter table refuses the item key: {e}");
                let dead: Vec<RollupDeadLetter> = events
                    .iter()
                    .map(|ev| RollupDeadLetter::of_event(&shard(ev), ev, &reason))
                    .collect();
                match self.keep_dead_letters(&dead, cost).await {
                    Ok(()) => out.dead = dead,
                    Err(e) => out.failed = Some(e),
                }
                return out;
            }
        }
        // Halves in order (each shard's events stay ascending), down to single events.
        let mut todo: Vec<Vec<Event>> = vec![events];
        while let Some(chunk) = todo.pop() {
            let result = self.apply_events(key, chunk.clone(), names, cost).await;
            match result {
                Ok(applied) => out.add(applied),
                Err(e) if invalid(&e) && chunk.len() > 1 => {
                    let mut first = chunk;
                    let second = first.split_off(first.len() / 2);
                    todo.push(second);
                    todo.push(first);
                }
                Err(e) if invalid(&e) => {
                    let Some(event) = chunk.into_iter().next() else {
                        continue;
                    };
                    // Kept first, then past it (its watermark moves, nothing is added): a
                    // letter that could not be kept leaves the event to be isolated again.
                    let letter = RollupDeadLetter::of_event(&shard(&event), &event, &e.to_string());
                    if let Err(e) = self
                        .keep_dead_letters(std::slice::from_ref(&letter), cost)
                        .await
                    {
                        out.failed = Some(e);
                        return out;
                    }
                    let mut past = event.clone();
                    past.add.clear();
                    match self.apply_events(key, vec![past], names, cost).await {
                        Ok(applied) => {
                            out.add(applied);
                            out.dead.push(letter);
                        }
                        Err(e) => {
                            out.failed = Some(e);
                            return out;
                        }
                    }
                }
                Err(e) => {
                    out.failed = Some(e);
                    return out;
                }
            }
        }
        out
    }

    /// Keep `dead` in the journal table (idempotent puts: a record dead-lettered again by a
    /// re-read overwrites its own letter).
    pub(super) async fn keep_dead_letters(
        &self,
        dead: &[RollupDeadLetter],
        cost: &Cost,
    ) -> Result<(), StoreError> {
        // One letter per record (a batch refuses two puts of one key).
        let mut seen = std::collections::HashSet::new();
        let letters: Vec<Item> = dead
            .iter()
            .filter(|d| seen.insert((d.shard.as_str(), d.seq.as_str())))
            .map(RollupDeadLetter::to_item)
            .collect();
        crate::ddb::batch::put_all(&self.ddb, &self.config.journal_table, letters, cost).await
    }
}

impl Isolated {
    fn add(&mut self, applied: ItemApplied) {
        self.applied.applied += applied.applied;
        self.applied.duplicates += applied.duplicates;
        self.applied.updates += applied.updates;
        self.applied.too_old.extend(applied.too_old);
    }
}

impl Rollup {
    /// Keep the keys found too old (they arrived before their item forgot inline keys) as dead
    /// letters; when they cannot be kept, the item fails (its shards read again next run).
    pub(super) async fn keep_too_old(&self, out: &mut Isolated, shard_ids: &[String], cost: &Cost) {
        let too_old = std::mem::take(&mut out.applied.too_old);
        if too_old.is_empty() || out.failed.is_some() {
            return;
        }
        let letters: Vec<RollupDeadLetter> = too_old
            .iter()
            .map(|(e, forgotten)| {
                let shard = shard_ids.get(e.shard).cloned().unwrap_or_default();
                let arrived = e.arrived.unwrap_or_default();
                let reason = super::migrate::too_old_reason(arrived, *forgotten);
                RollupDeadLetter::of_event(&shard, e, &reason)
            })
            .collect();
        match self.keep_dead_letters(&letters, cost).await {
            Ok(()) => out.dead.extend(letters),
            Err(e) => out.failed = Some(e),
        }
    }
}

impl Rollup {
    /// Apply one item's events; on a refusal as invalid, isolate the events at fault.
    pub(super) async fn apply_item(
        &self,
        key: &ItemKey,
        events: Vec<Event>,
        ids: &[String],
        names: &[String],
        cost: &Cost,
    ) -> Isolated {
        let mut out = match self.apply_events(key, events.clone(), names, cost).await {
            Ok(applied) => Isolated {
                applied,
                ..Default::default()
            },
            Err(e) if e.class() == ErrorClass::InvalidRequest => {
                self.isolate(key, events, ids, names, cost).await
            }
            Err(e) => Isolated {
                failed: Some(e),
                ..Default::default()
            },
        };
        self.keep_too_old(&mut out, ids, cost).await;
        out
    }
}
