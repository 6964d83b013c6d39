//! A key bucket: which attribute holds it, until when its keys are kept, and its entry in the
//! item's layout string (`<prefix>bucket`, the write guard).

use std::collections::BTreeSet;

/// Which bucket attribute.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BucketName {
    /// `<prefix>keys_<start>_<until>`: the keys applied from `start` (epoch s).
    Span {
        /// First epoch second of the bucket.
        start: u64,
    },
    /// `<prefix>keys_<n>`: bucket number `n` of the earlier layout.
    Legacy {
        /// The bucket number.
        number: u64,
    },
}

/// One key bucket of an item.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bucket {
    /// Its keys are kept until this epoch second.
    pub until: u64,
    /// Its attribute.
    pub name: BucketName,
}

impl Bucket {
    /// The entry of this bucket in a layout string.
    pub(super) fn entry(&self) -> String {
        match self.name {
            BucketName::Span { start } => format!("{start}_{}", self.until),
            BucketName::Legacy { number } => format!("L{number}_{}", self.until),
        }
    }

    /// The start of a span bucket.
    pub(super) fn start(&self) -> Option<u64> {
        match self.name {
            BucketName::Span { start } => Some(start),
            BucketName::Legacy { .. } => None,
        }
    }
}

/// The canonical layout string of a set of buckets (the guard value).
pub(super) fn encode(buckets: &BTreeSet<Bucket>) -> String {
    let entries: Vec<String> = buckets.iter().map(Bucket::entry).collect();
    entries.join(",")
}
