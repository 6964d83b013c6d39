#![doc = include_str!("../../docs/counter.md")]

mod aggregate;
mod aggregation;
mod bucket;
mod builder;
mod cache;
mod config;
mod forget;
mod format;
pub mod journal;
mod layout;
mod marker;
mod naming;
mod record;
mod settings;
mod settle;
mod update;
mod versioned;
mod write;

use aws_sdk_dynamodb::Client;
use serde_json::{Map, Value};

use crate::ddb::item::item_to_json;
use crate::ddb::{Clock, ItemKey, Read, StoreError};

pub use aggregation::{Aggregation, AggregationBuilder};
pub use bucket::{Bucket, BucketName};
pub use builder::CounterConfigBuilder;
pub use config::{Capacity, CounterConfig, CounterMode, KEY_BYTES, MAX_WINDOW_BUCKETS};
#[doc(hidden)]
pub use record::hash_key;
pub use record::CounterRecord;
pub use settle::CounterOutcome;

/// The counter protocol on one table.
#[doc(alias = "idempotency")]
#[doc(alias = "exactly-once")]
#[doc(alias = "deduplication")]
#[derive(Clone)]
pub struct Counter {
    pub(crate) client: Client,
    pub(crate) config: CounterConfig,
    pub(crate) clock: Clock,
    pub(crate) cache: cache::KeyCache,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counter")
            .field("config", &self.config)
            .finish()
    }
}

impl Counter {
    /// The protocol on `config.table` with the system clock (`config` is valid: its builder
    /// checked the capacity rule).
    pub fn new(client: Client, config: CounterConfig) -> Self {
        let cache = cache::KeyCache::of(&config);
        Counter {
            client: crate::ddb::conflict::retrying_conflicts(client),
            config,
            clock: Clock::system(),
            cache,
        }
    }

    /// The same protocol with another clock (tests move time with it).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The settings.
    pub fn config(&self) -> &CounterConfig {
        &self.config
    }

    /// The bucket the writer's clock is in: new keys go there (its start and `until` are
    /// epoch seconds).
    pub fn current_bucket(&self) -> Bucket {
        layout::Grid::of(&self.config).bucket_at(self.clock.now_secs())
    }

    /// Read one counter item (strongly consistent) as `T`; `None` when absent. The protocol's
    /// own attributes (`<prefix>*`) are in the item too, but for the journal roll-up's binary
    /// watermarks: `T` ignores them unless it names them.
    /// In [`CounterMode::Journal`] the item holds what the roll-up has applied: it lags the
    /// journal by the roll-up's delay (its period plus one run while it keeps up).
    pub async fn get<T: serde::de::DeserializeOwned>(
        &self,
        key: &ItemKey,
    ) -> Result<Option<T>, StoreError> {
        let item =
            crate::ddb::read::get_item(&self.client, &self.config.table, key, Read::Consistent)
                .await?;
        let watermarks = format!("{}w_", self.config.attribute_prefix);
        item.map(|mut item| {
            item.retain(|name, _| !name.starts_with(&watermarks));
            crate::ddb::read::decode(item)
        })
        .transpose()
    }

    /// Read one counter item (strongly consistent) as JSON, protocol attributes included (the
    /// journal roll-up's binary watermarks as base64 strings).
    pub async fn get_json(&self, key: &ItemKey) -> Result<Option<Map<String, Value>>, StoreError> {
        let item =
            crate::ddb::read::get_item(&self.client, &self.config.table, key, Read::Consistent)
                .await?;
        Ok(item.map(item_to_json).transpose()?)
    }
}
