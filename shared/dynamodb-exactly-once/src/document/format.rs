//! The document writer's stored format: the prefix of its attributes and its layout marker
//! (what an operator's query or a user's item shows).

/// Default prefix of the protocol's attributes (`doc_version`, `doc_tok`, `doc_tokp`,
/// `doc_toke`).
pub(crate) const DEFAULT_ATTRIBUTE_PREFIX: &str = "doc_";
/// The prefix marker attribute (S): a digest of the attribute prefix the item's document state
/// was written under; absent under the default prefix.
pub(crate) const PREFIX_MARKER_ATTRIBUTE: &str = "_docL";
