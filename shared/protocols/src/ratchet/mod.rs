//! Timestamp ratchet writes: the table converges to the newest state whatever the delivery did.
//!
//! # Invariant
//!
//! For every item key, the stored item is the record with the greatest *version* among all
//! records ever delivered for that key, where a record's version is the pair
//! `(timestamp, tie-break token)`. The final table is therefore a function of the **set** of
//! delivered records: independent of order, duplication and batch boundaries.
//!
//! * The timestamp is the record's own client-side integer token (epoch ms, any monotonic
//!   counter, or an upstream sequence number of up to 64 digits: see [`Ts`] for how values
//!   above `u64` are stored and compared, and for compatibility with stored numbers); a retry
//!   or hedged write carries the first attempt's value.
//! * The tie-break token decides between two different records with the same key and the same
//!   timestamp: a delete (`"1"`) beats any put, and between puts the greater SHA-256 of the
//!   canonical stored item wins (`"0" + hex`). Tokens are compared as strings, identically in
//!   Rust (coalescing) and in DynamoDB (the condition).
//!
//! # Writes
//!
//! Every write is one conditional `PutItem` with [`CONDITION_NEWER`]:
//!
//! ```text
//! attribute_not_exists(ts) OR ts < :ts OR (ts = :ts AND (attribute_not_exists(tb) OR tb < :tb))
//! ```
//!
//! which is the pattern's `attribute_not_exists(ts) OR :ts >= ts`, made strict on exact equality
//! so that a redelivered record is recognised as a `Duplicate` rather than rewritten. A
//! timestamp above `u64` is a fixed-width digit string and its condition is
//! [`CONDITION_NEWER_BIG`] (a stored number is older; see [`Ts`]). A put
//! replaces the whole item. A delete writes a **tombstone**: the key, the timestamp, the token,
//! `Deleted = true` and a TTL (epoch seconds, default now + 7 days), nothing else; a newer put
//! replaces it, an older put cannot revive the item. A lost race is an outcome (`Stale`, or
//! `Duplicate` when the stored version is exactly ours, learned from
//! `ReturnValuesOnConditionCheckFailure=ALL_OLD` without a read), never an error.
//!
//! # Coalescing
//!
//! Within a batch, records are grouped by item key; only the group's winner is written (one
//! write per distinct key), other records are `Superseded` (or `Duplicate` when identical to the
//! winner). Groups are written concurrently (bounded by `concurrency`); one key is only ever
//! written by one task, so records of a key never race each other inside an invocation.
//!
//! # Reads
//!
//! [`Ratchet::get`], [`Ratchet::batch_get`] and [`Ratchet::query_partition`] never return
//! tombstones (Get/BatchGet filter in code, Query with a `FilterExpression`).
//!
//! # History mode
//!
//! With a history table ([`RatchetConfig::history_table`], `RATCHET_HISTORY_TABLE`), every
//! record also lands in it at its own row: records that lose to a newer timestamp, duplicates
//! and deletes (as `Op = delete` rows) included. The row's partition key
//! ([`HISTORY_KEY_ATTRIBUTE`]) is the item's canonical key and its sort key
//! ([`HISTORY_SORT_ATTRIBUTE`]) is [`history_sort_key`]`(ts, tie-break)`: `ts` zero-padded to
//! 20 digits, `#`, the tie-break token, e.g. `00000001721770090000#0a3f…`. Equal `ts` with
//! different content never collide (their tokens differ), identical records share their row,
//! and the rows sort in version order. A row holds nothing but the record (no processing time),
//! so the history is the same set of rows whatever the order, duplication or batching.
//!
//! Per batch: first every distinct row with `BatchWriteItem` (25 rows per call, chunks
//! concurrently, unprocessed rows written again with `ddb::retry::Backoff`), then the coalesced
//! latest writes (still one per key), among the records whose row is written. A record is
//! acknowledged only when its history row and its key's latest write are both done; a record
//! whose row could not be written is reported for redelivery and takes no part in coalescing,
//! so the latest table never holds a version its history lacks.
//!
//! Cost: one extra write unit per row up to 1 KB, in `⌈distinct records / 25⌉` calls. A record
//! whose latest write DynamoDB refuses as invalid (a key that does not match the latest table's
//! schema) is dead-lettered, but its history row, written first, stays.
//!
//! # Layout
//!
//! * `config`: settings and attribute names.
//! * `history`: history rows, their sort key and the batched history writes.
//! * `record`: parsing and validating a record body; a record's version.
//! * `ts`: timestamps of any size and their stored form.
//! * `change`: records from item changes (DynamoDB Streams): replication.
//! * `write`: the conditional write and per-batch coalescing (the `Protocol` impl).
//! * `read`: reads that hide tombstones.
//!
//! # Failure modes
//!
//! * Transient DynamoDB errors: every record of the key's group is reported as failed (also the
//!   superseded ones, so nothing is acknowledged whose winner was not written).
//! * DynamoDB rejects the winner as invalid (`ValidationException`, e.g. a key that does not
//!   match the table schema): the winner is dead-lettered and the next candidate of the group
//!   is tried, so one bad record cannot hide valid ones.
//! * The deadline is close: groups not yet started are `Deferred` and reported as failed.
//! * The tombstone TTL is the only attribute that depends on processing time (when the delete
//!   was first applied), not on the records.

