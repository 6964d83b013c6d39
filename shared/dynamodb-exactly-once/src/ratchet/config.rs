//! Settings of the ratchet protocol: the table, the protocol's attribute names, the tombstone
//! lifetime and the write concurrency.

use std::time::Duration;

use crate::config::{ConfigError, Configured, FromSettings, Settings};

/// Default name of the timestamp attribute.
pub(crate) const DEFAULT_TS_ATTRIBUTE: &str = "Timestamp";
/// Default name of the tombstone flag.
pub(crate) const DEFAULT_DELETED_ATTRIBUTE: &str = "Deleted";
/// Default name of the TTL attribute (epoch seconds; enable TTL on it in the table).
pub(crate) const DEFAULT_TTL_ATTRIBUTE: &str = "TTL";
/// Default name of the tie-break attribute.
pub(crate) const DEFAULT_TIE_BREAK_ATTRIBUTE: &str = "TieBreak";
/// Default tombstone lifetime: 7 days.
pub(crate) const DEFAULT_TOMBSTONE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default number of keys written at once.
pub(crate) const DEFAULT_CONCURRENCY: usize = 32;

/// Settings of the ratchet protocol; build with [`RatchetConfig::builder`] (a config that
/// exists is valid).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatchetConfig {
    pub(crate) table: String,
    pub(crate) ts_attribute: String,
    pub(crate) deleted_attribute: String,
    pub(crate) ttl_attribute: String,
    pub(crate) tie_break_attribute: String,
    pub(crate) tombstone_ttl: Duration,
    pub(crate) concurrency: usize,
    pub(crate) max_record_age: Option<Duration>,
    pub(crate) lifetime_ledger: Option<super::LifetimeLedger>,
    pub(crate) history_table: Option<String>,
    pub(crate) replication: Option<Replication>,
    pub(crate) cache_keys: usize,
}

impl RatchetConfig {
    /// A builder with the defaults, writing `table`.
    pub fn builder(table: impl Into<String>) -> RatchetConfigBuilder {
        RatchetConfigBuilder {
            config: RatchetConfig {
                table: table.into(),
                ts_attribute: DEFAULT_TS_ATTRIBUTE.into(),
                deleted_attribute: DEFAULT_DELETED_ATTRIBUTE.into(),
                ttl_attribute: DEFAULT_TTL_ATTRIBUTE.into(),
                tie_break_attribute: DEFAULT_TIE_BREAK_ATTRIBUTE.into(),
                tombstone_ttl: DEFAULT_TOMBSTONE_TTL,
                concurrency: DEFAULT_CONCURRENCY,
                max_record_age: None,
                lifetime_ledger: None,
                history_table: None,
                replication: None,
                cache_keys: super::cache::DEFAULT_CACHE_KEYS,
            },
        }
    }

    /// A builder starting from this config.
    pub fn to_builder(&self) -> RatchetConfigBuilder {
        RatchetConfigBuilder {
            config: self.clone(),
        }
    }

    /// The table written.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Timestamp attribute.
    pub fn ts_attribute(&self) -> &str {
        &self.ts_attribute
    }

    /// Tombstone flag attribute.
    pub fn deleted_attribute(&self) -> &str {
        &self.deleted_attribute
    }

    /// TTL attribute (epoch seconds).
    pub fn ttl_attribute(&self) -> &str {
        &self.ttl_attribute
    }

    /// Tie-break token attribute.
    pub fn tie_break_attribute(&self) -> &str {
        &self.tie_break_attribute
    }

    /// How long tombstones are kept.
    pub fn tombstone_ttl(&self) -> Duration {
        self.tombstone_ttl
    }

    /// How many keys are written at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// The age guard: a record that reached its source longer ago is kept as a `too_old` dead
    /// letter instead of being applied (`None`: the tombstone lifetime; at most that).
    /// Raising `tombstone_ttl` does not need it when [`RatchetConfig::lifetime_ledger`] is set
    /// (the writer keeps a shorter lifetime's guard while its tombstones may exist); without a
    /// ledger, or for the first raise after a version without one, keep this at the old
    /// lifetime for one new lifetime.
    pub fn max_record_age(&self) -> Option<Duration> {
        self.max_record_age
    }

