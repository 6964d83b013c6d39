//! The layout guard: which attribute names an item was written under, so that renaming a
//! protocol attribute after data exists is refused (`layout_mismatch`) instead of letting an
//! older record overwrite a newer one or an old tombstone read as a live item.
//!
//! * The default names write no marker (items stay as they were). Other names write
//!   [`LAYOUT_ATTRIBUTE`] = a 6-hex-digit digest of the four names with every put and
//!   tombstone (9 bytes per item, no extra call).
//! * Every write is conditioned on the stored item being of this layout ([`Layout::guard`]):
//!   its marker equal to ours (or absent for the defaults); under non-default names an item
//!   without a marker is another layout's (written under the defaults), so only an absent
//!   item (none of our timestamp, none of the default names we replaced) is written without
//!   our marker stored. A failed condition is told apart from a stale write by the `ALL_OLD`
//!   image ([`Layout::foreign`]).
//! * Reads check the same ([`Layout::foreign`]), and also refuse a tombstone (tie-break
//!   `"1"`) without our flag.

use crate::ratchet::format::{
    DEFAULT_DELETED_ATTRIBUTE, DEFAULT_TIE_BREAK_ATTRIBUTE, DEFAULT_TS_ATTRIBUTE,
    DEFAULT_TTL_ATTRIBUTE, DELETE_TOKEN,
};
use aws_sdk_dynamodb::types::AttributeValue;
use sha2::{Digest, Sha256};

use super::config::RatchetConfig;
use super::format::LAYOUT_ATTRIBUTE;
use crate::ddb::Item;
use crate::rejection::{quote, Rejection, RejectionCode};

/// This configuration's layout: its marker and the condition every write carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// `None` under the default names.
    marker: Option<String>,
    /// The default names this configuration replaced for the timestamp and the tie-break.
    replaced: Vec<String>,
}

impl Layout {
    pub(crate) fn of(config: &RatchetConfig) -> Layout {
        let names = config.protocol_attributes();
        let defaults = [
            DEFAULT_TS_ATTRIBUTE,
            DEFAULT_DELETED_ATTRIBUTE,
            DEFAULT_TTL_ATTRIBUTE,
            DEFAULT_TIE_BREAK_ATTRIBUTE,
        ];
        let marker = (names != defaults).then(|| {
            let digest = Sha256::digest(names.join("\u{0}").as_bytes());
            hex::encode(&digest[..3])
        });
        let replaced = [
            (&config.ts_attribute, DEFAULT_TS_ATTRIBUTE),
            (&config.tie_break_attribute, DEFAULT_TIE_BREAK_ATTRIBUTE),
        ]
        .into_iter()
        .filter(|(ours, default)| ours.as_str() != *default)
        .map(|(_, default)| default.to_string())
        .collect();
        Layout { marker, replaced }
    }

    /// The marker a write stores, if any.
    pub(crate) fn marker(&self) -> Option<&str> {
        self.marker.as_deref()
    }

    /// The guard's condition and its placeholders (`#lay`, `:lay`, `#ts`, `#old0`, `#old1`):
    /// `attribute_not_exists(#lay)` under the defaults, else
    /// `#lay = :lay OR (attribute_not_exists(#lay) AND attribute_not_exists(#ts) AND
    /// attribute_not_exists(#old0) AND ...)` (the item is ours, or absent).
    pub(crate) fn guard(&self) -> Guard {
        let mut names = vec![("#lay".to_string(), LAYOUT_ATTRIBUTE.to_string())];
        let Some(marker) = &self.marker else {
            return Guard {
                condition: "attribute_not_exists(#lay)".into(),
                names,
                value: None,
            };
        };
        let absent: Vec<String> = ["attribute_not_exists(#lay)", "attribute_not_exists(#ts)"]
            .into_iter()
            .map(String::from)
            .chain((0..self.replaced.len()).map(|i| format!("attribute_not_exists(#old{i})")))
            .collect();
        names.extend(
            self.replaced
                .iter()
                .enumerate()
                .map(|(i, n)| (format!("#old{i}"), n.clone())),
        );
        Guard {
            condition: format!("#lay = :lay OR ({})", absent.join(" AND ")),
            names,
            value: Some(marker.clone()),
        }
    }

    /// Why a stored item is of another layout (`layout_mismatch`), or `None`.
    pub(crate) fn foreign(&self, config: &RatchetConfig, item: &Item) -> Option<Rejection> {
        let stored = item.get(LAYOUT_ATTRIBUTE).and_then(|v| v.as_s().ok());
        let why = match (stored, &self.marker) {
            (Some(s), Some(ours)) if s == ours => return self.foreign_tombstone(config, item),
            (Some(s), _) => format!("its layout marker {} differs", quote(s)),
            (None, Some(_)) => {
                "it carries no layout marker (written under the default protocol attribute names)"
                    .to_string()
            }
            _ => return self.foreign_tombstone(config, item),
        };
        Some(mismatch(&why))
    }

    /// A tombstone (tie-break `"1"`) without our flag was written under another flag name.
    fn foreign_tombstone(&self, config: &RatchetConfig, item: &Item) -> Option<Rejection> {
        let token = item
            .get(&config.tie_break_attribute)
            .and_then(|v| v.as_s().ok());
        let flagged = item.get(&config.deleted_attribute) == Some(&AttributeValue::Bool(true));
        (token.is_some_and(|t| t == DELETE_TOKEN) && !flagged)
            .then(|| mismatch("it is a tombstone without this function's deleted flag"))
    }
}

fn mismatch(why: &str) -> Rejection {
    Rejection::new(
        RejectionCode::LayoutMismatch,
        format!(
            "the stored item was written under other protocol attribute names ({why}): \
             restore RATCHET_TS_ATTRIBUTE, RATCHET_TIE_BREAK_ATTRIBUTE, \
             RATCHET_DELETED_ATTRIBUTE, RATCHET_TTL_ATTRIBUTE to the names the table was written with"
        ),
    )
}

/// A layout condition with its placeholders.
pub(crate) struct Guard {
    pub(crate) condition: String,
    pub(crate) names: Vec<(String, String)>,
    pub(crate) value: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_write_no_marker_and_others_a_short_one() {
        let defaults = RatchetConfig::builder("t").build().expect("valid");
        assert_eq!(Layout::of(&defaults).marker(), None);
        let renamed = RatchetConfig::builder("t")
            .ts_attribute("V")
            .build()
            .expect("valid");
        let marker = Layout::of(&renamed).marker().map(str::len);
        assert_eq!(marker, Some(6));
    }
}
