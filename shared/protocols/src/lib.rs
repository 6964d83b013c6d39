//! Correct DynamoDB writes under retries, redelivery and concurrency.
//!
//! # Layout
//!
//! * [`ddb`]: the DynamoDB layer under every protocol.
//! * [`batch`]: the `Protocol` trait, per-record results, deadlines.
//! * [`rejection`]: rejection codes.
//! * [`ratchet`], [`counter`], [`txn`], [`sweep`]: the protocols.
//! * [`config`]: configuration errors.

pub mod batch;
pub mod config;
pub mod counter;
pub mod ddb;
pub mod ratchet;
pub mod rejection;
pub mod sweep;
pub mod txn;

pub use batch::{Applied, Deadline, Outcome, Protocol, RecordResult};
pub use config::ConfigError;
pub use ddb::{ErrorClass, Item, ItemKey, StoreError};
pub use rejection::{Rejection, RejectionCode};
