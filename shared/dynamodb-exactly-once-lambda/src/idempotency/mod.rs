//! Idempotency for any async function, and for processor records: a run per operation and
//! key, its result returned to every duplicate.
//!
//! The protocol (claim, run, store or release; [`Persistence`], [`DynamoDbPersistence`],
//! [`InMemory`], Powertools' record formats) is the library's
//! [`dynamodb_exactly_once::idempotency`], re-exported here; its page states the invariant,
//! the cost and the failure modes. This module adds what needs Lambda's records:
//!
//! ```no_run
//! use dynamodb_exactly_once_lambda::idempotency::{
//!     DynamoDbPersistence, Idempotency, IdempotencyConfig,
//! };
//! # async fn charge(order: &str) -> Result<String, std::io::Error> { Ok("receipt".into()) }
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let config = IdempotencyConfig::builder("orders-fn").build()?;
//! let idempotency = Idempotency::new(DynamoDbPersistence::new(client, "Idempotency"), config);
//! let order = serde_json::json!({"orderId": "o-1", "amount": 250});
//! let receipt = idempotency
//!     .call("charge", "o-1")
//!     .payload(&order)
//!     .deadline_ms(None) // the invocation's deadline (`Context::deadline`), when there is one
//!     .run(|| charge("o-1"))
//!     .await?
//!     .value();
//! # Ok(()) }
//! ```
//!
//! Behind the [batch processor](crate::processor), a handler is one call: the key taken from
//! the record by a [`KeySource`] (its id, its sequence number, a JSON pointer into the body,
//! a closure), the payload the record's body, the key held until the record's deadline
//! ([`Idempotency::run_record`]; its errors become the right [`RecordError`] with `?`). A
//! `tower::Service` is wrapped by [`IdempotencyLayer`] instead. A run whose result cannot be
//! stored also prints the EMF count `IdempotencyResultNotStored` (alarm on it).
//!
//! [`RecordError`]: crate::processor::RecordError

mod key;
mod layer;
mod records;

use std::ops::Deref;

#[doc(no_inline)]
pub use dynamodb_exactly_once::idempotency::{
    AttributeNames, Call, Claim, ClaimRequest, Completion, DynamoDbPersistence,
    DynamoDbPersistenceBuilder, IdempotencyConfig, IdempotencyConfigBuilder, IdempotencyError,
    IdempotencyStats, InMemory, KeySourceError, MissingKey, NoValue, PayloadCheck, Persistence,
    RecordFormat, Run, Status, StoredRecord, DISABLED_ENV, MAX_ITEM_BYTES, MAX_KEY_BYTES,
};
pub use key::{KeyExpression, KeyFn, KeySource};
pub use layer::{IdempotencyLayer, IdempotentService, RequestKey};

/// The EMF metric of a result not stored.
pub(crate) const RESULT_NOT_STORED_METRIC: &str = "IdempotencyResultNotStored";

/// The library's [`Idempotency`](dynamodb_exactly_once::idempotency::Idempotency) (every
/// method of it through `Deref`: [`call`](dynamodb_exactly_once::idempotency::Idempotency::call),
/// [`stats`](dynamodb_exactly_once::idempotency::Idempotency::stats), ...) with
/// [`run_record`](Idempotency::run_record) for processor records, and the EMF count
/// `IdempotencyResultNotStored` printed when a result is not stored.
#[derive(Debug)]
pub struct Idempotency<P>(dynamodb_exactly_once::idempotency::Idempotency<P>);

impl<P: Persistence> Idempotency<P> {
    /// The layer over `persistence`.
    pub fn new(persistence: P, config: IdempotencyConfig) -> Self {
        Idempotency(
            dynamodb_exactly_once::idempotency::Idempotency::new(persistence, config)
                .on_result_not_stored(emit_result_not_stored),
        )
    }
}

impl<P> Deref for Idempotency<P> {
    type Target = dynamodb_exactly_once::idempotency::Idempotency<P>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

fn emit_result_not_stored() {
    crate::metrics::emit("idempotency", &[(RESULT_NOT_STORED_METRIC.into(), 1.0)]);
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod boundary_tests;

#[cfg(test)]
mod hole_tests;

#[cfg(test)]
mod small_hole_tests;

/// `docs/idempotency.md`, whose Rust snippets are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../../docs/idempotency.md")]
pub struct IdempotencyDoc;