    /// Where writers promise the tombstone lifetimes they use (see [`super::LifetimeLedger`]):
    /// a raised lifetime then keeps the guard of a shorter one until its tombstones are gone
    /// (`None`: no ledger; the guard is this writer's lifetime, or `max_record_age`).
    pub fn lifetime_ledger(&self) -> Option<&super::LifetimeLedger> {
        self.lifetime_ledger.as_ref()
    }

    /// History mode: every record also lands in this table at its own `(key, ts, tie-break)`
    /// row (see the module's `# History mode` section); `None`: no history.
    pub fn history_table(&self) -> Option<&str> {
        self.history_table.as_deref()
    }

    /// Item changes (DynamoDB stream records) replicated as records (see [`Replication`]);
    /// `None`: changes are refused (`no_change_mapping`).
    pub fn replication(&self) -> Option<&Replication> {
        self.replication.as_ref()
    }

    /// Keys of the warm-redelivery cache: a record at or below a version this process wrote
    /// or read back for its key is answered without a call (`0`: off). See the module's
    /// `# Warm redelivery` section.
    pub fn cache_keys(&self) -> usize {
        self.cache_keys
    }

    /// The age guard in force: [`RatchetConfig::max_record_age`], or the tombstone lifetime.
    pub fn record_age_limit(&self) -> Duration {
        self.max_record_age.unwrap_or(self.tombstone_ttl)
    }

    /// Check the settings: a table, the protocol attributes distinct and non-empty, a history
    /// table other than the table, a concurrency of at least 1, an age guard no longer than
    /// the tombstone lifetime. [`RatchetConfigBuilder::build`] calls it.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.table.is_empty() {
            return Err(ConfigError::new("table", "must not be empty"));
        }
        if self
            .max_record_age
            .is_some_and(|age| age > self.tombstone_ttl)
        {
            return Err(ConfigError::new(
                "max_record_age_seconds",
                "is longer than `tombstone_ttl_seconds`: a put older than the tombstone \
                 lifetime could revive a deleted item",
            ));
        }
        let names = self.protocol_attributes();
        for (i, n) in names.iter().enumerate() {
            let setting = ATTRIBUTE_SETTINGS[i];
            if n.is_empty() {
                return Err(ConfigError::new(setting, "must not be empty"));
            }
            if let Some(j) = names[..i].iter().position(|m| m == n) {
                return Err(ConfigError::new(
                    setting,
                    format!(
                        "attribute `{n}` is also `{}`: each protocol role needs its own",
                        ATTRIBUTE_SETTINGS[j]
                    ),
                ));
            }
        }
        if let Some(history) = &self.history_table {
            if history.is_empty() || *history == self.table {
                return Err(ConfigError::new(
                    "history_table",
                    "must name a table other than `table`",
                ));
            }
        }
        if self.concurrency == 0 {
            return Err(ConfigError::new("concurrency", "must be at least 1"));
        }
        Ok(())
    }

    /// The attributes the protocol writes (payloads cannot set them), in the order of
    /// `ATTRIBUTE_SETTINGS`.
    pub fn protocol_attributes(&self) -> [&str; 4] {
        [
            &self.ts_attribute,
            &self.deleted_attribute,
            &self.ttl_attribute,
            &self.tie_break_attribute,
        ]
    }
}

/// The settings naming [`RatchetConfig::protocol_attributes`], in order.
const ATTRIBUTE_SETTINGS: [&str; 4] = [
    "ts_attribute",
    "deleted_attribute",
    "ttl_attribute",
    "tie_break_attribute",
];

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
        "dead_letter_table",
    ];

    /// `table` (required), the attribute names, `tombstone_ttl_seconds`, `concurrency`,
    /// `max_record_age_seconds` (the age guard; default the tombstone lifetime),
    /// `history_table` (history mode), `changes` (`replicate`: item changes replicated;
    /// unset or `none`: refused) and `change_skip_attributes` (comma-separated names or
    /// `prefix*`, replacing ['tx*', 'ctr*', 'doc*', 'version', 'deleted', 'writeId', 'writtenAt']), `cache_keys` (the
    /// warm-redelivery cache, `0`: off), `ledger_table` (the lifetime ledger,
    /// [`super::LifetimeLedger::new`]) and `dead_letter_table` (the writer's dead letters: with
    /// a ledger table, the ledger item an earlier version kept there is moved from it,
    /// [`super::LifetimeLedger::moving_from`]).
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
        c.lifetime_ledger = s.get("ledger_table").map(|t| {
            let ledger = super::LifetimeLedger::new(t, &c.table);
            match s.get("dead_letter_table") {
                Some(letters) => ledger.moving_from(letters),
                None => ledger,
            }
        });
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

