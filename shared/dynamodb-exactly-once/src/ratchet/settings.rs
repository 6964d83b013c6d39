//! The ratchet's configuration from named settings (see [`crate::config`]).

use std::time::Duration;

use super::config::{RatchetConfig, Replication};
use crate::config::{ConfigError, Configured, FromSettings, Settings};

impl FromSettings for RatchetConfig {
    const NAMES: &'static [&'static str] = &[
        "table",
        "ts_attribute",
        "deleted_attribute",
        "ttl_attribute",
        "tie_break_attribute",
        "tombstone_ttl_seconds",
        "concurrency",
        "max_record_age_seconds",
        "history_table",
        "changes",
        "change_skip_attributes",
        "cache_keys",
        "ledger_table",
    ];

    /// `table` (required), the attribute names, `tombstone_ttl_seconds`, `concurrency`,
    /// `max_record_age_seconds` (the age guard; default the tombstone lifetime),
    /// `history_table` (history mode), `changes` (`replicate`: item changes replicated;
    /// unset or `none`: refused) and `change_skip_attributes` (comma-separated names or
    /// `prefix*`, replacing the default `_tx*`, `ctr_*`, `doc_*`, `_version`, `_deleted`, `_writeId`,
    /// `_writtenAt`), `cache_keys` (the
    /// warm-redelivery cache, `0`: off), `ledger_table` (the lifetime ledger,
    /// [`super::LifetimeLedger::new`])).
    fn from_settings(s: &Settings<'_>) -> Result<Self, ConfigError> {
        let mut b = RatchetConfig::builder(s.required("table")?);
        let c = &mut b.config;
        s.set(&mut c.ts_attribute, "ts_attribute")?;
        s.set(&mut c.deleted_attribute, "deleted_attribute")?;
        s.set(&mut c.ttl_attribute, "ttl_attribute")?;
        s.set(&mut c.tie_break_attribute, "tie_break_attribute")?;
        s.set_secs(&mut c.tombstone_ttl, "tombstone_ttl_seconds")?;
        s.set(&mut c.concurrency, "concurrency")?;
        s.set(&mut c.cache_keys, "cache_keys")?;
        if let Some(secs) = s.parse::<u64>("max_record_age_seconds")? {
            c.max_record_age = Some(Duration::from_secs(secs));
        }
        c.history_table = s.get("history_table");
        c.lifetime_ledger = s
            .get("ledger_table")
            .map(|t| super::LifetimeLedger::new(t, &c.table));
        c.replication = match s.get("changes").as_deref() {
            None | Some("none") => None,
            Some("replicate") => Some(match s.list("change_skip_attributes") {
                Some(names) => Replication::skipping(names),
                None => Replication::default(),
            }),
            Some(other) => {
                return Err(ConfigError::new(
                    "changes",
                    format!("{other:?}: must be `replicate` or `none`"),
                ))
            }
        };
        b.build()
    }
}

impl Configured for super::Ratchet {
    type Config = RatchetConfig;

    fn new(client: aws_sdk_dynamodb::Client, config: RatchetConfig) -> Self {
        super::Ratchet::new(client, config)
    }
}
