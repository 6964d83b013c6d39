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
    /// Of `milli_units`, those of `TransactWriteItems` calls (AWS bills them twice).
    transactional_milli_units: AtomicU64,
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

    /// Count one `TransactWriteItems` and the capacity it consumed: DynamoDB reports (and
    /// DynamoDB Local counts) each action once, AWS bills it twice (prepare and commit), which
    /// [`Self::billed_write_units`] adds.
    pub fn add_transactional(&self, consumed: Option<&ConsumedCapacity>) {
        self.add(consumed);
        let units = consumed.and_then(|c| c.capacity_units).unwrap_or(0.0);
        self.transactional_milli_units
            .fetch_add(milli(units), Ordering::Relaxed);
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
        ] {
            mine.fetch_add(theirs.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// Count a write request without reported capacity (a failed condition, an error).
    pub fn add_failed(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
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

    /// Write units as AWS bills them: [`Self::write_units`] with transactional writes
    /// counted twice (failed conditional writes, which AWS bills by the existing item, are
    /// not counted: DynamoDB Local reports nothing for them).
    pub fn billed_write_units(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let milli = self.transactional_milli_units.load(Ordering::Relaxed) as f64;
        self.write_units() + milli / 1000.0
    }

    /// Consumed write capacity units so far (as reported by DynamoDB; failed conditional
    /// writes report none on DynamoDB Local).
    pub fn write_units(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let milli = self.milli_units.load(Ordering::Relaxed) as f64;
        milli / 1000.0
    }
}
