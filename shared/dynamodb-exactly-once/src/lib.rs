//! Correct DynamoDB writes under everything real delivery does: SDK retries, hedged and
//! duplicated writes, out-of-order arrival, redelivered batches, crashed writers and
//! concurrent writers.
//!
//! This crate holds the protocols and nothing else: no Lambda runtime, no Lambda event types,
//! no YAML. Use it from any Rust program with an `aws_sdk_dynamodb::Client`; the Lambda edge
//! (Kinesis/SQS batches, partial batch responses, dead letters, settings from the
//! environment) is the separate crate `dynamodb-exactly-once-lambda`.
//!
//! Expected results of conditional writes are **outcomes** (`Applied`, `Stale`, `Duplicate`,
//! `Committed`, …), never errors; [`StoreError`] is reserved for infrastructure failures and
//! says whether a retry can help ([`StoreError::is_retryable`]). A record that can never
//! succeed is a [`Rejection`] with a stable [`RejectionCode`].
//!
//! # Timestamp ratchet: the newest version wins, whatever the order
//!
//! ```no_run
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig, RatchetOutcome};
//!
//! let ratchet = Ratchet::new(client, RatchetConfig::builder("Movies").build()?);
//! let late = ratchet.parse_record(br#"{"op":"put","key":{"PK":"u1"},"ts":1,"item":{"v":1}}"#)?;
//! let delete = ratchet.parse_record(br#"{"op":"delete","key":{"PK":"u1"},"ts":2}"#)?;
//! ratchet.write(&delete).await?; // a tombstone with a TTL
//! assert_eq!(ratchet.write(&late).await?, RatchetOutcome::Stale); // cannot revive it
//! # Ok(())
//! # }
//! ```
//!
//! # Idempotent counters: each delta added once per idempotency key
//!
//! ```no_run
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use dynamodb_exactly_once::counter::{Counter, CounterConfig, CounterOutcome};
//!
//! let counter = Counter::new(client, CounterConfig::builder("Counters").build()?);
//! let login = counter.parse_record(
//!     br#"{"key":{"PK":"acct#42"},"add":{"logins":1},"idempotencyKey":"evt-7"}"#,
//! )?;
//! assert_eq!(counter.add(&login).await?, CounterOutcome::Applied);
//! assert_eq!(counter.add(&login).await?, CounterOutcome::Duplicate); // redelivered
//! # Ok(())
//! # }
//! ```
//!
//! # Multi-item transactions: all requests or none, any size
//!
//! ```no_run
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use dynamodb_exactly_once::txn::{Coordinator, TxConfig};
//! use dynamodb_exactly_once::Deadline;
//!
//! let config = TxConfig::builder("TxTable", ["Accounts"]).build()?;
//! let coordinator = Coordinator::new(client, config);
//! let transfer = coordinator.parse_message(br##"{"txId":"transfer-1","requests":[
//!   {"Update":{"TableName":"Accounts","Key":{"PK":"alice"},"UpdateExpression":"SET #b = #b - :a",
//!     "ConditionExpression":"#b >= :a","ExpressionAttributeNames":{"#b":"balance"},
//!     "ExpressionAttributeValues":{":a":30}}},
//!   {"Update":{"TableName":"Accounts","Key":{"PK":"bob"},"UpdateExpression":"SET #b = #b + :a",
//!     "ExpressionAttributeNames":{"#b":"balance"},"ExpressionAttributeValues":{":a":30}}}]}"##)?;
//! let report = coordinator.run(&transfer, Deadline::none()).await?;
//! println!("{:?} in {} write requests", report.outcome, report.write_calls);
//! # Ok(())
//! # }
//! ```
//!
//! A scheduled [`txn::sweep::Sweeper`] finishes or rolls back the transactions whose coordinator
//! went away.
//!
//! # Documents and leases: lists and sets in place, one holder at a time
//!
//! [`document`] removes list elements by value with a write guarded by the version and the
//! element it read (a lost response never removes a second one), adds and removes set elements
//! idempotently without ever storing an empty set, and replaces whole documents over the
//! version read. [`lease`] is a lock whose takeover never compares clocks across machines and
//! whose fencing token lets the ratchet (or any conditional write) refuse a paused holder.
//!
//! ```no_run
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use dynamodb_exactly_once::document::{Document, DocumentConfig, DocumentOutcome};
//! use dynamodb_exactly_once::lease::{AcquireOutcome, Lease, LeaseConfig};
//!
//! let docs = Document::new(client.clone(), DocumentConfig::builder("Documents").build()?);
//! let rm = docs.parse_record(br#"{"op":"list_remove","key":{"PK":"u1"},"path":"friends","value":"bob"}"#)?;
//! assert_eq!(docs.write(&rm).await?, DocumentOutcome::Absent); // no such friend
//!
//! let lease = Lease::new(client, LeaseConfig::builder("Locks").build()?);
//! if let AcquireOutcome::Acquired { token, holding, .. } =
//!     lease.acquire("nightly", "worker-a", Duration::from_secs(30)).await?
//! {
//!     println!("write with ts = {token}: a stale holder's older token is refused");
//!     lease.release(holding).await?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Versioned writes: every version kept, latest and history always agree
//!
//! ```no_run
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use dynamodb_exactly_once::versioning::{Revision, VersionOutcome, Versioning, VersioningConfig};
//! use dynamodb_exactly_once::ItemKey;
//!
//! let docs = Versioning::new(client, VersioningConfig::builder("Docs", "DocsHistory").build()?);
//! let key = ItemKey::from_json(&serde_json::json!({"PK": "doc#1"}))?;
//! docs.apply(&Revision::create(&key, serde_json::json!({"title": "draft"}))?).await?;
//! let late = Revision::update(&key, 0, serde_json::json!({"title": "stale"}))?;
//! assert_eq!(docs.apply(&late).await?, VersionOutcome::Conflict { current: Some(1) });
//! docs.apply(&Revision::restore(&key, 1, 1)).await?; // version 2 = version 1's content
//! # Ok(())
//! # }
//! ```
//!
//! Each change is one `TransactWriteItems` (the latest item conditioned on the expected version,
//! the history row on its version being new), so no crash or lost response can leave the two
//! tables apart or number two versions alike. The ratchet's history mode
//! ([`ratchet::RatchetConfig::history_table`]) keeps every ratchet record the same way.
//!
//! # Batches
//!
//! Every protocol implements [`Protocol`]: parse a record body (or reject it), then apply the
//! valid records of a batch with one write per item (coalescing), concurrently across items,
//! in order within an item, returning one [`RecordResult`] per record. `examples/plain.rs`
//! drives the ratchet and the counter from a plain binary.
//!
//! # Layout
//!
//! * The DynamoDB layer under every protocol (private; its types users name are at the
//!   root): items and keys ([`Item`], [`ItemKey`], [`Number`]), typed reads ([`Read`]), the
//!   clock ([`Clock`]), write costs ([`Cost`]), [`StoreError`] and its [`ErrorClass`].
//! * [`batch`]: the [`Protocol`] trait, per-record results, [`Deadline`].
//! * [`change`]: item changes (DynamoDB stream records) as a protocol input: replicas through
//!   the ratchet, aggregates through the counter.
//! * [`rejection`]: [`Rejection`] and its [`RejectionCode`].
//! * [`ratchet`]: timestamp-ratchet writes (tombstones with TTL, reads that hide them).
//! * [`counter`]: idempotent counters (bounded time-bucketed key window inside the item) and
//!   optimistic versioned writes.
//! * [`txn`]: multi-item transactions (TX records, item locks with saved images, one commit
//!   point, three read-isolation levels) and [`txn::sweep`], the sweeper of stale ones.
//! * [`document`]: list and set updates in place (guarded removal by value, sets never empty)
//!   and version-guarded replaces.
//! * [`lease`]: a fenced lease lock (takeover after an unchanged lease on the contender's own
//!   clock; strictly increasing fencing tokens).
//! * [`versioning`]: versioned items (latest + history table, one transaction per change).
//! * `idempotency` (feature `idempotency`): a function run once per operation and key, its
//!   result replayed to duplicates (Powertools' record formats readable and writable).
//! * [`config`]: configuration errors and configs from named settings.
//! * [`prelude`]: the handles, configs, outcomes and errors most programs need.

