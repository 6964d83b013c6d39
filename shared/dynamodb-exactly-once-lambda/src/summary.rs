//! The counts of one batch: logged as one INFO line and emitted as EMF metrics.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::source::SourceKind;

/// Counts for the batch summary line.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub struct BatchSummary {
    /// Records in the batch.
    pub records: usize,
    /// Records per result label (`applied`, `stale`, `invalid`, `failed`, …; a processor's
    /// `processed` and `rejected_reported`).
    pub outcomes: BTreeMap<&'static str, usize>,
    /// DynamoDB write calls made by the protocol (dead letters not included).
    pub write_calls: usize,
    /// Records reported in `batchItemFailures`.
    pub reported_failures: usize,
}

impl BatchSummary {
    /// How many records ended with `label`.
    pub fn count(&self, label: &str) -> usize {
        self.outcomes.get(label).copied().unwrap_or(0)
    }

    /// The INFO summary line of one batch.
    pub(crate) fn log(&self, function: &str, kind: SourceKind) {
        tracing::info!(
            function,
            source = ?kind,
            records = self.records,
            applied = self.count("applied"),
            journaled = self.count("journaled"),
            processed = self.count("processed"),
            stale = self.count("stale"),
            duplicate = self.count("duplicate"),
            superseded = self.count("superseded"),
            invalid = self.count("invalid"),
            rejected_reported = self.count("rejected_reported"),
            failed = self.count("failed"),
            deferred = self.count("deferred"),
            held_back = self.count("held_back"),
            write_calls = self.write_calls,
            reported_failures = self.reported_failures,
            outcomes = %serde_json::to_string(&self.outcomes).unwrap_or_default(),
            "batch summary"
        );
    }
}
