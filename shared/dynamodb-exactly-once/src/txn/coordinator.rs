//! [`Coordinator`]: the transaction protocol's handle (its client, settings and TX table).
//! What it does lives beside it, one step a module: [`drive`](super::drive) runs a message to
//! its outcome through `resolve`, `lock`, `fast` and `finish`; `read` and `sweep` read and
//! drive others' transactions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;

use super::record::TxTable;
use super::request::{self, TxMessage};
use super::TxConfig;
use crate::rejection::Rejection;

/// The coordinator: runs transactions and drives others' to completion.
#[doc(alias = "transaction")]
#[doc(alias = "TransactWriteItems")]
#[derive(Debug, Clone)]
pub struct Coordinator {
    pub(super) client: Client,
    pub(super) config: TxConfig,
    pub(super) tx: TxTable,
    /// Key schemas (names and types, hash first) by table.
    pub(super) key_schemas: Arc<Mutex<HashMap<String, Arc<crate::ddb::schema::KeySchema>>>>,
}

impl Coordinator {
    /// A coordinator with the given settings (a built config is valid: its builder checked it).
    /// The sweeper's coordinator has a crate-made config with an empty allow-list: it drives
    /// existing transactions only.
    pub fn new(client: Client, config: TxConfig) -> Self {
        // Finalize, undo, header transitions and heartbeats are plain writes: one that meets
        // another transaction's TransactWriteItems is refused unapplied and sent again by
        // `again_on_conflict` (within the run's deadline), not by the SDK, whose standard
        // waits (up to 1 s, then 2 s) suit throttling, not conflicts.
        let tx = TxTable::new(client.clone(), config.table.clone());
        Coordinator {
            client,
            config,
            tx,
            key_schemas: Arc::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &TxConfig {
        &self.config
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Parse and validate a message body against the allow-list.
    pub fn parse_message(&self, body: &[u8]) -> Result<TxMessage, Rejection> {
        request::parse_message(body, &self.config.allowed_tables)
    }
}
