//! One call's shape: [`Idempotency::call`] with the operation and key, the payload and the
//! deadline chained, then [`Call::run`].

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::key::RecordKey;
use super::{Idempotency, IdempotencyError, Persistence, Run};

impl<P: Persistence> Idempotency<P> {
    /// A call of `operation` for `key`, run once by [`Call::run`] (see the module
    /// documentation). `operation` names the call site (Powertools' function name): two
    /// operations with one key each run once. Defaults: no payload (nothing to compare across
    /// calls), no deadline (the key held [`IdempotencyConfig::in_progress_expiry`]).
    ///
    /// [`IdempotencyConfig::in_progress_expiry`]: super::IdempotencyConfig::in_progress_expiry
    pub fn call<'a>(&'a self, operation: &'a str, key: &'a str) -> Call<'a, P> {
        Call {
            idempotency: self,
            operation,
            key,
            payload: &(),
            deadline_ms: None,
        }
    }
}

/// One idempotent call, built by [`Idempotency::call`]; nothing runs until [`Call::run`].
#[must_use = "a call does nothing until `.run(f)` is awaited"]
pub struct Call<'a, P, S = ()> {
    idempotency: &'a Idempotency<P>,
    operation: &'a str,
    key: &'a str,
    payload: &'a S,
    deadline_ms: Option<u64>,
}

impl<P, S> std::fmt::Debug for Call<'_, P, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("operation", &self.operation)
            .field("key", &self.key)
            .field("deadline_ms", &self.deadline_ms)
            .finish_non_exhaustive()
    }
}

impl<'a, P: Persistence, S: Serialize> Call<'a, P, S> {
    /// What the key stands for: its hash (or the hash of the part
    /// [`IdempotencyConfig::payload_check`](super::IdempotencyConfig::payload_check) names) is
    /// checked across calls, a duplicate with another payload being
    /// [`IdempotencyError::PayloadMismatch`].
    pub fn payload<T: Serialize>(self, payload: &'a T) -> Call<'a, P, T> {
        Call {
            idempotency: self.idempotency,
            operation: self.operation,
            key: self.key,
            payload,
            deadline_ms: self.deadline_ms,
        }
    }

    /// The invocation's deadline (epoch ms, as `lambda_runtime::Context::deadline` gives it),
    /// until which the run holds the key; `None`: none.
    pub fn deadline_ms(mut self, deadline_ms: impl Into<Option<u64>>) -> Self {
        self.deadline_ms = deadline_ms.into();
        self
    }

    /// Run `function` once for this call's operation and key: [`Run::Ran`] when it ran here,
    /// [`Run::Replayed`] with the stored result for a duplicate (see the module
    /// documentation for the others and the errors).
    pub async fn run<T, E, F, Fut>(self, function: F) -> Result<Run<T>, IdempotencyError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let key = RecordKey {
            text: self.key.to_string(),
            json: Value::String(self.key.to_string()),
        };
        self.idempotency
            .run_keyed(
                self.operation,
                &key,
                self.payload,
                self.deadline_ms,
                false,
                function,
            )
            .await
    }
}
