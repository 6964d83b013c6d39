//! The key buckets of an item and how a write moves them.
//!
//! A bucket holds the hashes of the keys a writer applied while its clock was in one span of
//! [`CounterConfig::bucket_seconds`], and is named by absolute times:
//! `<prefix>keys_<start>_<until>`, where `start` is the span's first epoch second and
//! `until = start + W × bucket_seconds` the time until which its keys must be kept (the
//! window after the span's end). Nothing in a name depends on the settings of the writer that
//! reads it, so writers with other settings (a redeployment, two deployments at once) read
//! each other's buckets correctly:
//!
//! ```text
//!  writer W=2, 3600 s:  keys_T_T+7200  ───────────────────────────┤ kept until T+7200
//!  writer W=4, 1200 s:        keys_T+1200_T+6000 ────────┤
//!                                   keys_T+2400_T+7200 ─────────┤
//!  time ──►  T      T+1200      T+2400 …                 T+6000   T+7200
//! ```
//!
//! * **Where keys go** ([`Plan::known`]): into the writer's own bucket (its clock, its
//!   settings), created by the write if absent. No writer ever waits for another's bucket:
//!   changing W or the window never blocks roll-over.
//! * **What is removed**: the buckets whose `until` has passed. The writer's clock decides,
//!   unless it is more than [`TRUSTED_BUCKETS`] of its bucket lengths ahead of the newest
//!   bucket another write started (a clock far ahead, or an item idle for a while: the two
//!   look alike); then only buckets that expired before that newest start go. A writer whose
//!   clock jumps ahead therefore cannot evict keys still inside the window of the others.
//! * **The guard**: `<prefix>bucket` holds the item's *layout*, the sorted list of its buckets
//!   (`<start>_<until>,…`). Every write is conditioned on the layout it was planned on and
//!   tests its keys against every bucket of it, so no bucket is ever missed; a write that
//!   changes the set of buckets sets the new layout in the same update.

use std::collections::BTreeSet;

use aws_sdk_dynamodb::types::AttributeValue;

use super::bucket::{encode, Bucket, BucketName};
use super::config::{CounterConfig, MAX_EXPRESSION_BYTES, MAX_EXPRESSION_OPERATORS};
use super::forget::span_end;
use super::marker::PrefixMarker;
use crate::ddb::Item;

/// A writer trusts its clock for removals while it is at most this many of its bucket lengths
/// ahead of the newest bucket start it did not write itself.
pub(crate) const TRUSTED_BUCKETS: u64 = 2;
/// Guard of a write planned on a known layout.
const GUARD_IS: &str = "#bk = :bold";
/// Guard of a write on an item without protocol state.
const GUARD_ABSENT: &str = "attribute_not_exists(#bk)";
/// Operators of a condition besides the guard and the key tests (`AND`, `NOT`, the prefix
/// marker's terms, slack).
const RESERVED_OPERATORS: usize = 8;
/// Bytes of a condition besides the guard and the key tests (the prefix marker's terms
/// included).
const RESERVED_BYTES: usize = 128;
/// Operators of the age term `(attribute_not_exists(#fg) OR #fg <= :arr) AND `.
pub(super) const AGE_TERM_OPERATORS: usize = 4;
/// Bytes of the age term.
pub(super) const AGE_TERM_BYTES: usize = 48;
/// Bytes of one `contains(#w<b>,:k<k>) OR ` term, indices of up to three digits.
const TERM_BYTES: usize = 24;

/// The buckets of a writer's settings: spans of `len` seconds, kept `keep` seconds from
/// their start (`W × len`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Grid {
    len: u64,
    keep: u64,
    buckets: u32,
}

impl Grid {
    /// `<prefix>forgot` once `removed` (buckets of `layout`) are removed: the newest span end
    /// of what they held, never below what `layout` forgot already (`None`: nothing forgotten).
    /// The journal's roll-up removes inline buckets with it.
    #[cfg(feature = "journal")]
    pub(super) fn forgotten_after(&self, removed: &[Bucket], layout: &Layout) -> Option<u64> {
        removed
            .iter()
            .map(|b| span_end(b, &layout.buckets, self.len, self.keep))
            .chain(layout.forgotten)
            .max()
    }

