//! The conditional `UpdateItem` of one chunk of keys: which bucket guard it uses
//! ([`Attempt::plan`]), what a failed condition showed ([`OldState::read`]), the expression
//! itself ([`Counter::build_update`]) and how an item's keys are split into chunks that stay
//! within DynamoDB's expression limits ([`chunk_entries`]).
//!
//! ```text
//! SET   #bk = :b
//! ADD   #w0 :keys, #c0 :d0, #c1 :d1, …                  (#w<i>: the bucket i before the target)
//! [REMOVE #r0, #r1, …]                                  (only when the bucket rolls over)
//! IF    <guard> AND NOT (contains(#w0,:k0) OR contains(#w1,:k0) OR … OR contains(#w0,:k1) …)
//! ```

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use super::{Counter, CounterConfig};
use crate::ddb::{Item, Placeholders};

/// Distinct counters one write may add (the update expression stays small).
pub const MAX_COUNTERS_PER_WRITE: usize = 100;

/// Guard of the first attempt: the item is in the writer's bucket, or has no bucket yet.
const GUARD_GUESS: &str = "(attribute_not_exists(#bk) OR #bk = :b)";
/// Guard when the item's bucket is known and is the target.
const GUARD_SAME: &str = "#bk = :b";
/// Guard of a rollover: the item is still in the bucket ALL_OLD showed.
const GUARD_ROLLOVER: &str = "#bk = :bold";
/// Guard when ALL_OLD showed no protocol state (absent item).
const GUARD_NEW: &str = "attribute_not_exists(#bk)";
/// One key-in-bucket test (placeholders filled in per key and bucket).
const TERM_CONTAINS: &str = "contains(#w{b},:k{k})";
/// The update, before its `ADD` terms and its optional `REMOVE` clause.
const UPDATE_SET_BUCKET: &str = "SET #bk = :b ADD ";

/// One distinct key of a batch, for one item: its deltas and the records carrying it.
#[derive(Debug, Clone)]
pub(super) struct KeyEntry {
    /// The stored form of the idempotency key.
    pub(super) hash: String,
    /// Counter name → delta.
    pub(super) add: BTreeMap<String, i64>,
    /// Batch indices; the first is the record that counts, the others are in-batch duplicates.
    pub(super) indices: Vec<usize>,
}

/// How the next write of a chunk is guarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Knowledge {
    /// Nothing read: assume the item is in the writer's bucket (or new).
    Guess,
    /// ALL_OLD showed the item's bucket (`None`: no protocol state).
    Known(Option<u64>),
}

/// What one write of a chunk is conditioned on and where its keys go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Attempt {
    /// The bucket guard.
    guard: &'static str,
    /// The bucket the item is in after the write (new keys go there).
    target: u64,
    /// The item's bucket as ALL_OLD showed it, when the write rolls the item over.
    bold: Option<u64>,
    /// Buckets that fall out of the window with this rollover.
    removals: Vec<u64>,
}

impl Attempt {
    /// The next attempt, from what is known of the item, the writer's bucket `now`, the
    /// number of buckets kept and the buckets ALL_OLD showed.
    pub(super) fn plan(
        knowledge: Knowledge,
        now: u64,
        window_buckets: u32,
        old_buckets: &[u64],
    ) -> Self {
        let (guard, target, bold) = match knowledge {
            Knowledge::Guess => (GUARD_GUESS, now, None),
            Knowledge::Known(None) => (GUARD_NEW, now, None),
            Knowledge::Known(Some(b)) if b >= now => (GUARD_SAME, b, None),
            Knowledge::Known(Some(b)) => (GUARD_ROLLOVER, now, Some(b)),
        };
        let oldest_kept = target.saturating_sub(u64::from(window_buckets).saturating_sub(1));
        let removals = match bold {
            Some(_) => old_buckets
                .iter()
                .copied()
                .filter(|b| *b < oldest_kept)
                .collect(),
            None => Vec::new(),
        };
        Attempt {
            guard,
            target,
            bold,
            removals,
        }
    }
}

