//! The names most programs need, in one import:
//!
//! ```
//! use dynamodb_exactly_once::prelude::*;
//! ```
//!
//! Each protocol's handle, its config and its outcome; the batch trait with its [`Deadline`];
//! item keys and reads; and the three error types ([`ConfigError`] when a config is built,
//! [`StoreError`] for infrastructure, [`Rejection`] for a record that can never succeed).
//! Anything else is imported from its module.

pub use crate::batch::{Deadline, Outcome, Protocol, RecordResult};
pub use crate::config::ConfigError;
pub use crate::counter::{Counter, CounterConfig, CounterOutcome};
pub use crate::document::{Document, DocumentConfig, DocumentOutcome};
pub use crate::lease::{AcquireOutcome, Lease, LeaseConfig};
pub use crate::ratchet::{Ratchet, RatchetConfig, RatchetOutcome};
pub use crate::rejection::{Rejection, RejectionCode};
pub use crate::txn::sweep::{SweepConfig, Sweeper};
pub use crate::txn::{Coordinator, TxConfig, TxOutcome};
pub use crate::versioning::{Revision, VersionOutcome, Versioning, VersioningConfig};
#[doc(no_inline)]
pub use crate::{ItemKey, Read, StoreError};