mod change;
mod config;
mod history;
mod read;
mod record;
mod ts;
mod write;

use aws_sdk_dynamodb::Client;

use crate::config::ConfigError;
use crate::ddb::Item;
use crate::rejection::Rejection;

pub use config::{
    RatchetConfig, Replication, DEFAULT_CONCURRENCY, DEFAULT_DELETED_ATTRIBUTE,
    DEFAULT_SKIP_ATTRIBUTES, DEFAULT_TIE_BREAK_ATTRIBUTE, DEFAULT_TOMBSTONE_TTL,
    DEFAULT_TS_ATTRIBUTE, DEFAULT_TTL_ATTRIBUTE,
};
pub use history::{
    history_sort_key, HISTORY_ITEM_ATTRIBUTE, HISTORY_KEY_ATTRIBUTE, HISTORY_OP_ATTRIBUTE,
    HISTORY_SORT_ATTRIBUTE, HISTORY_TIE_BREAK_ATTRIBUTE, HISTORY_TS_ATTRIBUTE,
};
use record::RawRecord;
pub use record::{RatchetOp, RatchetRecord};
pub use ts::{Ts, TsError, BIG_TS_DIGITS};
pub use write::RatchetOutcome;

/// The write condition of a number timestamp (placeholders: `#ts`, `#tb`, `:ts`, `:tb`).
pub const CONDITION_NEWER: &str =
    "attribute_not_exists(#ts) OR #ts < :ts OR (#ts = :ts AND (attribute_not_exists(#tb) OR #tb < :tb))";
/// The write condition of a string timestamp (above `u64`, see [`Ts`]): as
/// [`CONDITION_NEWER`], and a stored number is always older (placeholder `:numeric` = `"N"`).
pub const CONDITION_NEWER_BIG: &str =
    "attribute_not_exists(#ts) OR attribute_type(#ts, :numeric) OR #ts < :ts OR (#ts = :ts AND (attribute_not_exists(#tb) OR #tb < :tb))";
/// The query filter that hides tombstones (placeholders: `#del`, `:true`).
pub const FILTER_LIVE: &str = "attribute_not_exists(#del) OR #del <> :true";
/// Key condition of [`Ratchet::query_partition`].
const KEY_CONDITION_PARTITION: &str = "#pk = :pk";

/// The ratchet protocol on one table.
///
/// ```no_run
/// # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig, RatchetOutcome};
///
/// let ratchet = Ratchet::try_new(client, RatchetConfig::new("Movies"))?;
/// let newer = ratchet.parse_record(br#"{"op":"put","key":{"PK":"u1"},"ts":2,"item":{"v":2}}"#)?;
/// let older = ratchet.parse_record(br#"{"op":"put","key":{"PK":"u1"},"ts":1,"item":{"v":1}}"#)?;
/// assert_eq!(ratchet.write(&newer).await?, RatchetOutcome::Applied);
/// assert_eq!(ratchet.write(&older).await?, RatchetOutcome::Stale); // whatever the order
/// assert_eq!(ratchet.write(&newer).await?, RatchetOutcome::Duplicate); // a redelivery
/// # Ok(())
/// # }
/// ```
#[doc(alias = "last-writer-wins")]
#[doc(alias = "lww")]
#[doc(alias = "idempotent")]
#[derive(Debug, Clone)]
pub struct Ratchet {
    client: Client,
    config: RatchetConfig,
}

