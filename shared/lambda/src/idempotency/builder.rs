//! [`DynamoDbPersistence::builder`]: a table's layout (attribute names, a sort key, the
//! Powertools format), validated when built.

use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::ConfigError;

use super::dynamodb::DynamoDbPersistence;
use super::names::AttributeNames;
use super::RecordFormat;

impl DynamoDbPersistence {
    /// A builder: attribute names, sort key, [Powertools' format](DynamoDbPersistenceBuilder::powertools).
    pub fn builder(client: Client, table: impl Into<String>) -> DynamoDbPersistenceBuilder {
        DynamoDbPersistenceBuilder {
            client,
            table: table.into(),
            names: AttributeNames::native(),
            format: RecordFormat::Native,
        }
    }
}

/// Builds a [`DynamoDbPersistence`] with its layout ([`DynamoDbPersistence::builder`]).
#[derive(Debug, Clone)]
pub struct DynamoDbPersistenceBuilder {
    client: Client,
    table: String,
    names: AttributeNames,
    format: RecordFormat,
}

impl DynamoDbPersistenceBuilder {
    /// Powertools' record format: its attribute names, status values, key scheme
    /// (`<namespace>.<operation>#<md5>`) and payload hash (MD5 of Python's `json.dumps`).
    /// The namespace is then the function's name and the operation Powertools' qualified
    /// function name (`<module>.<qualname>`), see `docs/idempotency.md`.
    pub fn powertools(mut self) -> Self {
        self.names = AttributeNames::powertools();
        self.format = RecordFormat::Powertools;
        self
    }

    /// The partition key's name.
    pub fn key_attr(mut self, name: impl Into<String>) -> Self {
        self.names.key = name.into();
        self
    }

    /// A sort key holding the stored key, under a static partition key.
    pub fn sort_key_attr(mut self, name: impl Into<String>) -> Self {
        self.names.sort_key = Some(name.into());
        self
    }

    /// The static partition key's value (with a sort key).
    pub fn static_partition_key(mut self, value: impl Into<String>) -> Self {
        self.names.static_partition_key = value.into();
        self
    }

    /// The status attribute's name.
    pub fn status_attr(mut self, name: impl Into<String>) -> Self {
        self.names.status = name.into();
        self
    }

    /// The TTL attribute's name (epoch seconds).
    pub fn expiry_attr(mut self, name: impl Into<String>) -> Self {
        self.names.expires_at = name.into();
        self
    }

    /// The in-progress expiry attribute's name (epoch ms).
    pub fn in_progress_expiry_attr(mut self, name: impl Into<String>) -> Self {
        self.names.in_progress_until = name.into();
        self
    }

    /// The result attribute's name.
    pub fn data_attr(mut self, name: impl Into<String>) -> Self {
        self.names.result = name.into();
        self
    }

    /// The payload hash attribute's name.
    pub fn validation_attr(mut self, name: impl Into<String>) -> Self {
        self.names.payload_hash = name.into();
        self
    }

    /// The persistence, once its names are valid (non-empty, all different).
    pub fn build(self) -> Result<DynamoDbPersistence, ConfigError> {
        self.names.validate()?;
        Ok(DynamoDbPersistence::with_layout(
            self.client,
            self.table,
            self.names,
            self.format,
        ))
    }
}
