//! The dead-letter table's stored format: the names of its attributes (what an operator's
//! query shows; `ops dead-letters` reads them).

/// Partition key of the dead-letter table.
pub(crate) const ATTR_ID: &str = "Id";
/// The raw payload (or its first part), as a binary attribute.
pub(crate) const ATTR_PAYLOAD: &str = "Payload";
/// On a continuation item: the id of the dead letter it belongs to.
pub(crate) const ATTR_PART_OF: &str = "PartOf";
/// On a continuation item: its position (1-based) in the payload.
pub(crate) const ATTR_PART: &str = "Part";
/// Attribute naming the function that kept a dead letter.
pub(crate) const ATTR_FUNCTION: &str = "Function";
/// Attribute naming the deployment (Lambda function name) that kept a dead letter.
#[allow(dead_code)] // written by serde (`DeadLetter::deployment`); named here as the format
pub(crate) const ATTR_DEPLOYMENT: &str = "Deployment";
/// Set (epoch s) on a letter whose record a replay applied but could not remove: the next
/// replay removes it without applying it again.
pub(crate) const ATTR_REPLAYED_AT: &str = "ReplayedAt";
/// Set (epoch s) on a letter that `ops dead-letters export` wrote out: a replay leaves it
/// alone unless asked (the exported event may have been invoked already).
pub(crate) const ATTR_EXPORTED_AT: &str = "ExportedAt";