#![warn(unreachable_pub)]
#![warn(unnameable_types)]
#![warn(missing_docs)]

pub mod batch;
pub mod change;
pub mod config;
pub mod counter;
mod ddb;
pub mod document;
#[cfg(test)]
mod handles_test;
#[cfg(feature = "idempotency")]
pub mod idempotency;
pub mod lease;
pub mod prelude;
pub mod ratchet;
pub mod rejection;
mod text;
pub mod txn;
pub mod versioning;

pub use batch::{Applied, Deadline, Outcome, Protocol, RecordFailure, RecordResult};
pub use change::{ChangeKind, ItemChange};
pub use config::ConfigError;
pub use ddb::{
    Clock, Cost, ErrorClass, Item, ItemKey, KeyError, KeyValue, Number, NumberError, Read,
    StoreError,
};
pub use rejection::{Rejection, RejectionCode};

/// Helpers shared by this project's other crates (the Lambda edge, the operator CLI, the test
/// and bench tools): not part of the public API, no stability promise (serde's pattern).
#[doc(hidden)]
pub mod __private {
    pub use crate::batch::{ANSWER_MARGIN, PART_MARGIN};
    pub use crate::counter::hash_key;
    pub use crate::counter::journal::statement_items;
    #[cfg(feature = "journal")]
    pub use crate::counter::journal::WINDOW_STATE_ENTRY;
    pub use crate::ddb::clock::{epoch_millis, epoch_seconds};
    pub use crate::ddb::error::bounded;
    pub use crate::ddb::item::{
        canonical_item, canonical_json, check_attribute_names, item_size, item_to_json,
        json_to_item, to_attribute_value, to_json_value, MAX_ATTRIBUTE_NAME_BYTES, MAX_ITEM_BYTES,
        MAX_KEY_NAME_BYTES, MAX_KEY_VALUE_BYTES,
    };
    pub use crate::ddb::number::check_json_numbers;
    pub use crate::ddb::retry::Backoff;
    pub use crate::ddb::schema::{key_schema, KeySchema};
    pub use crate::text::{quote, QUOTE_CHARS};
    pub use crate::txn::FAST_MAX_REQUESTS;
}

/// The crate README's snippet, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoc;
