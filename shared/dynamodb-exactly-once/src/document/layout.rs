//! The prefix marker: which attribute prefix an item's document state (version, op tokens) was
//! written under, so that changing [`DocumentConfig::attribute_prefix`] after data exists is
//! refused (`layout_mismatch`) instead of reading the version as 0 and finding no op token
//! (a redelivered append applied again).
//!
//! * The default prefix writes no marker (items stay as they were). Another prefix writes
//!   [`PREFIX_MARKER_ATTRIBUTE`] = 6 hex digits of the prefix's SHA-256 with every write
//!   (15 bytes per item, no extra call).
//! * Every write is conditioned on the marker: under the default prefix, that the item has
//!   none; under another prefix, that it holds this prefix's, or that it has none and no
//!   default-prefix version `doc_version` either (an item the default prefix wrote: every
//!   write sets the version).
//! * When that condition fails, the `ALL_OLD` image tells an item of other names
//!   ([`PrefixMarker::foreign`]) from a lost race or a held token.
//!
//! Not detected: an item written under a non-default prefix before the marker existed, then
//! written under the defaults or a third prefix (it has no marker and no `doc_version`).

use crate::document::format::DEFAULT_ATTRIBUTE_PREFIX;
use aws_sdk_dynamodb::types::AttributeValue;
use sha2::{Digest, Sha256};

use super::config::DocumentConfig;
pub(crate) use super::format::PREFIX_MARKER_ATTRIBUTE;
use crate::ddb::{Item, Placeholders};

/// A configuration's marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PrefixMarker {
    /// `None` under the default prefix.
    marker: Option<String>,
}

impl PrefixMarker {
    pub(super) fn of(config: &DocumentConfig) -> Self {
        let prefix = config.attribute_prefix.as_str();
        let marker = (prefix != DEFAULT_ATTRIBUTE_PREFIX)
            .then(|| hex::encode(&Sha256::digest(prefix.as_bytes())[..3]));
        PrefixMarker { marker }
    }

    /// The condition every write carries (placeholders `#docL`, `:docL`, `#dver`).
    pub(super) fn condition(&self, p: &mut Placeholders) -> &'static str {
        p.set_name("#docL", PREFIX_MARKER_ATTRIBUTE);
        match &self.marker {
            None => "attribute_not_exists(#docL)",
            Some(marker) => {
                p.set_value(":docL", AttributeValue::S(marker.clone()));
                p.set_name("#dver", format!("{DEFAULT_ATTRIBUTE_PREFIX}version"));
                "(#docL = :docL OR (attribute_not_exists(#docL) AND attribute_not_exists(#dver)))"
            }
        }
    }

    /// The `SET` term storing the marker (placeholders `#docL`, `:docL`), if any.
    pub(super) fn set_term(&self, p: &mut Placeholders) -> Option<&'static str> {
        let marker = self.marker.as_ref()?;
        p.set_name("#docL", PREFIX_MARKER_ATTRIBUTE);
        p.set_value(":docL", AttributeValue::S(marker.clone()));
        Some("#docL = :docL")
    }

    /// The marker as an attribute of a whole new item (a replace), if any.
    pub(super) fn attribute(&self) -> Option<(String, AttributeValue)> {
        let marker = self.marker.as_ref()?;
        Some((
            PREFIX_MARKER_ATTRIBUTE.to_string(),
            AttributeValue::S(marker.clone()),
        ))
    }

    /// Why an item (an `ALL_OLD` image) is of another prefix, or `None`.
    pub(super) fn foreign(&self, item: &Item) -> Option<String> {
        let stored = item
            .get(PREFIX_MARKER_ATTRIBUTE)
            .and_then(|v| v.as_s().ok());
        let default_version = format!("{DEFAULT_ATTRIBUTE_PREFIX}version");
        match (stored, &self.marker) {
            (Some(s), Some(m)) if s == m => None,
            (Some(s), _) => Some(format!("its prefix marker `{s}` differs")),
            (None, Some(_)) if item.contains_key(&default_version) => Some(format!(
                "it holds document state under the default prefix `{DEFAULT_ATTRIBUTE_PREFIX}`"
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_prefix_has_no_marker_and_refuses_a_marked_item() {
        let default = PrefixMarker::of(&DocumentConfig::builder("t").build().expect("valid"));
        let config = DocumentConfig::builder("t")
            .attribute_prefix("d_")
            .build()
            .expect("valid");
        let renamed = PrefixMarker::of(&config);
        assert_eq!(default.attribute(), None);
        let marked: Item = renamed.attribute().into_iter().collect();
        assert!(default.foreign(&marked).is_some());
        assert!(renamed.foreign(&marked).is_none());
        let old: Item = [("doc_version".to_string(), AttributeValue::N("1".into()))].into();
        assert!(renamed.foreign(&old).is_some());
        assert!(default.foreign(&old).is_none());
    }
}
