//! Records the sweeper retires because one of their requests names a key the table refuses
//! (a record of a version before the key-schema check): rolled back final (`invalid_request`)
//! and completed, and first handed to a [`KeepRetired`] (the function keeps them as dead
//! letters of the coordinator), so an operator sees what was never applied.
//!
//! Failure mode: when keeping fails, the transaction counts as a sweep error and is left
//! rolled back but not completed, in the index: the next run keeps it again (a keeper must
//! accept the same record twice) before completing it.

use std::fmt::Debug;

use futures::future::BoxFuture;
use serde_json::{json, Value};

use crate::ddb::error::StoreError;
use crate::rejection::Rejection;

/// One retired TX record.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct Retired {
    /// The transaction's id.
    pub tx_id: String,
    /// Why: `invalid_key`, naming the first refused request (`request <n>: …`).
    pub reason: Rejection,
    /// The recorded requests, as the coordinator accepted them.
    pub requests: Vec<Value>,
}

impl Retired {
    /// A retired record.
    pub fn new(tx_id: String, reason: Rejection, requests: Vec<Value>) -> Self {
        Retired {
            tx_id,
            reason,
            requests,
        }
    }

    /// The transaction as a coordinator's message: `{"txId": …, "requests": […]}` (a replay
    /// through the coordinator refuses it with the same reason).
    pub fn message(&self) -> Value {
        json!({"txId": self.tx_id, "requests": self.requests})
    }
}

/// Keeps the records the sweeper retires (see the module documentation).
pub trait KeepRetired: Send + Sync + Debug {
    /// Keep one retired record durably; safe to call again for the same record.
    fn keep_retired<'a>(&'a self, retired: &'a Retired) -> BoxFuture<'a, Result<(), StoreError>>;
}
