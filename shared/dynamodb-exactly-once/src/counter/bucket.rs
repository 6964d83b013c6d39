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
        format!("{}_{}", self.start(), self.until)
    }

    /// The first epoch second of the bucket's span.
    pub(super) fn start(&self) -> u64 {
        let BucketName::Span { start } = self.name;
        start
    }
}

/// The canonical layout string of a set of buckets (the guard value).
pub(super) fn encode(buckets: &BTreeSet<Bucket>) -> String {
    let entries: Vec<String> = buckets.iter().map(Bucket::entry).collect();
    entries.join(",")
}
