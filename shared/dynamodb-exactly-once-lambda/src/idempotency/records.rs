//! The layer around a processor record: [`Idempotency::run_record`], and the
//! [`RecordError`] a failed run becomes.

use std::future::Future;

use dynamodb_exactly_once::{Rejection, RejectionCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::key::KeySource;
use super::{Idempotency, IdempotencyError, KeySourceError, MissingKey, Persistence, Run};
use crate::processor::{Record, RecordError};

impl<P: Persistence> Idempotency<P> {
    /// Run `function` once for `record` and `operation` (see the module documentation): the
    /// key taken by `keys`, the payload the record's body as delivered (its JSON, or the
    /// part [`IdempotencyConfig::payload_check`](super::IdempotencyConfig::payload_check)
    /// names), the key held in progress until the record's deadline
    /// ([`Record::deadline_ms`]). A record with no usable key is [`IdempotencyError::Key`]
    /// (the function does not run), or runs without idempotency under
    /// [`MissingKey::Run`] ([`Run::NotStored`]). With `?`, every error becomes the right
    /// [`RecordError`] when the function's own error does.
    pub async fn run_record<T, R, E, F, Fut>(
        &self,
        operation: &str,
        keys: &KeySource<T>,
        record: &Record<T>,
        function: F,
    ) -> Result<Run<R>, IdempotencyError<E>>
    where
        R: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        if !self.config().enabled() {
            return self.run_disabled(function).await;
        }
        let body: Option<Value> = serde_json::from_slice(&record.raw).ok();
        let key = match keys.key_with(record, body.as_ref()) {
            Ok(key) => key,
            Err(e) if self.config().on_missing_key() == MissingKey::Run => {
                tracing::warn!(operation, error = %e, "no idempotency key: the function runs without idempotency");
                return function()
                    .await
                    .map(Run::NotStored)
                    .map_err(IdempotencyError::Handler);
            }
            Err(e) => return Err(IdempotencyError::Key(e)),
        };
        let payload = body.unwrap_or_else(|| Value::String(hex::encode(&record.raw)));
        self.run_keyed(
            operation,
            &key,
            &payload,
            record.deadline_ms(),
            true,
            function,
        )
        .await
    }
}

/// A failed run as the processor's answer: in progress is delivered again (it is replayed
/// once the first run completed); a store error by its class; the function's own error as it
/// says; a reused key, a record without a key, or a payload that cannot be serialized can
/// never succeed and are rejected (dead letters). A stored result that cannot be read back
/// is no error: `Run::ReplayedWithoutValue`, acknowledged (the tower layer's
/// [`IdempotencyError::Completed`] is [`RecordError::Completed`], acknowledged too).
impl<E: Into<RecordError>> From<IdempotencyError<E>> for RecordError {
    fn from(err: IdempotencyError<E>) -> Self {
        let reject = |code, message: String| RecordError::Reject(Rejection::new(code, message));
        match err {
            IdempotencyError::Handler(e) => e.into(),
            IdempotencyError::Store(e) => RecordError::from(e),
            IdempotencyError::InProgress { until_ms } => RecordError::retry(format!(
                "another run of this record's idempotency key is in progress (until {until_ms} ms)"
            )),
            IdempotencyError::PayloadMismatch { key } => reject(
                RejectionCode::InvalidIdempotencyKey,
                format!("the idempotency key {key:?} was used before with another payload"),
            ),
            IdempotencyError::Key(
                e @ (KeySourceError::Empty { .. } | KeySourceError::Operation { .. }),
            ) => reject(RejectionCode::InvalidIdempotencyKey, e.to_string()),
            IdempotencyError::Key(e) => reject(RejectionCode::MissingIdempotencyKey, e.to_string()),
            IdempotencyError::Completed { key, why } => RecordError::completed(format!(
                "the key {key:?} completed earlier; its stored response cannot be given ({why:?})"
            )),
            IdempotencyError::Result(e) => reject(
                RejectionCode::RejectedByHandler,
                format!("idempotency payload: {e}"),
            ),
            // An error a newer library names: delivered again rather than lost.
            _ => RecordError::retry("the idempotency layer failed".to_string()),
        }
    }
}