/// Source attributes never copied by default: the other protocols' own attributes (the
/// transaction's `_tx*`, the counter's and the document writer's default prefixes, the
/// versioned item's). A trailing `*` makes a prefix. The replica's own ratchet attributes
/// (timestamp, tie-break, deleted flag, TTL) are always skipped.
pub(crate) const DEFAULT_SKIP_ATTRIBUTES: [&str; 7] = [
    "_tx*",
    "ctr_*",
    "doc_*",
    "_version",
    "_deleted",
    "_writeId",
    "_writtenAt",
];

/// How the ratchet replicates item changes: [`Replication::default`] skips
/// ['tx*', 'ctr*', 'doc*', 'version', 'deleted', 'writeId', 'writtenAt'], [`Replication::skipping`] others.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    pub(crate) skip_attributes: Vec<String>,
}

impl Default for Replication {
    fn default() -> Self {
        Replication::skipping(DEFAULT_SKIP_ATTRIBUTES)
    }
}

impl Replication {
    /// Replication leaving out these source attributes (names, or prefixes ending in `*`)
    /// instead of ['tx*', 'ctr*', 'doc*', 'version', 'deleted', 'writeId', 'writtenAt'].
    pub fn skipping<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Self {
        Replication {
            skip_attributes: names.into_iter().map(Into::into).collect(),
        }
    }

    /// Source attributes not copied: names, or prefixes ending in `*`.
    pub fn skip_attributes(&self) -> &[String] {
        &self.skip_attributes
    }
}

impl Replication {
    /// Whether a source attribute is left out of the replica.
    pub fn skips(&self, config: &RatchetConfig, name: &str) -> bool {
        config.protocol_attributes().contains(&name)
            || self
                .skip_attributes
                .iter()
                .any(|s| match s.strip_suffix('*') {
                    Some(prefix) => name.starts_with(prefix),
                    None => s == name,
                })
    }
}

/// Builds a validated [`RatchetConfig`].
#[must_use]
#[derive(Debug, Clone)]
pub struct RatchetConfigBuilder {
    config: RatchetConfig,
}

impl RatchetConfigBuilder {
    /// Timestamp attribute (default `"Timestamp"`).
    pub fn ts_attribute(mut self, name: impl Into<String>) -> Self {
        self.config.ts_attribute = name.into();
        self
    }

    /// Tombstone flag attribute (default `"Deleted"`).
    pub fn deleted_attribute(mut self, name: impl Into<String>) -> Self {
        self.config.deleted_attribute = name.into();
        self
    }

    /// TTL attribute, epoch seconds (default `"TTL"`; enable TTL on it).
    pub fn ttl_attribute(mut self, name: impl Into<String>) -> Self {
        self.config.ttl_attribute = name.into();
        self
    }

    /// Tie-break token attribute (default `"TieBreak"`).
    pub fn tie_break_attribute(mut self, name: impl Into<String>) -> Self {
        self.config.tie_break_attribute = name.into();
        self
    }

    /// How long tombstones are kept (default 7 days).
    pub fn tombstone_ttl(mut self, ttl: Duration) -> Self {
        self.config.tombstone_ttl = ttl;
        self
    }

