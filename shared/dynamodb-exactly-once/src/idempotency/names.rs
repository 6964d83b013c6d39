//! The table's layout: attribute names, status values, an optional sort key under a static
//! partition key. [`AttributeNames::native`] is
//! this layer's own; [`AttributeNames::powertools`] is aws-lambda-powertools'
//! `DynamoDBPersistenceLayer`'s (key `id`, `status` `INPROGRESS` / `COMPLETED`, `expiration`
//! in epoch seconds, `in_progress_expiration` in epoch ms, `data` the result's JSON,
//! `validation` the payload's hash), so Python and Rust functions share one table. The
//! [`RecordFormat`](super::RecordFormat) of keys and hashes goes with them
//! ([`DynamoDbPersistenceBuilder::powertools`](super::DynamoDbPersistenceBuilder::powertools)).

use crate::ConfigError;

/// Names and values of a record's attributes.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributeNames {
    /// The partition key (S): the stored key, or the static value with a sort key.
    pub(crate) key: String,
    /// The sort key (S) holding the stored key, under [`AttributeNames::static_partition_key`].
    pub(crate) sort_key: Option<String>,
    /// The partition key's value when there is a sort key.
    pub(crate) static_partition_key: String,
    /// The status attribute.
    pub(crate) status: String,
    /// Its value while in progress.
    pub(crate) in_progress_value: String,
    /// Its value once completed.
    pub(crate) completed_value: String,
    /// Epoch ms until which an in-progress claim holds.
    pub(crate) in_progress_until: String,
    /// The record's TTL (epoch seconds): enable TTL on it.
    pub(crate) expires_at: String,
    /// The payload's hash.
    pub(crate) payload_hash: String,
    /// The claim's token (this layer's own; Powertools ignores it).
    pub(crate) token: String,
    /// The result's JSON (absent: too large to keep).
    pub(crate) result: String,
    /// The operation (this layer's own; Powertools ignores it).
    pub(crate) operation: String,
}

impl AttributeNames {
    /// The partition key (S): the stored key, or the static value with a sort key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The sort key (S) holding the stored key, under [`AttributeNames::static_partition_key`].
    pub fn sort_key(&self) -> Option<&str> {
        self.sort_key.as_deref()
    }

    /// The partition key's value when there is a sort key.
    pub fn static_partition_key(&self) -> &str {
        &self.static_partition_key
    }

    /// The status attribute.
    pub fn status(&self) -> &str {
        &self.status
    }

    /// Its value while in progress.
    pub fn in_progress_value(&self) -> &str {
        &self.in_progress_value
    }

    /// Its value once completed.
    pub fn completed_value(&self) -> &str {
        &self.completed_value
    }

    /// Epoch ms until which an in-progress claim holds.
    pub fn in_progress_until(&self) -> &str {
        &self.in_progress_until
    }

    /// The record's TTL (epoch seconds): enable TTL on it.
    pub fn expires_at(&self) -> &str {
        &self.expires_at
    }

    /// The payload's hash.
    pub fn payload_hash(&self) -> &str {
        &self.payload_hash
    }

    /// The claim's token (this layer's own; Powertools ignores it).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The result's JSON (absent: too large to keep).
    pub fn result(&self) -> &str {
        &self.result
    }

    /// The operation (this layer's own; Powertools ignores it).
    pub fn operation(&self) -> &str {
        &self.operation
    }
}

impl AttributeNames {
    /// This layer's names: key `Id`, `Status` (`IN_PROGRESS` / `COMPLETED`),
    /// `InProgressUntil`, `ExpiresAt`, `PayloadHash`, `Token`, `Result`, `Operation`.
    pub fn native() -> Self {
        AttributeNames {
            key: "Id".into(),
            sort_key: None,
            static_partition_key: "idempotency".into(),
            status: "Status".into(),
            in_progress_value: "IN_PROGRESS".into(),
            completed_value: "COMPLETED".into(),
            in_progress_until: "InProgressUntil".into(),
            expires_at: "ExpiresAt".into(),
            payload_hash: "PayloadHash".into(),
            token: "Token".into(),
            result: "Result".into(),
            operation: "Operation".into(),
        }
    }

    /// aws-lambda-powertools' names and values (its `DynamoDBPersistenceLayer` defaults).
    /// Its static partition key (sort-key mode) is the sharing function's
    /// `idempotency#<AWS_LAMBDA_FUNCTION_NAME>`, which only that function knows: the
    /// builder requires it with a sort key.
    pub fn powertools() -> Self {
        AttributeNames {
            key: "id".into(),
            sort_key: None,
            static_partition_key: "idempotency".into(),
            status: "status".into(),
            in_progress_value: "INPROGRESS".into(),
            completed_value: "COMPLETED".into(),
            in_progress_until: "in_progress_expiration".into(),
            expires_at: "expiration".into(),
            payload_hash: "validation".into(),
            token: "token".into(),
            result: "data".into(),
            operation: "operation".into(),
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let mut names = vec![
            &self.key,
            &self.status,
            &self.in_progress_until,
            &self.expires_at,
            &self.payload_hash,
            &self.token,
            &self.result,
            &self.operation,
        ];
        names.extend(self.sort_key.as_ref());
        if names.iter().any(|n| n.is_empty() || n.len() > 255) {
            return Err(ConfigError::new(
                "attribute_names",
                "each is 1 to 255 bytes",
            ));
        }
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        if sorted.len() != names.len() {
            return Err(ConfigError::new("attribute_names", "must all differ"));
        }
        if self.sort_key.is_some() && self.static_partition_key.is_empty() {
            return Err(ConfigError::new(
                "static_partition_key",
                "must not be empty",
            ));
        }
        Ok(())
    }
}
