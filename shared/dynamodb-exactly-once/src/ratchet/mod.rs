#![doc = include_str!("../../docs/ratchet.md")]

mod builder;
mod cache;
mod config;
mod format;
mod history;
mod layout;
mod ledger;
mod outcome;
mod read;
mod record;
mod replicate;
mod settings;
mod ts;
mod write;

use aws_sdk_dynamodb::Client;

use crate::ddb::Item;
use crate::rejection::Rejection;

pub use builder::RatchetConfigBuilder;
pub use config::{RatchetConfig, Replication};
pub(crate) use format::LAYOUT_ATTRIBUTE;
pub use format::{HISTORY_KEY_ATTRIBUTE, HISTORY_SORT_ATTRIBUTE};
pub use ledger::LifetimeLedger;
pub use outcome::RatchetOutcome;
pub use record::history_sort_key;
use record::RawRecord;
pub use record::{RatchetOp, RatchetRecord};
pub use ts::{Ts, TsError};

/// The write condition of a number timestamp (placeholders: `#ts`, `#tb`, `:ts`, `:tb`).
pub(crate) const CONDITION_NEWER: &str =
    "attribute_not_exists(#ts) OR #ts < :ts OR (#ts = :ts AND (attribute_not_exists(#tb) OR #tb < :tb))";
/// The write condition of a string timestamp (above `u64`, see [`Ts`]): as
/// [`CONDITION_NEWER`], and a stored number is always older (placeholder `:numeric` = `"N"`).
pub(crate) const CONDITION_NEWER_BIG: &str =
    "attribute_not_exists(#ts) OR attribute_type(#ts, :numeric) OR #ts < :ts OR (#ts = :ts AND (attribute_not_exists(#tb) OR #tb < :tb))";
/// The query filter that hides tombstones (placeholders: `#del`, `:true`).
pub(crate) const FILTER_LIVE: &str = "attribute_not_exists(#del) OR #del <> :true";
/// Key condition of [`Ratchet::query_partition`].
const KEY_CONDITION_PARTITION: &str = "#pk = :pk";

/// The ratchet protocol on one table.
///
/// ```no_run
/// # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig, RatchetOutcome};
///
/// let ratchet = Ratchet::new(client, RatchetConfig::builder("Movies").build()?);
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
    layout: layout::Layout,
    cache: cache::VersionCache,
    /// What this process knows of the lifetime ledger ([`RatchetConfig::lifetime_ledger`]).
    ledger: std::sync::Arc<ledger::LedgerState>,
}

impl Ratchet {
    /// The protocol on `config`'s table (a built config is valid: its builder checked it).
    pub fn new(client: Client, config: RatchetConfig) -> Self {
        let layout = layout::Layout::of(&config);
        let cache = cache::VersionCache::new(config.cache_keys, config.tombstone_ttl);
        Ratchet {
            client: crate::ddb::conflict::retrying_conflicts(client),
            config,
            layout,
            cache,
            ledger: std::sync::Arc::default(),
        }
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
    use crate::batch::Protocol;

    #[test]
    fn the_age_guard_is_the_tombstone_lifetime_unless_kept_lower_and_never_longer() {
        let lifetime =
            RatchetConfig::builder("t").tombstone_ttl(std::time::Duration::from_secs(600));
        let config = lifetime.clone().build().expect("valid");
        assert_eq!(config.record_age_limit().as_secs(), 600);
        // Raised from 60 s: the guard stays at the old lifetime for one new lifetime.
        let config = config
            .to_builder()
            .max_record_age(std::time::Duration::from_secs(60))
            .build()
            .expect("valid");
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        let ratchet = Ratchet::new(Client::from_conf(conf), config.clone());
        assert_eq!(ratchet.max_record_age().map(|d| d.as_secs()), Some(60));
        let refused = lifetime
            .max_record_age(std::time::Duration::from_secs(601))
            .build()
            .expect_err("longer than the lifetime");
        assert_eq!(refused.setting, "max_record_age_seconds");
    }

    fn ratchet() -> Ratchet {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        let config = RatchetConfig::builder("t").build().expect("valid");
        Ratchet::new(Client::from_conf(conf), config)
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
