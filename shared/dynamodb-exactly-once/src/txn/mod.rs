#![doc = include_str!("../../docs/txn.md")]

mod builder;
mod config;
mod coordinator;
mod decide;
mod drive;
mod fast;
mod finish;
mod format;
mod item;
mod lock;
mod outcome;
pub mod read;
pub(crate) mod record;
pub(crate) mod request;
mod resolve;
mod settings;
mod status;
pub mod sweep;

pub(crate) use crate::ddb::Cost;
pub use builder::TxConfigBuilder;
pub(crate) use config::check_horizons;
pub use config::{TxConfig, MAX_ISSUED_AHEAD};
pub(crate) use config::{DEFAULT_REDELIVERY_HORIZON, DEFAULT_RETAIN};
pub use coordinator::Coordinator;
#[doc(hidden)]
pub use fast::FAST_MAX_REQUESTS;
pub use format::ITEM_PROTOCOL_ATTRIBUTES;
pub(crate) use item::plain_json;
pub(crate) use outcome::Driven;
pub use outcome::{TxError, TxOutcome, TxReport};
pub use request::{Operation, TxMessage, TxMessageBuilder, TxRequest};
pub use status::{RollbackReason, TxState, TxStatus};

/// Whether a cancellation reason means "nothing applied, send the call again" (after a short
/// wait): another transaction on one of the items (`TransactionConflict`), or one of the
/// items throttled (`ThrottlingError`, `ProvisionedThroughputExceeded`; the SDK does not retry
/// a `TransactionCanceledException`).
pub(crate) fn sent_again(code: &str) -> bool {
    matches!(
        code,
        "TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded"
    )
}