    /// The grid of `config`.
    pub(super) fn of(config: &CounterConfig) -> Self {
        let len = config.bucket_seconds();
        Grid {
            len,
            keep: len.saturating_mul(u64::from(config.window_buckets)),
            buckets: config.window_buckets,
        }
    }

    /// The bucket a clock reading `now` writes into.
    pub(super) fn bucket_at(&self, now: u64) -> Bucket {
        let start = now - now % self.len.max(1);
        self.span(start)
    }

    fn span(&self, start: u64) -> Bucket {
        Bucket {
            until: start.saturating_add(self.keep),
            name: BucketName::Span { start },
        }
    }
}

/// What is known of an item's buckets.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Knowledge {
    /// Nothing read: guess the layout this writer's settings give in steady state.
    Guess,
    /// Read from `ALL_OLD`, or written by our own last write.
    Known(Layout),
}

/// An item's buckets, and the value of `<prefix>bucket` they were read with.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Layout {
    /// `<prefix>bucket` as read (`None`: absent): the next write's guard.
    pub(super) guard: Option<AttributeValue>,
    /// The buckets.
    pub(super) buckets: BTreeSet<Bucket>,
    /// `<prefix>forgot` as read: records that arrived before it may have left the item.
    pub(super) forgotten: Option<u64>,
}

impl Layout {
    /// The layout of an `ALL_OLD` item and every key hash it holds.
    pub(super) fn read(config: &CounterConfig, old: &Item) -> (Self, BTreeSet<String>) {
        let guard = old.get(&config.bucket_attribute()).cloned();
        let mut buckets = BTreeSet::new();
        let mut keys = BTreeSet::new();
        for (name, value) in old {
            let Some(bucket) = config.parse_keys_attribute(name) else {
                continue;
            };
            buckets.insert(bucket);
            if let AttributeValue::Ss(hashes) = value {
                keys.extend(hashes.iter().cloned());
            }
        }
        let forgotten = match old.get(&config.forgotten_attribute()) {
            Some(AttributeValue::N(n)) => n.parse().ok(),
            _ => None,
        };
        let layout = Layout {
            guard,
            buckets,
            forgotten,
        };
        (layout, keys)
    }
}

/// How the next write of a chunk is guarded.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Guard {
    /// The item has no layout, or one of these (the guesses).
    Guess(Vec<String>),
    /// The item has no layout.
    Absent,
    /// The item's `<prefix>bucket` is exactly this value.
    Is(AttributeValue),
}

/// One planned write: its guard, the buckets its keys are tested against, where they go and
/// which buckets it removes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Plan {
    /// The condition on the layout.
    pub(super) guard: Guard,
    /// Buckets whose keys count as present (every bucket of the layout).
    pub(super) checked: Vec<Bucket>,
    /// Where the new keys go.
    pub(super) target: Bucket,
    /// Buckets removed by the write.
    pub(super) removals: Vec<Bucket>,
    /// The layout after the write (for a guess: the layout of a new item).
    pub(super) after: BTreeSet<Bucket>,
    /// `<prefix>forgot` before the write (as known) and after it (raised by the removals).
    pub(super) forgotten: (Option<u64>, Option<u64>),
}

impl Plan {
    /// The plan for what is known of the item, at `now` on the writer's clock.
    pub(super) fn new(knowledge: &Knowledge, grid: &Grid, now: u64) -> Self {
        match knowledge {
            Knowledge::Guess => Plan::guess(grid, now),
            Knowledge::Known(layout) => Plan::known(layout, grid, now),
        }
    }