impl Ratchet {
    /// The protocol on `config.table`, once `config` is valid ([`RatchetConfig::validate`]).
    pub fn try_new(client: Client, config: RatchetConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Ratchet { client, config })
    }

    /// The settings.
    pub fn config(&self) -> &RatchetConfig {
        &self.config
    }

    /// Parse a record body:
    /// `{"op":"put","key":{…},"ts":1721770090000,"item":{…}}` or
    /// `{"op":"delete","key":{…},"ts":1721757900000}`.
    pub fn parse_record(&self, body: &[u8]) -> Result<RatchetRecord, Rejection> {
        record::validate(RawRecord::decode(body)?, &self.config)
    }

    /// The `(timestamp, tie-break)` version of a stored item.
    fn stored_version(&self, item: &Item) -> Option<(Ts, String)> {
        let ts = Ts::from_attribute(item.get(&self.config.ts_attribute)?)?;
        let tb = item.get(&self.config.tie_break_attribute)?.as_s().ok()?;
        Some((ts, tb.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ratchet() -> Ratchet {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        Ratchet::try_new(Client::from_conf(conf), RatchetConfig::new("t"))
            .expect("valid configuration")
    }

    fn code(body: &str) -> String {
        match ratchet().parse_record(body.as_bytes()) {
            Ok(_) => "ok".into(),
            Err(r) => r.code.to_string(),
        }
    }

    #[test]
    fn each_malformed_kind_has_its_code() {
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":1,"item":{"x":1}}"#),
            "ok"
        );
        assert_eq!(code("{not json"), "bad_json");
        assert_eq!(code("[1]"), "not_an_object");
        assert_eq!(
            code(r#"{"op":"upsert","key":{"PK":"a"},"ts":1}"#),
            "unknown_op"
        );
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"item":{}}"#),
            "missing_timestamp"
        );
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":1.5,"item":{}}"#),
            "invalid_timestamp"
        );
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":"1x","item":{}}"#),
            "invalid_timestamp"
        );
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":true,"item":{}}"#),
            "invalid_timestamp"
        );
        // Digits of any size up to 64 are a timestamp; "1" and 1 are the same one.
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":"1","item":{}}"#),
            "ok"
        );
        let big = format!(
            r#"{{"op":"delete","key":{{"PK":"a"}},"ts":"{}"}}"#,
            "9".repeat(56)
        );
        assert_eq!(code(&big), "ok");
        let huge = format!(
            r#"{{"op":"delete","key":{{"PK":"a"}},"ts":"{}"}}"#,
            "9".repeat(65)
        );
        assert_eq!(code(&huge), "invalid_timestamp");
        assert_eq!(code(r#"{"op":"put","ts":1,"item":{}}"#), "invalid_key");
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":1}"#),
            "invalid_item"
        );
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":1,"item":{"Timestamp":5}}"#),
            "reserved_attribute"
        );
        assert_eq!(
            code(r#"{"op":"put","key":{"PK":"a"},"ts":1,"item":{"PK":"b"}}"#),
            "key_mismatch"
        );
        let big = format!(
            r#"{{"op":"put","key":{{"PK":"a"}},"ts":1,"item":{{"x":"{}"}}}}"#,
            "y".repeat(410_000)
        );
        assert_eq!(code(&big), "item_too_large");
    }

    #[test]
    fn delete_beats_put_and_puts_tie_break_by_content() {
        let r = ratchet();
        let put_a = r
            .parse_record(br#"{"op":"put","key":{"PK":"a"},"ts":5,"item":{"v":1}}"#)
            .expect("valid");
        let put_b = r
            .parse_record(br#"{"op":"put","key":{"PK":"a"},"ts":5,"item":{"v":2}}"#)
            .expect("valid");
        let del = r
            .parse_record(br#"{"op":"delete","key":{"PK":"a"},"ts":5}"#)
            .expect("valid");
        assert!(del.version() > put_a.version() && del.version() > put_b.version());
        assert_ne!(put_a.version(), put_b.version());
        let again = r
            .parse_record(br#"{"ts":5,"item":{"v":1},"key":{"PK":"a"},"op":"put"}"#)
            .expect("valid");
        assert_eq!(again.version(), put_a.version());
    }

    #[test]
    fn rejection_messages_never_repeat_a_large_value() {
        let huge = "v".repeat(1_000_000);
        let bodies = [
            format!(r#"{{"op":"{huge}","key":{{"PK":"a"}},"ts":1}}"#),
            format!(r#"{{"op":"put","key":{{"PK":"a"}},"ts":"{huge}","item":{{}}}}"#),
            format!(r#"{{"op":"put","key":{{"{huge}":[1]}},"ts":1,"item":{{}}}}"#),
            format!(r#"{{"op":"put","key":{{"PK":"a"}},"ts":1,"item":{{"PK":"{huge}"}}}}"#),
            format!(r#"{{"op":"put","key":{{"PK":"a"}},"ts":1,"item":{{"x":"{huge}"}}}}"#),
        ];
        for body in bodies {
            let Err(r) = ratchet().parse_record(body.as_bytes()) else {
                panic!("rejected");
            };
            assert!(
                r.message.len() < 300,
                "{}: {} bytes",
                r.code,
                r.message.len()
            );
            assert!(!r.message.contains(&"v".repeat(100)), "{}", r.code);
        }
    }
}
