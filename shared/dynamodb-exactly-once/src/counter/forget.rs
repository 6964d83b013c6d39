//! What an item forgot: `<prefix>forgot`, the time before which a record's key may have left
//! the item with a removed bucket, derived from the removed buckets themselves (their spans),
//! never from the reader's window setting.
//!
//! A key is written into the bucket of the writer's clock, so it arrived before the end of that
//! bucket's span (`start + len`). Removing the bucket forgets keys that arrived before its span
//! end; a record that arrived before it could be one of them, so it is refused (`too_old`)
//! unless its key is still present. Raising the window therefore never widens what the item
//! accepts before its buckets are kept that long.
//!
//! ```text
//!  bucket  [start ─ len ─┤ end ───────── window ──────────┤ until]   removed at until
//!  keys arrived before `end` may be gone:  <prefix>forgot = max(its value, end)
//! ```
//!
//! A bucket's name holds `start` and `until = start + W × len`, not `len`: the span is the
//! smallest of `(until - start) / 2` (W ≥ 2), the distance to the next start of a bucket with
//! the same `until - start` (one grid's buckets are `len` apart), and the reader's own `len`
//! when the retention is its own. This is exact for the reader's own buckets, for W = 2 and for
//! consecutive buckets of any W, and never too small unless two settings with equal `W × len`
//! but different `len` wrote the item (then one old window of records is guarded by the
//! setting alone). Too large (a lone bucket of other settings with W > 2) only refuses records
//! older than half its retention that arrive right after it was removed.

use std::collections::BTreeSet;

use super::bucket::{Bucket, BucketName};

/// The time before which the keys of `removed` arrived (epoch s), read from the item's other
/// buckets `layout`; `len` and `keep` are the reader's bucket length and retention (`W × len`).
pub(super) fn span_end(removed: &Bucket, layout: &BTreeSet<Bucket>, len: u64, keep: u64) -> u64 {
    let start = removed.start();
    let retention = removed.until.saturating_sub(start);
    let neighbour = layout
        .iter()
        .filter_map(|b| match b.name {
            BucketName::Span { start: other }
                if other > start && b.until.saturating_sub(other) == retention =>
            {
                Some(other - start)
            }
            _ => None,
        })
        .min();
    let own = if retention == keep { len } else { u64::MAX };
    let span = neighbour
        .unwrap_or(u64::MAX)
        .min(retention / 2)
        .min(own)
        .max(1);
    start.saturating_add(span).min(removed.until)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: u64, until: u64) -> Bucket {
        Bucket {
            until,
            name: BucketName::Span { start },
        }
    }

    #[test]
    fn the_span_end_is_exact_for_two_buckets_and_for_consecutive_ones() {
        // W = 2, 3 s buckets: kept 6 s.
        let b = span(99, 105);
        assert_eq!(span_end(&b, &BTreeSet::from([b]), 20, 60), 102);
        // W = 4, 100 s buckets (kept 400 s), the next one in the layout.
        let b = span(1_000, 1_400);
        let layout = BTreeSet::from([b, span(1_100, 1_500), span(1_200, 1_600)]);
        assert_eq!(span_end(&b, &layout, 20, 60), 1_100);
        // Alone: the reader's own length when the retention is its own ...
        assert_eq!(span_end(&b, &BTreeSet::from([b]), 100, 400), 1_100);
        // ... else never shorter than it can be (half its retention).
        assert_eq!(span_end(&b, &BTreeSet::from([b]), 20, 60), 1_200);
    }

    #[test]
    fn a_removal_records_the_span_end_of_what_it_forgot_and_never_lowers_it() {
        use crate::counter::bucket::encode;
        use crate::counter::layout::{Grid, Knowledge, Layout, Plan};
        use crate::counter::CounterConfig;
        use aws_sdk_dynamodb::types::AttributeValue;
        let config = CounterConfig::builder("counters")
            .window(std::time::Duration::from_secs(100)) // W = 2 buckets of 100 s
            .build()
            .expect("valid");
        let grid = Grid::of(&config);
        let buckets = BTreeSet::from([span(800, 1_000), span(900, 1_100)]);
        let mut known = Layout {
            guard: Some(AttributeValue::S(encode(&buckets))),
            buckets,
            forgotten: Some(750),
        };
        // The bucket of 800 (kept until 1 000) goes at 1 050: its span ended at 900.
        let plan = Plan::new(&Knowledge::Known(known.clone()), &grid, 1_050);
        assert_eq!(plan.forgotten, (Some(750), Some(900)));
        assert_eq!(plan.sets_forgotten(), Some(900));
        let Knowledge::Known(after) = plan.known_after() else {
            panic!("a known plan stays known");
        };
        assert_eq!(after.forgotten, Some(900));
        // Nothing removed, or an earlier span end: nothing set.
        assert_eq!(
            Plan::new(&Knowledge::Known(after), &grid, 1_090).sets_forgotten(),
            None
        );
        known.forgotten = Some(2_000);
        assert_eq!(
            Plan::new(&Knowledge::Known(known), &grid, 1_050).sets_forgotten(),
            None
        );
        assert_eq!(
            Plan::new(&Knowledge::Guess, &grid, 1_050).sets_forgotten(),
            None
        );
    }

    #[test]
    fn buckets_of_another_retention_say_nothing_of_its_span() {
        let b = span(1_000, 1_400);
        let layout = BTreeSet::from([b, span(1_010, 1_020)]);
        assert_eq!(span_end(&b, &layout, 20, 60), 1_200);
    }
}
