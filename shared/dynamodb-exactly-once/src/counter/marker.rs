//! The prefix marker: which attribute prefix an item's counter state was written under, so
//! that changing [`CounterConfig::attribute_prefix`] after data exists is refused
//! (`layout_mismatch`) instead of testing keys against buckets that do not hold them (a
//! redelivered key counted twice).
//!
//! * The default prefix writes no marker (items stay as they were). Another prefix writes
//!   [`PREFIX_MARKER_ATTRIBUTE`] = 6 hex digits of the prefix's SHA-256 with every update
//!   (14 bytes per item, no extra call).
//! * A write to an item without `<prefix>bucket` (a new item, or one written under other
//!   names) is conditioned on the item carrying no marker and, under another prefix, no
//!   default `ctr_bucket` either. A write planned on a known layout needs no more: its guard
//!   pins `<prefix>bucket`, which only a writer of this prefix sets.
//! * When that condition fails, the `ALL_OLD` image tells an item of other names
//!   ([`PrefixMarker::foreign`]) from a lost race.
//!
//! Not detected: an item written under a non-default prefix before the marker existed, then
//! written under the defaults or a third prefix (it has no marker and no `ctr_bucket`).

use aws_sdk_dynamodb::types::AttributeValue;
use sha2::{Digest, Sha256};

pub(crate) use super::format::{DEFAULT_ATTRIBUTE_PREFIX, PREFIX_MARKER_ATTRIBUTE};
use crate::ddb::{Item, Placeholders};
use crate::rejection::{quote, Rejection, RejectionCode};

/// An attribute prefix's marker, and the default bucket attribute it must not find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PrefixMarker {
    /// The attribute prefix this marker stands for.
    prefix: String,
    /// `None` under the default prefix.
    marker: Option<String>,
    /// `ctr_bucket` under another prefix.
    default_bucket: Option<String>,
}

impl PrefixMarker {
    /// The marker of the attribute prefix `prefix`.
    pub(super) fn new(prefix: &str) -> Self {
        if prefix == DEFAULT_ATTRIBUTE_PREFIX {
            return PrefixMarker {
                prefix: prefix.into(),
                marker: None,
                default_bucket: None,
            };
        }
        PrefixMarker {
            prefix: prefix.into(),
            marker: Some(hex::encode(&Sha256::digest(prefix.as_bytes())[..3])),
            default_bucket: Some(format!("{DEFAULT_ATTRIBUTE_PREFIX}bucket")),
        }
    }

    /// The terms added to the guard of a write to an item without `<prefix>bucket`
    /// (placeholders `#lay`, `#dbk`).
    pub(super) fn absent_terms(&self) -> &'static str {
        match self.marker {
            None => " AND attribute_not_exists(#lay)",
            Some(_) => " AND attribute_not_exists(#lay) AND attribute_not_exists(#dbk)",
        }
    }

    /// The `SET` term storing the marker (placeholders `#lay`, `:lay`), if any.
    pub(super) fn set_term(&self) -> Option<&'static str> {
        self.marker.as_ref().map(|_| ", #lay = :lay")
    }

    /// Name the placeholders this write uses: `with_absent` when its guard holds
    /// [`PrefixMarker::absent_terms`].
    pub(super) fn emit(&self, p: &mut Placeholders, with_absent: bool) {
        if with_absent || self.marker.is_some() {
            p.set_name("#lay", PREFIX_MARKER_ATTRIBUTE);
        }
        if let Some(marker) = &self.marker {
            p.set_value(":lay", AttributeValue::S(marker.clone()));
        }
        if let (true, Some(bucket)) = (with_absent, &self.default_bucket) {
            p.set_name("#dbk", bucket.clone());
        }
    }

    /// Why an item (an `ALL_OLD` image) is of another prefix (`layout_mismatch`), or `None`.
    pub(super) fn foreign(&self, item: &Item) -> Option<Rejection> {
        let stored = item
            .get(PREFIX_MARKER_ATTRIBUTE)
            .and_then(|v| v.as_s().ok());
        let ours = item.contains_key(&format!("{}bucket", self.prefix));
        let why = match (stored, &self.marker) {
            (Some(s), Some(m)) if s == m => return None,
            (Some(s), _) => format!("its prefix marker {} differs", quote(s)),
            (None, Some(_))
                if !ours
                    && self
                        .default_bucket
                        .as_ref()
                        .is_some_and(|b| item.contains_key(b)) =>
            {
                format!(
                    "it holds counter state under the default prefix `{DEFAULT_ATTRIBUTE_PREFIX}`"
                )
            }
            _ => return None,
        };
        Some(Rejection::new(
            RejectionCode::LayoutMismatch,
            format!(
                "the item was written under another counter attribute prefix ({why}); this \
                 writer uses `{}`: put the earlier prefix back, or write to new items",
                self.prefix
            ),
        ))
    }

    /// Whether `name` is the marker or the default layout attribute this configuration
    /// checks for (payloads cannot write them).
    pub(super) fn reserves(&self, name: &str) -> bool {
        name == PREFIX_MARKER_ATTRIBUTE || self.default_bucket.as_deref() == Some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(pairs: &[(&str, &str)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), AttributeValue::S(v.to_string())))
            .collect()
    }

    #[test]
    fn the_default_prefix_writes_no_marker_and_refuses_a_marked_item() {
        let m = PrefixMarker::new(DEFAULT_ATTRIBUTE_PREFIX);
        assert_eq!(m.set_term(), None);
        assert!(m.foreign(&item(&[("ctr_bucket", "x")])).is_none());
        let marked = item(&[("_ctrL", "abcdef"), ("c2_bucket", "x")]);
        let why = m.foreign(&marked).expect("foreign");
        assert_eq!(why.code, RejectionCode::LayoutMismatch);
    }

    #[test]
    fn another_prefix_refuses_default_state_and_other_markers() {
        let m = PrefixMarker::new("c2_");
        assert!(m.set_term().is_some());
        assert!(m.foreign(&item(&[("ctr_bucket", "x")])).is_some());
        assert!(m.foreign(&item(&[("_ctrL", "000000")])).is_some());
        let ours = PrefixMarker::new("c2_").marker.clone().unwrap_or_default();
        assert!(m
            .foreign(&item(&[("_ctrL", &ours), ("c2_bucket", "x")]))
            .is_none());
        // An item of this prefix from before the marker: not foreign.
        assert!(m.foreign(&item(&[("c2_bucket", "x")])).is_none());
        assert!(m.reserves("_ctrL") && m.reserves("ctr_bucket") && !m.reserves("n"));
    }
}
