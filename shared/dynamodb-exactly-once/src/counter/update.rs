//! The conditional `UpdateItem` of one chunk of keys, built from a [`Plan`] of the item's
//! buckets ([`Counter::build_update`]), and how an item's keys are split into chunks that
//! stay within DynamoDB's expression limits ([`chunk_entries`]).
//!
//! ```text
//! SET   #bk = :layout                         (a guess: #bk = if_not_exists(#bk, :layout))
//!       [, #lay = :lay]                        (the prefix marker, under a non-default prefix)
//! ADD   #t :keys, #c0 :d0, #c1 :d1, …         (#t: the writer's bucket)
//! [REMOVE #r0, #r1, …]                        (buckets whose keys expired)
//! IF    <guard> AND NOT (contains(#w0,:k0) OR contains(#w1,:k0) OR … OR contains(#w0,:k1) …)
//! ```
//!
//! `#w<i>` names every bucket of the layout the write was planned on, and the guard pins that
//! layout (`#bk = :bold`, `attribute_not_exists(#bk)`, or for a first write one of the
//! layouts the writer's settings give in steady state); a guard that allows an item without
//! `#bk` also requires it to be of no other prefix (`marker`).

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use super::bucket::encode;
use super::layout::{Guard, Plan};
use super::marker::PrefixMarker;
use super::Counter;
use crate::ddb::number::{Number, NumberError};
use crate::ddb::{Item, Placeholders, StoreError};

/// Distinct counters one write may add (the update expression stays small).
pub(crate) const MAX_COUNTERS_PER_WRITE: usize = 100;

/// The records of the write arrived after the item last forgot keys (`#fg`: its
/// `<prefix>forgot`, `:arr`: the earliest arrival of the write's records, epoch s).
const CONDITION_NOT_FORGOTTEN: &str = "(attribute_not_exists(#fg) OR #fg <= :arr)";
/// One key-in-bucket test (placeholders filled in per key and bucket).
const TERM_CONTAINS: &str = "contains(#w{b},:k{k})";
/// The update's `SET` of the layout, for a write planned on a known layout.
const UPDATE_SET_LAYOUT: &str = "SET #bk = :layout";
/// The update's `SET` of the layout, for a guess (the layout of a new item, else unchanged).
const UPDATE_SET_LAYOUT_IF_NEW: &str = "SET #bk = if_not_exists(#bk, :layout)";

/// One distinct key of a batch, for one item: its deltas and the records carrying it.
#[derive(Debug, Clone)]
pub(super) struct KeyEntry {
    /// The stored form of the idempotency key.
    pub(super) hash: String,
    /// Counter name → delta.
    pub(super) add: BTreeMap<String, Number>,
    /// Batch indices; the first is the record that counts, the others are in-batch duplicates.
    pub(super) indices: Vec<usize>,
    /// The in-batch duplicates whose deltas differ from the first record's.
    pub(super) conflicting: Vec<usize>,
    /// The earliest arrival (epoch s) of its records, when known.
    pub(super) arrived: Option<u64>,
}

impl KeyEntry {
    /// The entry of one record.
    pub(super) fn new(hash: String, add: BTreeMap<String, Number>, index: usize) -> Self {
        KeyEntry {
            hash,
            add,
            indices: vec![index],
            conflicting: Vec::new(),
            arrived: None,
        }
    }

    /// The entry with one more record's arrival (the earliest one counts: if any copy of the
    /// key is older than what the item forgot, the key may have been counted and forgotten).
    pub(super) fn arrived(mut self, arrived: Option<u64>) -> Self {
        self.note_arrival(arrived);
        self
    }