    /// Without a read: the item is new, or holds the writer's current bucket and the ones
    /// before it (`{c}`, `{c-1, c}`, … up to W buckets). None of these needs a removal or a
    /// new bucket, so one update fits them all: `SET #bk = if_not_exists(#bk, :layout)`.
    fn guess(grid: &Grid, now: u64) -> Self {
        let target = grid.bucket_at(now);
        let mut suffix = BTreeSet::from([target]);
        let mut guesses = vec![encode(&suffix)];
        let mut checked = vec![target];
        for back in 1..u64::from(grid.buckets) {
            let Some(start) = target.start().checked_sub(back.saturating_mul(grid.len)) else {
                break;
            };
            let bucket = grid.span(start);
            suffix.insert(bucket);
            guesses.push(encode(&suffix));
            checked.push(bucket);
        }
        Plan {
            guard: Guard::Guess(guesses),
            checked,
            target,
            removals: Vec::new(),
            after: BTreeSet::from([target]),
            forgotten: (None, None),
        }
    }

    /// With the layout known: keys into the writer's own bucket, expired buckets removed
    /// (by the writer's clock, or by the newest other start when the clock is too far ahead).
    fn known(layout: &Layout, grid: &Grid, now: u64) -> Self {
        let target = grid.bucket_at(now);
        let others = || layout.buckets.iter().filter(move |b| **b != target);
        let newest_other = others().map(Bucket::start).max();
        let trusted_now = match newest_other {
            Some(start) if now > start.saturating_add(TRUSTED_BUCKETS * grid.len) => start,
            _ => now,
        };
        let (removals, mut after): (Vec<Bucket>, Vec<Bucket>) =
            others().partition(|b| b.until <= trusted_now);
        after.push(target);
        let forgotten = removals
            .iter()
            .map(|b| span_end(b, &layout.buckets, grid.len, grid.keep))
            .chain(layout.forgotten)
            .max();
        Plan {
            guard: layout.guard.clone().map_or(Guard::Absent, Guard::Is),
            checked: layout.buckets.iter().copied().collect(),
            target,
            removals,
            after: after.into_iter().collect(),
            forgotten: (layout.forgotten, forgotten),
        }
    }

    /// The guard's condition text (a guard that allows an item without `#bk` also checks the
    /// item is of no other prefix: `marker`'s terms).
    pub(super) fn guard_condition(&self, marker: &PrefixMarker) -> String {
        let absent = format!("{GUARD_ABSENT}{}", marker.absent_terms());
        match &self.guard {
            Guard::Absent => absent,
            Guard::Is(_) => GUARD_IS.to_string(),
            Guard::Guess(guesses) => {
                let equal: Vec<String> =
                    (0..guesses.len()).map(|i| format!("#bk = :g{i}")).collect();
                format!("(({absent}) OR {})", equal.join(" OR "))
            }
        }
    }

    /// The new `<prefix>forgot` this write sets, when its removals raise it.
    pub(super) fn sets_forgotten(&self) -> Option<u64> {
        let (before, after) = self.forgotten;
        after.filter(|_| after != before)
    }

    /// Whether the guard allows an item without `#bk` (and so holds the marker's terms).
    pub(super) fn allows_absent(&self) -> bool {
        matches!(self.guard, Guard::Absent | Guard::Guess(_))
    }

    /// How many keys one write of this plan may test within DynamoDB's expression limits.
    pub(super) fn keys_per_write(&self, marker: &PrefixMarker) -> usize {
        let guard_operators = match &self.guard {
            Guard::Guess(guesses) => 1 + 2 * guesses.len(),
            Guard::Absent | Guard::Is(_) => 1,
        };
        keys_per_write(
            self.checked.len(),
            guard_operators + AGE_TERM_OPERATORS,
            self.guard_condition(marker).len() + AGE_TERM_BYTES,
        )
    }

