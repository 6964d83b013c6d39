//! Settings of the ratchet protocol: the table, the protocol's attribute names, the tombstone
//! lifetime and the write concurrency.

use std::time::Duration;

use crate::config::{ConfigError, Configured, FromSettings, Settings};

/// Default name of the timestamp attribute.
pub const DEFAULT_TS_ATTRIBUTE: &str = "Timestamp";
/// Default name of the tombstone flag.
pub const DEFAULT_DELETED_ATTRIBUTE: &str = "Deleted";
/// Default name of the TTL attribute (epoch seconds; enable TTL on it in the table).
pub const DEFAULT_TTL_ATTRIBUTE: &str = "TTL";
/// Default name of the tie-break attribute.
pub const DEFAULT_TIE_BREAK_ATTRIBUTE: &str = "TieBreak";
/// Default tombstone lifetime: 7 days.
pub const DEFAULT_TOMBSTONE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default number of keys written at once.
pub const DEFAULT_CONCURRENCY: usize = 32;

/// Settings of the ratchet protocol.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatchetConfig {
    /// The table written.
    pub table: String,
    /// Timestamp attribute.
    pub ts_attribute: String,
    /// Tombstone flag attribute.
    pub deleted_attribute: String,
    /// TTL attribute (epoch seconds).
    pub ttl_attribute: String,
    /// Tie-break token attribute.
    pub tie_break_attribute: String,
    /// How long tombstones are kept.
    pub tombstone_ttl: Duration,
    /// How many keys are written at once.
    pub concurrency: usize,
    /// The age guard: a record that reached its source longer ago is kept as a `too_old` dead
    /// letter instead of being applied (`None`: the tombstone lifetime; at most that).
    /// Raising `tombstone_ttl` does not need it when [`RatchetConfig::lifetime_ledger`] is set
    /// (the writer keeps a shorter lifetime's guard while its tombstones may exist); without a
    /// ledger, or for the first raise after a version without one, keep this at the old
    /// lifetime for one new lifetime.
    pub max_record_age: Option<Duration>,
    /// Where writers promise the tombstone lifetimes they use (see [`super::LifetimeLedger`]):
    /// a raised lifetime then keeps the guard of a shorter one until its tombstones are gone
    /// (`None`: no ledger; the guard is this writer's lifetime, or `max_record_age`).
    pub lifetime_ledger: Option<super::LifetimeLedger>,
    /// History mode: every record also lands in this table at its own `(key, ts, tie-break)`
    /// row (see the module's `# History mode` section); `None`: no history.
    pub history_table: Option<String>,
    /// Item changes (DynamoDB stream records) replicated as records (see [`Replication`]);
    /// `None`: changes are refused (`no_change_mapping`).
    pub replication: Option<Replication>,
    /// Keys of the warm-redelivery cache: a record at or below a version this process wrote
    /// or read back for its key is answered without a call (`0`: off). See the module's
    /// `# Warm redelivery` section.
    pub cache_keys: usize,
}

impl RatchetConfig {
    /// The age guard in force: [`RatchetConfig::max_record_age`], or the tombstone lifetime.
    pub fn record_age_limit(&self) -> Duration {
        self.max_record_age.unwrap_or(self.tombstone_ttl)
    }

    /// Defaults for `table`.
    pub fn new(table: impl Into<String>) -> Self {
        RatchetConfig {
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
        }
    }

    /// Check the settings: a table, the protocol attributes distinct and non-empty, a history
    /// table other than the table, a concurrency of at least 1. [`super::Ratchet::try_new`]
    /// calls it.
    pub fn validate(&self) -> Result<(), ConfigError> {
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
        "dead_letter_table",
    ];

    /// `table` (required), the attribute names, `tombstone_ttl_seconds`, `concurrency`,
    /// `max_record_age_seconds` (the age guard; default the tombstone lifetime),
    /// `history_table` (history mode), `changes` (`replicate`: item changes replicated;
    /// unset or `none`: refused) and `change_skip_attributes` (comma-separated names or
    /// `prefix*`, replacing [`DEFAULT_SKIP_ATTRIBUTES`]), `cache_keys` (the
    /// warm-redelivery cache, `0`: off) and `dead_letter_table` (the writer's dead letters:
    /// there the lifetime ledger, [`super::LifetimeLedger::in_dead_letter_table`]).
    fn from_settings(s: &Settings<'_>) -> Result<Self, ConfigError> {
        let mut c = RatchetConfig::new(s.required("table")?);
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
            .get("dead_letter_table")
            .map(|t| super::LifetimeLedger::in_dead_letter_table(t, &c.table));
        c.replication = match s.get("changes").as_deref() {
            None | Some("none") => None,
            Some("replicate") => Some(Replication {
                skip_attributes: s
                    .list("change_skip_attributes")
                    .unwrap_or_else(|| Replication::default().skip_attributes),
            }),
            Some(other) => {
                return Err(ConfigError::new(
                    "changes",
                    format!("{other:?}: must be `replicate` or `none`"),
                ))
            }
        };
        Ok(c)
    }
}

impl Configured for super::Ratchet {
    type Config = RatchetConfig;

    fn try_new(
        client: aws_sdk_dynamodb::Client,
        config: RatchetConfig,
    ) -> Result<Self, ConfigError> {
        super::Ratchet::try_new(client, config)
    }
}

/// Source attributes never copied by default: the other protocols' own attributes (the
/// transaction's `_tx*`, the counter's and the document writer's default prefixes, the
/// versioned item's). A trailing `*` makes a prefix. The replica's own ratchet attributes
/// (timestamp, tie-break, deleted flag, TTL) are always skipped.
pub const DEFAULT_SKIP_ATTRIBUTES: [&str; 7] = [
    "_tx*",
    "ctr_*",
    "doc_*",
    "_version",
    "_deleted",
    "_writeId",
    "_writtenAt",
];

/// How the ratchet replicates item changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    /// Source attributes not copied: names, or prefixes ending in `*`.
    pub skip_attributes: Vec<String>,
}

impl Default for Replication {
    fn default() -> Self {
        Replication {
            skip_attributes: DEFAULT_SKIP_ATTRIBUTES.map(String::from).to_vec(),
        }
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
