//! Item changes: what a change feed (DynamoDB Streams, Kinesis Data Streams for DynamoDB, a
//! KCL consumer) says happened to one item, as a protocol input next to record bodies.
//!
//! A protocol that can take them implements [`crate::Protocol::parse_change`] under a mapping
//! chosen by its settings: the ratchet replicates ([`crate::ratchet`], ordered by the change's
//! sequence number), the counter aggregates ([`crate::counter`], once per event id). The
//! default refuses every change with `no_change_mapping`, so a change is never applied by a
//! protocol that was not told how.
//!
//! Images are kept as attribute values (no JSON round trip): sets, binaries and 38-digit
//! numbers reach the table as the source stored them.

use crate::ddb::Item;
use crate::rejection::{Rejection, RejectionCode};

/// What happened to the item.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Created (`INSERT`).
    Insert,
    /// Updated (`MODIFY`).
    Modify,
    /// Deleted (`REMOVE`), by a request or by TTL.
    Remove,
}

impl ChangeKind {
    /// From a stream record's `eventName`.
    pub fn from_event_name(name: &str) -> Option<ChangeKind> {
        match name {
            "INSERT" => Some(ChangeKind::Insert),
            "MODIFY" => Some(ChangeKind::Modify),
            "REMOVE" => Some(ChangeKind::Remove),
            _ => None,
        }
    }
}

/// One change of one item (built with [`ItemChange::new`] and [`ItemChange::with_images`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ItemChange {
    /// Unique per change (a stream record's `eventID`): the idempotency key of aggregates.
    pub event_id: String,
    /// Insert, modify or remove.
    pub kind: ChangeKind,
    /// The item's key attributes.
    pub keys: Item,
    /// The item after the change (absent for a remove, or when the stream does not carry it).
    pub new_image: Option<Item>,
    /// The item before the change (absent for an insert, or when the stream does not carry it).
    pub old_image: Option<Item>,
    /// Decimal digits, increasing with the changes of one item (a stream record's
    /// `SequenceNumber`): the order of replicas.
    pub sequence_number: String,
}

impl ItemChange {
    /// A change without images (add them with [`ItemChange::with_images`]).
    pub fn new(
        event_id: impl Into<String>,
        kind: ChangeKind,
        keys: Item,
        sequence_number: impl Into<String>,
    ) -> Self {
        ItemChange {
            event_id: event_id.into(),
            kind,
            keys,
            new_image: None,
            old_image: None,
            sequence_number: sequence_number.into(),
        }
    }

    /// This change with its images after and before.
    pub fn with_images(mut self, new_image: Option<Item>, old_image: Option<Item>) -> Self {
        self.new_image = new_image;
        self.old_image = old_image;
        self
    }

    /// The new image, or `invalid_change` naming what the stream must carry.
    pub fn require_new_image(&self) -> Result<&Item, Rejection> {
        self.new_image.as_ref().ok_or_else(|| {
            Rejection::new(
                RejectionCode::InvalidChange,
                "the change has no NewImage: the stream view type must be NEW_IMAGE or NEW_AND_OLD_IMAGES",
            )
        })
    }

    /// The old image, or `invalid_change` naming what the stream must carry.
    pub fn require_old_image(&self) -> Result<&Item, Rejection> {
        self.old_image.as_ref().ok_or_else(|| {
            Rejection::new(
                RejectionCode::InvalidChange,
                "the change has no OldImage: the stream view type must be NEW_AND_OLD_IMAGES",
            )
        })
    }
}

/// The rejection of a protocol (or a configuration) that takes no item changes.
pub fn no_change_mapping(setting: &str) -> Rejection {
    Rejection::new(
        RejectionCode::NoChangeMapping,
        format!("this function has no mapping for item changes (DynamoDB stream records): set {setting}"),
    )
}