/// What a failed condition's `ALL_OLD` item showed.
#[derive(Debug, Default)]
pub(super) struct OldState {
    /// The item's bucket (`None`: no protocol state).
    pub(super) bucket: Option<u64>,
    /// Every key hash the item holds, in any bucket.
    pub(super) keys: BTreeSet<String>,
    /// The buckets of its key attributes.
    pub(super) buckets: Vec<u64>,
}

impl OldState {
    /// Read the protocol state of an `ALL_OLD` item.
    pub(super) fn read(config: &CounterConfig, old: &Item) -> Self {
        let bucket = old
            .get(&config.bucket_attribute())
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok());
        let mut state = OldState {
            bucket,
            ..OldState::default()
        };
        for (name, value) in old {
            if let Some(b) = config.bucket_of_keys_attribute(name) {
                state.buckets.push(b);
                if let AttributeValue::Ss(keys) = value {
                    state.keys.extend(keys.iter().cloned());
                }
            }
        }
        state
    }
}

impl Counter {
    /// The conditional `UpdateItem` adding `pending`'s deltas and keys to the item, under
    /// `attempt`'s guard, with `ALL_OLD` on a failed condition.
    pub(super) fn build_update(
        &self,
        key_item: &Item,
        pending: &[KeyEntry],
        attempt: &Attempt,
    ) -> UpdateItemFluentBuilder {
        let mut p = Placeholders::default();
        p.set_name("#bk", self.config.bucket_attribute())
            .set_value(":b", number(attempt.target));
        if let Some(b) = attempt.bold {
            p.set_value(":bold", number(b));
        }
        let window = self.name_window(attempt.target, &mut p);
        let condition = contains_condition(attempt.guard, pending, window, &mut p);
        let mut update = format!("{UPDATE_SET_BUCKET}{}", add_terms(pending, &mut p));
        update.push_str(&self.remove_clause(&attempt.removals, &mut p));
        let (names, values) = p.into_maps();
        self.client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(key_item.clone()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .update_expression(update)
            .condition_expression(condition)
    }

    /// Name the buckets checked for duplicates: `#w0` is the target bucket (where new keys
    /// go), `#w<i>` the bucket `i` before it (none before bucket 0). Returns how many.
    fn name_window(&self, target: u64, p: &mut Placeholders) -> usize {
        let window =
            (0..u64::from(self.config.window_buckets)).filter_map(|i| target.checked_sub(i));
        let mut count = 0;
        for (i, b) in window.enumerate() {
            p.set_name(&format!("#w{i}"), self.config.keys_attribute(b));
            count += 1;
        }
        count
    }

    /// ` REMOVE #r0, #r1, …` for the buckets that fall out (empty when none do).
    fn remove_clause(&self, removals: &[u64], p: &mut Placeholders) -> String {
        if removals.is_empty() {
            return String::new();
        }
        let mut names = Vec::with_capacity(removals.len());
        for (i, b) in removals.iter().enumerate() {
            let placeholder = format!("#r{i}");
            p.set_name(&placeholder, self.config.keys_attribute(*b));
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

/// `#w0 :keys, #c0 :d0, …`: the pending keys into the target bucket, and each counter's
/// summed deltas (counters in name order).
fn add_terms(pending: &[KeyEntry], p: &mut Placeholders) -> String {
    let hashes = pending.iter().map(|e| e.hash.clone()).collect();
    p.set_value(":keys", AttributeValue::Ss(hashes));
    let mut totals: BTreeMap<&str, i128> = BTreeMap::new();
    for (name, delta) in pending.iter().flat_map(|e| &e.add) {
        *totals.entry(name.as_str()).or_default() += i128::from(*delta);
    }
    let mut adds = vec!["#w0 :keys".to_string()];
    for (i, (name, total)) in totals.into_iter().enumerate() {
        p.set_name(&format!("#c{i}"), name)
            .set_value(&format!(":d{i}"), AttributeValue::N(total.to_string()));
        adds.push(format!("#c{i} :d{i}"));
    }
    adds.join(", ")
}

fn number(n: u64) -> AttributeValue {
    AttributeValue::N(n.to_string())
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
    use crate::counter::hash_key;

    #[test]
    fn a_rollover_removes_only_the_buckets_that_fall_out() {
        let plan = |knowledge| Attempt::plan(knowledge, 105, 3, &[98, 99, 100, 104]);
        assert_eq!(plan(Knowledge::Guess).guard, GUARD_GUESS);
        assert_eq!(plan(Knowledge::Known(None)).guard, GUARD_NEW);
        let behind = plan(Knowledge::Known(Some(107)));
        assert_eq!((behind.guard, behind.target), (GUARD_SAME, 107));
        let rollover = plan(Knowledge::Known(Some(100)));
        assert_eq!(
            (rollover.guard, rollover.target, rollover.bold),
            (GUARD_ROLLOVER, 105, Some(100))
        );
        assert_eq!(rollover.removals, [98, 99, 100]);
        assert!(plan(Knowledge::Guess).removals.is_empty());
    }

    #[test]
    fn chunks_respect_keys_and_counters_per_write() {
        let entry = |i: usize, counter: String| KeyEntry {
            hash: i.to_string(),
            add: BTreeMap::from([(counter, 1)]),
            indices: vec![i],
        };
        let sizes = |chunks: Vec<Vec<KeyEntry>>| chunks.iter().map(Vec::len).collect::<Vec<_>>();
        let same: Vec<KeyEntry> = (0..150).map(|i| entry(i, "n".into())).collect();
        assert_eq!(sizes(chunk_entries(same, 71)), [71, 71, 8]);
        let distinct: Vec<KeyEntry> = (0..150).map(|i| entry(i, format!("c{i}"))).collect();
        assert_eq!(sizes(chunk_entries(distinct, 200)), [100, 50]);
    }

    /// The exact request of a rollover (expressions and placeholders as DynamoDB sees them).
    #[test]
    fn the_update_of_a_rollover_is_stable() {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        let mut config = CounterConfig::new("counters");
        config.window_buckets = 3;
        let counter = Counter::new(aws_sdk_dynamodb::Client::from_conf(conf), config);
        let pending = [
            ("k0", vec![("logins", 3), ("authz", -1)]),
            ("k1", vec![("logins", 1)]),
        ]
        .map(|(key, add)| KeyEntry {
            hash: hash_key(key),
            add: add.into_iter().map(|(n, d)| (n.to_string(), d)).collect(),
            indices: vec![0],
        });
        let attempt = Attempt::plan(Knowledge::Known(Some(100)), 105, 3, &[98, 99, 100]);
        let req = counter.build_update(&Item::new(), &pending, &attempt);
        assert_eq!(
            req.get_update_expression().as_deref(),
            Some("SET #bk = :b ADD #w0 :keys, #c0 :d0, #c1 :d1 REMOVE #r0, #r1, #r2")
        );
        assert_eq!(
            req.get_condition_expression().as_deref(),
            Some(
                "#bk = :bold AND NOT (contains(#w0,:k0) OR contains(#w1,:k0) OR contains(#w2,:k0) \
                 OR contains(#w0,:k1) OR contains(#w1,:k1) OR contains(#w2,:k1))"
            )
        );
        let names: BTreeMap<String, String> = req
            .get_expression_attribute_names()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        assert_eq!(names["#w2"], "ctr_keys_103");
        assert_eq!(names["#r2"], "ctr_keys_100");
        assert_eq!(names["#c1"], "logins");
        let values = req
            .get_expression_attribute_values()
            .clone()
            .unwrap_or_default();
        assert_eq!(values[":d1"], AttributeValue::N("4".into()));
        assert_eq!(values[":bold"], AttributeValue::N("100".into()));
        assert_eq!(values.len(), 7);
    }
}