    fn note_arrival(&mut self, arrived: Option<u64>) {
        self.arrived = match (self.arrived, arrived) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// One more record with this key: a duplicate, conflicting when its deltas differ.
    pub(super) fn push(
        &mut self,
        index: usize,
        add: &BTreeMap<String, Number>,
        arrived: Option<u64>,
    ) {
        self.note_arrival(arrived);
        self.indices.push(index);
        if *add != self.add {
            self.conflicting.push(index);
        }
    }
}

impl Counter {
    /// The conditional `UpdateItem` adding `pending`'s deltas and keys to the item as `plan`
    /// says, with `ALL_OLD` on a failed condition.
    pub(super) fn build_update(
        &self,
        key_item: &Item,
        pending: &[KeyEntry],
        plan: &Plan,
    ) -> Result<UpdateItemFluentBuilder, StoreError> {
        let marker = PrefixMarker::new(&self.config.attribute_prefix);
        let mut p = Placeholders::default();
        marker.emit(&mut p, plan.allows_absent());
        p.set_name("#bk", self.config.bucket_attribute())
            .set_name("#t", self.config.keys_attribute(&plan.target))
            .set_value(":layout", AttributeValue::S(encode(&plan.after)));
        let set = match &plan.guard {
            Guard::Is(old) => {
                p.set_value(":bold", old.clone());
                UPDATE_SET_LAYOUT
            }
            Guard::Absent => UPDATE_SET_LAYOUT,
            Guard::Guess(guesses) => {
                for (i, guess) in guesses.iter().enumerate() {
                    p.set_value(&format!(":g{i}"), AttributeValue::S(guess.clone()));
                }
                UPDATE_SET_LAYOUT_IF_NEW
            }
        };
        for (i, bucket) in plan.checked.iter().enumerate() {
            p.set_name(&format!("#w{i}"), self.config.keys_attribute(bucket));
        }
        let mut guard = plan.guard_condition(&marker);
        if let Some(arrived) = pending.iter().filter_map(|e| e.arrived).min() {
            p.set_name("#fg", self.config.forgotten_attribute())
                .set_value(":arr", AttributeValue::N(arrived.to_string()));
            guard = format!("{guard} AND {CONDITION_NOT_FORGOTTEN}");
        }
        let condition = contains_condition(&guard, pending, plan.checked.len(), &mut p);
        let mut set = format!("{set}{}", marker.set_term().unwrap_or_default());
        if let Some(forgotten) = plan.sets_forgotten() {
            p.set_name("#fg", self.config.forgotten_attribute())
                .set_value(":fg", AttributeValue::N(forgotten.to_string()));
            set.push_str(", #fg = :fg");
        }
        let mut update = format!("{set} ADD {}", add_terms(pending, &mut p)?);
        update.push_str(&self.remove_clause(plan, &mut p));
        let (names, values) = p.into_maps();
        Ok(self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(key_item.clone()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .update_expression(update)
            .condition_expression(condition))
    }

    /// ` REMOVE #r0, #r1, …` for the buckets that fall out (empty when none do).
    fn remove_clause(&self, plan: &Plan, p: &mut Placeholders) -> String {
        if plan.removals.is_empty() {
            return String::new();
        }
        let mut names = Vec::with_capacity(plan.removals.len());
        for (i, bucket) in plan.removals.iter().enumerate() {
            let placeholder = format!("#r{i}");
            p.set_name(&placeholder, self.config.keys_attribute(bucket));
            names.push(placeholder);
        }
        format!(" REMOVE {}", names.join(", "))
    }
}

/// `<guard> AND NOT (contains(#w0,:k0) OR …)`: no pending key is in any bucket of the window
/// (`:k<k>` is the hash of the k-th pending key).
fn contains_condition(
    guard: &str,
    pending: &[KeyEntry],
    window: usize,
    p: &mut Placeholders,
) -> String {
    if window == 0 {
        return guard.to_string();
    }
    let mut terms = Vec::with_capacity(pending.len() * window);
    for (k, entry) in pending.iter().enumerate() {
        p.set_value(&format!(":k{k}"), AttributeValue::S(entry.hash.clone()));
        for b in 0..window {
            terms.push(
                TERM_CONTAINS
                    .replace("{b}", &b.to_string())
                    .replace("{k}", &k.to_string()),
            );
        }
    }
    format!("{guard} AND NOT ({})", terms.join(" OR "))
}

/// `#t :keys, #c0 :d0, …`: the pending keys into the target bucket, and each counter's
/// summed deltas (counters in name order), summed exactly. A sum DynamoDB could not store
/// (over 38 significant digits) is a `ValidationException`-like refusal: the chunk is halved
/// until each part sums, as for a chunk DynamoDB itself refused.
fn add_terms(pending: &[KeyEntry], p: &mut Placeholders) -> Result<String, StoreError> {
    let hashes = pending.iter().map(|e| e.hash.clone()).collect();
    p.set_value(":keys", AttributeValue::Ss(hashes));
    let totals = sum_deltas(pending.iter().map(|e| &e.add))
        .map_err(|e| StoreError::Inconsistent(format!("the deltas of one write: {e}")))?;
    let mut adds = vec!["#t :keys".to_string()];
    for (i, (name, total)) in totals.into_iter().enumerate() {
        p.set_name(&format!("#c{i}"), name)
            .set_value(&format!(":d{i}"), AttributeValue::N(total.canonical()));
        adds.push(format!("#c{i} :d{i}"));
    }
    Ok(adds.join(", "))
}

/// Each counter's deltas summed exactly ([`Number::checked_add`]).
pub(crate) fn sum_deltas<'a>(
    adds: impl IntoIterator<Item = &'a BTreeMap<String, Number>>,
) -> Result<BTreeMap<&'a str, Number>, NumberError> {
    let mut totals: BTreeMap<&str, Number> = BTreeMap::new();
    for (name, delta) in adds.into_iter().flatten() {
        let total = match totals.get(name.as_str()) {
            Some(total) => total.checked_add(delta)?,
            None => delta.clone(),
        };
        totals.insert(name, total);
    }
    Ok(totals)
}

