//! What writing one ratchet record did.

use crate::batch::Outcome;

/// The outcome of one ratchet record.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an outcome such as a conflict or a stale record is not an error: handle it"]
pub enum RatchetOutcome {
    /// Written: it is now the stored version.
    Applied,
    /// The table already holds a newer version.
    Stale,
    /// The table (or the winner of the batch) already holds exactly this version.
    Duplicate,
    /// A newer record for the same key in the same batch was written instead.
    Superseded,
}

impl Outcome for RatchetOutcome {
    fn label(&self) -> &'static str {
        match self {
            RatchetOutcome::Applied => "applied",
            RatchetOutcome::Stale => "stale",
            RatchetOutcome::Duplicate => "duplicate",
            RatchetOutcome::Superseded => "superseded",
        }
    }
}
