//! Names the counter derives from its settings for the key buckets, and how many keys one
//! write can carry with them (the layout's side of [`CounterConfig`]).

use super::bucket::{Bucket, BucketName};
use super::config::{CounterConfig, MAX_WINDOW_BUCKETS};
use super::layout::{keys_per_write, AGE_TERM_BYTES, AGE_TERM_OPERATORS};

impl CounterConfig {
    /// Keys per `UpdateItem` that keep the condition within DynamoDB's expression limits when
    /// the item holds the W buckets of these settings: each key costs W `contains` terms
    /// joined by `OR` (2 operators and about 24 bytes each), besides the guard of a first
    /// write (which names W possible layouts).
    pub fn max_keys_per_write(&self) -> usize {
        let w = self.window_buckets.clamp(1, MAX_WINDOW_BUCKETS) as usize;
        keys_per_write(
            w,
            1 + 2 * w + AGE_TERM_OPERATORS,
            32 + 14 * w + AGE_TERM_BYTES,
        )
    }

    /// The attribute holding a bucket's keys: `<prefix>keys_<start>_<until>`.
    pub fn keys_attribute(&self, bucket: &Bucket) -> String {
        format!(
            "{}keys_{}_{}",
            self.attribute_prefix,
            bucket.start(),
            bucket.until
        )
    }

    /// The bucket a keys attribute name holds (`None`: another attribute).
    pub(super) fn parse_keys_attribute(&self, name: &str) -> Option<Bucket> {
        let (start, until) = name
            .strip_prefix(&self.attribute_prefix)?
            .strip_prefix("keys_")?
            .split_once('_')?;
        Some(Bucket {
            until: until.parse().ok()?,
            name: BucketName::Span {
                start: start.parse().ok()?,
            },
        })
    }
}