/// Split an item's distinct keys into writes of at most `max_keys` keys and
/// [`MAX_COUNTERS_PER_WRITE`] distinct counters each, in order.
pub(super) fn chunk_entries(entries: Vec<KeyEntry>, max_keys: usize) -> Vec<Vec<KeyEntry>> {
    let mut out: Vec<Vec<KeyEntry>> = Vec::new();
    let mut current: Vec<KeyEntry> = Vec::new();
    let mut names: BTreeSet<String> = BTreeSet::new();
    for entry in entries {
        let new_names = entry.add.keys().filter(|n| !names.contains(*n)).count();
        if !current.is_empty()
            && (current.len() >= max_keys || names.len() + new_names > MAX_COUNTERS_PER_WRITE)
        {
            out.push(std::mem::take(&mut current));
            names.clear();
        }
        names.extend(entry.add.keys().cloned());
        current.push(entry);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::bucket::{Bucket, BucketName};
    use crate::counter::layout::{Grid, Knowledge, Layout};
    use crate::counter::{hash_key, CounterConfig};

    fn one() -> Number {
        Number::parse("1").expect("1")
    }

    #[test]
    fn chunks_respect_keys_and_counters_per_write() {
        let entry =
            |i: usize, counter: String| KeyEntry::new(i.to_string(), [(counter, one())].into(), i);
        let sizes = |chunks: Vec<Vec<KeyEntry>>| chunks.iter().map(Vec::len).collect::<Vec<_>>();
        let same: Vec<KeyEntry> = (0..150).map(|i| entry(i, "n".into())).collect();
        assert_eq!(sizes(chunk_entries(same, 71)), [71, 71, 8]);
        let distinct: Vec<KeyEntry> = (0..150).map(|i| entry(i, format!("c{i}"))).collect();
        assert_eq!(sizes(chunk_entries(distinct, 200)), [100, 50]);
    }

    #[test]
    fn a_duplicate_with_other_deltas_is_marked_conflicting() {
        let mut e = KeyEntry::new("h".into(), [("n".to_string(), Number::from(1))].into(), 0);
        e.push(3, &[("n".to_string(), Number::from(1))].into(), None);
        e.push(5, &[("n".to_string(), Number::from(2))].into(), None);
        e.push(
            7,
            &[
                ("n".to_string(), Number::from(1)),
                ("m".to_string(), Number::from(1)),
            ]
            .into(),
            None,
        );
        assert_eq!(e.indices, [0, 3, 5, 7]);
        assert_eq!(e.conflicting, [5, 7]);
    }

    /// The exact request of a rollover (expressions and placeholders as DynamoDB sees them).
    #[test]
    fn the_update_of_a_rollover_is_stable() {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        let config = CounterConfig::builder("counters")
            .window_buckets(3) // buckets of 1800 s, kept 5400 s from their start
            .build()
            .expect("valid");
        let grid = Grid::of(&config);
        let counter = Counter::new(aws_sdk_dynamodb::Client::from_conf(conf), config);
        let t: u64 = 1_800_000_000;
        let span = |start: u64| Bucket {
            until: start + 5400,
            name: BucketName::Span { start },
        };
        let buckets: BTreeSet<Bucket> = [t - 5400, t - 3600, t - 1800].map(span).into();
        let old_layout = encode(&buckets);
        let layout = Layout {
            guard: Some(AttributeValue::S(old_layout.clone())),
            buckets,
            forgotten: None,
        };
        let plan = Plan::new(&Knowledge::Known(layout), &grid, t + 100);
        let pending = [
            ("k0", vec![("logins", 3), ("authz", -1)]),
            ("k1", vec![("logins", 1)]),
        ]
        .map(|(key, add)| {
            let add = add
                .into_iter()
                .map(|(n, d)| (n.to_string(), Number::from(d)))
                .collect();
            KeyEntry::new(hash_key(key), add, 0)
        });
        let pending = [pending[0].clone().arrived(Some(t - 10)), pending[1].clone()];
        let req = counter
            .build_update(&Item::new(), &pending, &plan)
            .expect("sums");
        assert_eq!(
            req.get_update_expression().as_deref(),
            Some("SET #bk = :layout, #fg = :fg ADD #t :keys, #c0 :d0, #c1 :d1 REMOVE #r0")
        );
        assert_eq!(
            req.get_condition_expression().as_deref(),
            Some(
                "#bk = :bold AND (attribute_not_exists(#fg) OR #fg <= :arr) \
                 AND NOT (contains(#w0,:k0) OR contains(#w1,:k0) OR contains(#w2,:k0) \
                 OR contains(#w0,:k1) OR contains(#w1,:k1) OR contains(#w2,:k1))"
            )
        );
        let names: BTreeMap<String, String> = req
            .get_expression_attribute_names()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        assert_eq!(names["#w0"], "ctr_keys_1799994600_1800000000");
        assert_eq!(names["#r0"], "ctr_keys_1799994600_1800000000");
        assert_eq!(names["#t"], "ctr_keys_1800000000_1800005400");
        assert_eq!(names["#c1"], "logins");
        let values = req
            .get_expression_attribute_values()
            .clone()
            .unwrap_or_default();
        assert_eq!(values[":d1"], AttributeValue::N("4".into()));
        assert_eq!(values[":bold"], AttributeValue::S(old_layout));
        assert_eq!(
            values[":layout"],
            AttributeValue::S(
                "1799996400_1800001800,1799998200_1800003600,1800000000_1800005400".into()
            )
        );
        // The removed bucket's span ended where the next one of its retention starts.
        assert_eq!(values[":fg"], AttributeValue::N((t - 3600).to_string()));
        assert_eq!(values[":arr"], AttributeValue::N((t - 10).to_string()));
        assert_eq!(names["#fg"], "ctr_forgot");
        assert_eq!(values.len(), 9);
    }
}
