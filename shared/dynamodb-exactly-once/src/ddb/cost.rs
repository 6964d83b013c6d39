//! Write requests and consumed write units, counted the same way by every protocol (the
//! batch summary's `write_calls`, the benchmarks' figures).

use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::types::ConsumedCapacity;

/// Write requests and consumed write capacity of one batch, transaction or sweep.
#[derive(Debug, Default)]
pub struct Cost {
    calls: AtomicU64,
    milli_units: AtomicU64,
    index_milli_units: AtomicU64,
    /// Of `milli_units`, those of `TransactWriteItems` calls.
    transactional_milli_units: AtomicU64,
    /// As billed at least: two units per action of those calls, in thousandths.
    transactional_floor_milli_units: AtomicU64,
}

/// Capacity units in thousandths (units are multiples of 0.5: exact).
fn milli(units: f64) -> u64 {
    let milli = (units * 1000.0).round();
    if milli > 0.0 && milli < 1e15 {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        return milli as u64;
    }
    0
}

impl Cost {
    /// Count one write request and the capacity it consumed (`None`: not reported).
    pub fn add(&self, consumed: Option<&ConsumedCapacity>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let units = consumed.and_then(|c| c.capacity_units).unwrap_or(0.0);
        self.milli_units.fetch_add(milli(units), Ordering::Relaxed);
        // Reported with `ReturnConsumedCapacity::Indexes` only (already in the total).
        let indexes = consumed.and_then(|c| c.global_secondary_indexes.as_ref());
        let index_units: f64 = indexes
            .map(|m| m.values().filter_map(|c| c.capacity_units).sum())
            .unwrap_or(0.0);
        self.index_milli_units
            .fetch_add(milli(index_units), Ordering::Relaxed);
    }

    /// Count one `TransactWriteItems` of `actions` actions and the capacity it reported (one
    /// entry per table, summed). AWS bills each action twice (prepare and commit) by its
    /// item's size, at least 1 unit: at least `2 × actions`. (DynamoDB Local's report for a
    /// transaction is not the sum over its items: ten 100-byte puts report 2 units; AWS bills
    /// 20.)
    pub fn add_transactional(&self, consumed: &[ConsumedCapacity], actions: usize) {
        let units: f64 = consumed.iter().filter_map(|c| c.capacity_units).sum();
        self.add(Some(
            &ConsumedCapacity::builder().capacity_units(units).build(),
        ));
        self.transactional_milli_units
            .fetch_add(milli(units), Ordering::Relaxed);
        let floor = u64::try_from(actions)
            .unwrap_or(u64::MAX)
            .saturating_mul(2000);
        let floor = floor.max(milli(units));
        self.transactional_floor_milli_units
            .fetch_add(floor, Ordering::Relaxed);
    }

    /// Add another count (a part of the work counted on its own) to this one.
    pub fn absorb(&self, other: &Cost) {
        for (mine, theirs) in [
            (&self.calls, &other.calls),
            (&self.milli_units, &other.milli_units),
            (&self.index_milli_units, &other.index_milli_units),
            (
                &self.transactional_milli_units,
                &other.transactional_milli_units,
            ),
            (
                &self.transactional_floor_milli_units,
                &other.transactional_floor_milli_units,
            ),
        ] {
            mine.fetch_add(theirs.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// Count a write request without reported capacity (a failed condition, an error).
    pub fn add_failed(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Count a write request whose condition failed, billed as AWS bills it: by the size of
    /// the item it was evaluated on (`ALL_OLD`), at least 1 unit (DynamoDB Local reports
    /// nothing for it).
    pub fn add_failed_condition(&self, old: Option<&super::Item>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let bytes = old.map_or(0, super::item::item_size);
        let units = u64::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u64::MAX);
        self.milli_units
            .fetch_add(units.saturating_mul(1000), Ordering::Relaxed);
    }

    /// Write requests so far.
    pub fn write_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Write requests so far, as a count.
    pub fn write_calls_usize(&self) -> usize {
        usize::try_from(self.write_calls()).unwrap_or(usize::MAX)
    }

    /// Of [`Self::write_units`], the units consumed by global secondary indexes (requests
    /// made with `ReturnConsumedCapacity::Indexes`; the TX table's sweep index).
    pub fn index_write_units(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let milli = self.index_milli_units.load(Ordering::Relaxed) as f64;
        milli / 1000.0
    }

    /// Write units as AWS bills them, for items up to 1 KB: the units reported for plain
    /// writes, and for each transactional call the larger of its report and two units per
    /// action (exact on AWS, whose report is the bill; on DynamoDB Local exact for items up to
    /// 1 KB, a floor for larger ones). Failed conditional writes, which AWS bills by the
    /// existing item, are counted only when recorded by [`Cost::add_failed_condition`]
    /// (DynamoDB Local reports nothing for them).
    pub fn billed_write_units(&self) -> f64 {
        let reported = self.transactional_milli_units.load(Ordering::Relaxed);
        let floor = self.transactional_floor_milli_units.load(Ordering::Relaxed);
        #[allow(clippy::cast_precision_loss)]
        let extra = floor.saturating_sub(reported) as f64;
        self.write_units() + extra / 1000.0
    }

    /// Consumed write capacity units so far (as reported by DynamoDB; failed conditional
    /// writes report none on DynamoDB Local).
    pub fn write_units(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let milli = self.milli_units.load(Ordering::Relaxed) as f64;
        milli / 1000.0
    }
}