    /// How many keys are written at once (default 32; at least 1).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.config.concurrency = concurrency;
        self
    }

    /// The age guard (default: the tombstone lifetime; at most that), see
    /// [`RatchetConfig::max_record_age`].
    pub fn max_record_age(mut self, age: Duration) -> Self {
        self.config.max_record_age = Some(age);
        self
    }

    /// Where writers promise the tombstone lifetimes they use (default: no ledger), see
    /// [`RatchetConfig::lifetime_ledger`].
    pub fn lifetime_ledger(mut self, ledger: super::LifetimeLedger) -> Self {
        self.config.lifetime_ledger = Some(ledger);
        self
    }

    /// History mode into this table, other than the table (default: no history).
    pub fn history_table(mut self, table: impl Into<String>) -> Self {
        self.config.history_table = Some(table.into());
        self
    }

    /// Replicate item changes (default: changes are refused, `no_change_mapping`).
    pub fn replication(mut self, replication: Replication) -> Self {
        self.config.replication = Some(replication);
        self
    }

    /// Keys of the warm-redelivery cache (default 10000; `0`: off).
    pub fn cache_keys(mut self, keys: usize) -> Self {
        self.config.cache_keys = keys;
        self
    }

    /// The config, or the first setting at fault: an empty table, an empty or shared
    /// protocol attribute name, a history table that is the table, a concurrency of 0, an age
    /// guard longer than the tombstone lifetime.
    pub fn build(self) -> Result<RatchetConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(builder: RatchetConfigBuilder) -> String {
        builder.build().expect_err("an invalid setting").setting
    }

    #[test]
    fn build_refuses_an_invalid_setting_by_name() {
        let b = || RatchetConfig::builder("T");
        assert_eq!(refused(RatchetConfig::builder("")), "table");
        assert_eq!(refused(b().ts_attribute("")), "ts_attribute");
        assert_eq!(refused(b().ttl_attribute("Deleted")), "ttl_attribute");
        assert_eq!(
            refused(b().tie_break_attribute("Timestamp")),
            "tie_break_attribute"
        );
        assert_eq!(refused(b().history_table("T")), "history_table");
        assert_eq!(refused(b().concurrency(0)), "concurrency");
        let too_old = b()
            .tombstone_ttl(Duration::from_secs(600))
            .max_record_age(Duration::from_secs(601));
        assert_eq!(refused(too_old), "max_record_age_seconds");
    }

    #[test]
    fn getters_return_what_was_set_and_the_defaults_otherwise() {
        let defaults = RatchetConfig::builder("T").build().expect("valid");
        assert_eq!(defaults.table(), "T");
        assert_eq!(
            defaults.protocol_attributes(),
            ["Timestamp", "Deleted", "TTL", "TieBreak"]
        );
        assert_eq!(defaults.tombstone_ttl(), DEFAULT_TOMBSTONE_TTL);
        assert_eq!(defaults.record_age_limit(), DEFAULT_TOMBSTONE_TTL);
        assert!(defaults.history_table().is_none() && defaults.replication().is_none());
        let ledger = super::super::LifetimeLedger::new("Ledger", "T").moving_from("DLQ");
        let c = RatchetConfig::builder("T")
            .ts_attribute("ts")
            .deleted_attribute("del")
            .ttl_attribute("exp")
            .tie_break_attribute("tb")
            .tombstone_ttl(Duration::from_secs(600))
            .concurrency(4)
            .max_record_age(Duration::from_secs(60))
            .lifetime_ledger(ledger.clone())
            .history_table("H")
            .replication(Replication::skipping(["secret", "tmp_*"]))
            .cache_keys(0)
            .build()
            .expect("valid");
        assert_eq!(
            [
                c.ts_attribute(),
                c.deleted_attribute(),
                c.ttl_attribute(),
                c.tie_break_attribute()
            ],
            ["ts", "del", "exp", "tb"]
        );
        assert_eq!((c.tombstone_ttl().as_secs(), c.concurrency()), (600, 4));
        assert_eq!(c.max_record_age(), Some(Duration::from_secs(60)));
        assert_eq!(c.record_age_limit(), Duration::from_secs(60));
        assert_eq!(
            (c.lifetime_ledger(), c.history_table()),
            (Some(&ledger), Some("H"))
        );
        let skipped = c.replication().map(|r| r.skip_attributes().join(","));
        assert_eq!(skipped.as_deref(), Some("secret,tmp_*"));
        assert_eq!(c.cache_keys(), 0);
        assert_eq!(c.to_builder().build(), Ok(c));
    }
}