    /// What is known after this write succeeded.
    pub(super) fn known_after(&self) -> Knowledge {
        match self.guard {
            // Which guess held is not known: guess again.
            Guard::Guess(_) => Knowledge::Guess,
            Guard::Absent | Guard::Is(_) => Knowledge::Known(Layout {
                guard: Some(AttributeValue::S(encode(&self.after))),
                buckets: self.after.clone(),
                forgotten: self.forgotten.1,
            }),
        }
    }
}

/// Keys per write when each is tested against `buckets` buckets, under a guard of
/// `guard_operators` operators and `guard_bytes` bytes: each test is a `contains` and an
/// `OR` (2 operators, about [`TERM_BYTES`] bytes).
pub(super) fn keys_per_write(buckets: usize, guard_operators: usize, guard_bytes: usize) -> usize {
    if buckets == 0 {
        return usize::MAX;
    }
    let operators = MAX_EXPRESSION_OPERATORS.saturating_sub(RESERVED_OPERATORS + guard_operators);
    let bytes = MAX_EXPRESSION_BYTES.saturating_sub(RESERVED_BYTES + guard_bytes);
    (operators / (2 * buckets))
        .min(bytes / (TERM_BYTES * buckets))
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(len: u64, buckets: u32) -> Grid {
        Grid {
            len,
            keep: len * u64::from(buckets),
            buckets,
        }
    }

    fn span(start: u64, until: u64) -> Bucket {
        Bucket {
            until,
            name: BucketName::Span { start },
        }
    }

    fn layout(buckets: &[Bucket]) -> Layout {
        let buckets: BTreeSet<Bucket> = buckets.iter().copied().collect();
        Layout {
            guard: Some(AttributeValue::S(encode(&buckets))),
            buckets,
            forgotten: None,
        }
    }

    #[test]
    fn a_guess_covers_the_steady_states_of_the_writers_settings() {
        let plan = Plan::guess(&grid(100, 3), 1_050);
        assert_eq!(plan.target, span(1_000, 1_300));
        assert_eq!(
            plan.guard,
            Guard::Guess(vec![
                "1000_1300".into(),
                "900_1200,1000_1300".into(),
                "800_1100,900_1200,1000_1300".into()
            ])
        );
        assert_eq!(plan.checked.len(), 3);
        assert!(plan.removals.is_empty());
    }

    #[test]
    fn a_rollover_removes_what_expired_and_keeps_other_settings_buckets() {
        // Buckets of another setting (300 s, until start + 600) and of ours (100 s × 2).
        let known = layout(&[span(700, 1_000), span(900, 1_100), span(600, 1_200)]);
        let plan = Plan::known(&known, &grid(100, 2), 1_050);
        assert_eq!(plan.target, span(1_000, 1_200));
        assert_eq!(plan.removals, [span(700, 1_000)]);
        assert_eq!(encode(&plan.after), "900_1100,600_1200,1000_1200");
        assert_eq!(plan.checked.len(), 3);
    }

    #[test]
    fn a_clock_far_ahead_removes_only_what_expired_before_the_newest_other_bucket() {
        let known = layout(&[span(800, 1_000), span(900, 1_100)]);
        // Ten days ahead: only what had expired at 900 (nothing) may go.
        let plan = Plan::known(&known, &grid(100, 2), 865_000);
        assert!(plan.removals.is_empty(), "{plan:?}");
        // Within two buckets of the newest other start, the clock is trusted.
        let plan = Plan::known(&known, &grid(100, 2), 1_050);
        assert_eq!(plan.removals, [span(800, 1_000)]);
    }

    #[test]
    fn keys_per_write_stays_within_the_expression_limits() {
        for buckets in 1..=50 {
            let keys = keys_per_write(buckets, 5, 80);
            let terms = keys * buckets;
            assert!(keys == 1 || 2 * terms + 5 + RESERVED_OPERATORS <= MAX_EXPRESSION_OPERATORS);
            assert!(keys == 1 || terms * TERM_BYTES + 80 + RESERVED_BYTES <= 4096);
        }
        assert_eq!(keys_per_write(2, 5, 80), 71);
    }
}
