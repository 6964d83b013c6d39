//! [`DynamoDbPersistence::builder`]: a table's layout (attribute names, a sort key, the
//! Powertools format), validated when built.

use crate::ConfigError;
use aws_sdk_dynamodb::Client;

use super::dynamodb::DynamoDbPersistence;
use super::names::AttributeNames;
use super::RecordFormat;

impl DynamoDbPersistence {
    /// A builder: attribute names, sort key, [Powertools' format](DynamoDbPersistenceBuilder::powertools).
    pub fn builder(client: Client, table: impl Into<String>) -> DynamoDbPersistenceBuilder {
        DynamoDbPersistenceBuilder {
            client,
            table: table.into(),
            format: RecordFormat::Native,
            set: Layout::default(),
        }
    }
}

/// The names set on the builder, applied over the format's own when built (so that
/// [`powertools`](DynamoDbPersistenceBuilder::powertools) keeps what was set before it).
#[derive(Debug, Clone, Default)]
struct Layout {
    key: Option<String>,
    sort_key: Option<String>,
    static_partition_key: Option<String>,
    status: Option<String>,
    expires_at: Option<String>,
    in_progress_until: Option<String>,
    result: Option<String>,
    payload_hash: Option<String>,
}

/// Builds a [`DynamoDbPersistence`] with its layout ([`DynamoDbPersistence::builder`]).
#[derive(Debug, Clone)]
pub struct DynamoDbPersistenceBuilder {
    client: Client,
    table: String,
    format: RecordFormat,
    set: Layout,
}

impl DynamoDbPersistenceBuilder {
    /// Powertools' record format: its attribute names, status values, key scheme
    /// (`<namespace>.<operation>#<md5>`) and payload hash (MD5 of Python's `json.dumps`).
    /// The namespace is then the function's name and the operation Powertools' qualified
    /// function name (`<module>.<qualname>`), see `docs/idempotency.md`. Names set before or
    /// after it are kept. With a sort key, the static partition key must be given: the
    /// peer's `idempotency#<its function name>`.
    pub fn powertools(mut self) -> Self {
        self.format = RecordFormat::Powertools;
        self
    }

    /// TypeScript Powertools' record format (`@aws-lambda-powertools/idempotency` 2.35.0):
    /// the attribute names and status values of [`powertools`](Self::powertools), keys
    /// `<operation>#<base64 md5>` where the operation is the TypeScript function's
    /// `AWS_LAMBDA_FUNCTION_NAME` (or its `keyPrefix`), payload hashes the base64 MD5 of
    /// `JSON.stringify` over case-insensitively sorted keys, and `data` a native DynamoDB
    /// value (a map for an object). See `docs/idempotency.md`.
    pub fn powertools_typescript(mut self) -> Self {
        self.format = RecordFormat::PowertoolsTypeScript;
        self
    }

    /// Powertools for Java's record format (`powertools-idempotency` 2.10.0, read from its
    /// source; Java cannot run here): the names and status values of
    /// [`powertools`](Self::powertools), keys `<namespace>.<operation>#<md5 hex>` (the Java
    /// function's name and the `@Idempotent` method's name) of the text Java hashes (a string
    /// without quotes, an object as Jackson's compact JSON), a string result stored raw. See
    /// `docs/idempotency.md`.
    pub fn powertools_java(mut self) -> Self {
        self.format = RecordFormat::PowertoolsJava;
        self
    }

    /// The partition key's name.
    pub fn key_attr(mut self, name: impl Into<String>) -> Self {
        self.set.key = Some(name.into());
        self
    }

    /// A sort key holding the stored key, under a static partition key.
    pub fn sort_key_attr(mut self, name: impl Into<String>) -> Self {
        self.set.sort_key = Some(name.into());
        self
    }

    /// The static partition key's value (with a sort key; by default `idempotency`; with
    /// [`powertools`](Self::powertools) required: Powertools' `static_pk_value`, by default
    /// `idempotency#<AWS_LAMBDA_FUNCTION_NAME>` of the Python or TypeScript function).
    pub fn static_partition_key(mut self, value: impl Into<String>) -> Self {
        self.set.static_partition_key = Some(value.into());
        self
    }

    /// The status attribute's name.
    pub fn status_attr(mut self, name: impl Into<String>) -> Self {
        self.set.status = Some(name.into());
        self
    }

    /// The TTL attribute's name (epoch seconds).
    pub fn expiry_attr(mut self, name: impl Into<String>) -> Self {
        self.set.expires_at = Some(name.into());
        self
    }

    /// The in-progress expiry attribute's name (epoch ms).
    pub fn in_progress_expiry_attr(mut self, name: impl Into<String>) -> Self {
        self.set.in_progress_until = Some(name.into());
        self
    }

    /// The result attribute's name.
    pub fn data_attr(mut self, name: impl Into<String>) -> Self {
        self.set.result = Some(name.into());
        self
    }

    /// The payload hash attribute's name.
    pub fn validation_attr(mut self, name: impl Into<String>) -> Self {
        self.set.payload_hash = Some(name.into());
        self
    }

    /// The persistence, once its names are valid (non-empty, all different; with
    /// Powertools' format and a sort key, the static partition key given).
    pub fn build(self) -> Result<DynamoDbPersistence, ConfigError> {
        let powertools = self.format.is_powertools();
        let mut names = if powertools {
            AttributeNames::powertools()
        } else {
            AttributeNames::native()
        };
        let set = self.set;
        if powertools && set.sort_key.is_some() && set.static_partition_key.is_none() {
            return Err(ConfigError::new(
                "static_partition_key",
                "Powertools' sort-key mode keeps records under the static partition key of the \
                 function that shares them (`idempotency#<its AWS_LAMBDA_FUNCTION_NAME>` unless \
                 its `static_pk_value` says otherwise): give it with \
                 `.static_partition_key(\"idempotency#<that function>\")`",
            ));
        }
        let apply = |field: &mut String, value: Option<String>| {
            if let Some(value) = value {
                *field = value;
            }
        };
        apply(&mut names.key, set.key);
        names.sort_key = set.sort_key;
        apply(&mut names.static_partition_key, set.static_partition_key);
        apply(&mut names.status, set.status);
        apply(&mut names.expires_at, set.expires_at);
        apply(&mut names.in_progress_until, set.in_progress_until);
        apply(&mut names.result, set.result);
        apply(&mut names.payload_hash, set.payload_hash);
        names.validate()?;
        Ok(DynamoDbPersistence::with_layout(
            self.client,
            self.table,
            names,
            self.format,
        ))
    }
}
