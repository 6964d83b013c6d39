//! The layer as a `tower::Layer`: [`IdempotencyLayer`] wraps any `Service<Req>` whose
//! requests give a key and a payload ([`RequestKey`]), and answers a duplicate with the
//! stored response without calling it.
//!
//! ```no_run
//! use std::sync::Arc;
//! use dynamodb_exactly_once_lambda::idempotency::{
//!     DynamoDbPersistence, Idempotency, IdempotencyConfig, IdempotencyLayer, KeySource,
//! };
//! use dynamodb_exactly_once_lambda::processor::{Processor, Record, RecordError};
//! use lambda_runtime::service_fn;
//! use tower_layer::Layer;
//!
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let config = IdempotencyConfig::builder("payments").build()?;
//! let idempotency = Arc::new(Idempotency::new(DynamoDbPersistence::new(client, "Idempotency"), config));
//! let charge = service_fn(|record: Record<serde_json::Value>| async move {
//!     Ok::<_, RecordError>(format!("receipt for {}", record.body["orderId"]))
//! });
//! let layer = IdempotencyLayer::new(idempotency, "charge", KeySource::pointer("/orderId")?);
//! let processor = Processor::service_builder("payments", layer.layer(charge)).build()?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tower_layer::Layer;
use tower_service::Service;

use dynamodb_exactly_once::idempotency::RecordKey;

use super::key::KeySource;
use super::{Idempotency, IdempotencyError, KeySourceError, MissingKey, NoValue, Persistence, Run};
use crate::processor::Record;

/// How a request names its run: the key, the payload the key stands for (hashed and compared
/// across deliveries), and until when a run of it may still go on.
pub trait RequestKey<Req>: Send + Sync {
    /// The request's idempotency key.
    fn key(&self, request: &Req) -> Result<String, KeySourceError>;

    /// The key as the JSON value it was read from: Powertools' format hashes the value, so a
    /// number `5` and a string `"5"` are two keys there (and one in the native format, whose
    /// key is the text: a string as it is, anything else its canonical JSON). Default: the
    /// [`key`](Self::key) as a string.
    fn key_json(&self, request: &Req) -> Result<Value, KeySourceError> {
        self.key(request).map(Value::String)
    }

    /// What the key stands for: another payload under the same key is
    /// [`IdempotencyError::PayloadMismatch`].
    fn payload(&self, request: &Req) -> Value;

    /// Epoch ms until which a run of `request` holds its key (`None`: the configuration's
    /// `in_progress_expiry`).
    fn deadline_ms(&self, _request: &Req) -> Option<u64> {
        None
    }

    /// Whether a request whose key another run holds waits for that run, when its claim ends
    /// before this request's deadline (as [`Idempotency::run_record`] does), instead of
    /// failing at once with [`IdempotencyError::InProgress`]. Default: `false`.
    fn wait_for_holder(&self) -> bool {
        false
    }
}

/// A processor record: the key as the [`KeySource`] says, the payload its body as
/// delivered, held until the record's deadline.
impl<T> RequestKey<Record<T>> for KeySource<T> {
    fn key(&self, record: &Record<T>) -> Result<String, KeySourceError> {
        self.key_of(record)
    }

    fn key_json(&self, record: &Record<T>) -> Result<Value, KeySourceError> {
        self.key_json_of(record)
    }

    fn payload(&self, record: &Record<T>) -> Value {
        serde_json::from_slice(&record.raw)
            .unwrap_or_else(|_| Value::String(hex::encode(&record.raw)))
    }

    fn deadline_ms(&self, record: &Record<T>) -> Option<u64> {
        record.deadline_ms()
    }

    fn wait_for_holder(&self) -> bool {
        true
    }
}

/// Wraps services in [`IdempotentService`]: each key runs the inner service once, and its
/// response (serde) answers every duplicate until it expires.
#[derive(Debug)]
pub struct IdempotencyLayer<P, K> {
    idempotency: Arc<Idempotency<P>>,
    operation: Arc<str>,
    keys: Arc<K>,
}

impl<P, K> Clone for IdempotencyLayer<P, K> {
    fn clone(&self) -> Self {
        IdempotencyLayer {
            idempotency: Arc::clone(&self.idempotency),
            operation: Arc::clone(&self.operation),
            keys: Arc::clone(&self.keys),
        }
    }
}

impl<P, K> IdempotencyLayer<P, K> {
    /// The layer over `idempotency` for `operation` (the service's effect, part of every
    /// key), requests keyed by `keys` (a [`KeySource`] for processor records).
    pub fn new(idempotency: Arc<Idempotency<P>>, operation: impl Into<Arc<str>>, keys: K) -> Self {
        IdempotencyLayer {
            idempotency,
            operation: operation.into(),
            keys: Arc::new(keys),
        }
    }
}

impl<S, P, K> Layer<S> for IdempotencyLayer<P, K> {
    type Service = IdempotentService<S, P, K>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotentService {
            inner,
            idempotency: Arc::clone(&self.idempotency),
            operation: Arc::clone(&self.operation),
            keys: Arc::clone(&self.keys),
        }
    }
}

/// A service run once per key (see [`IdempotencyLayer`]). Its errors are
/// [`IdempotencyError`]s, the inner service's own as [`IdempotencyError::Handler`]; they
/// convert into a [`RecordError`](crate::processor::RecordError) when the inner error does.
#[derive(Debug)]
pub struct IdempotentService<S, P, K> {
    inner: S,
    idempotency: Arc<Idempotency<P>>,
    operation: Arc<str>,
    keys: Arc<K>,
}

impl<S: Clone, P, K> Clone for IdempotentService<S, P, K> {
    fn clone(&self) -> Self {
        IdempotentService {
            inner: self.inner.clone(),
            idempotency: Arc::clone(&self.idempotency),
            operation: Arc::clone(&self.operation),
            keys: Arc::clone(&self.keys),
        }
    }
}

/// The future of an [`IdempotentService`] call.
pub(crate) type IdempotentFuture<R, E> =
    Pin<Box<dyn Future<Output = Result<R, IdempotencyError<E>>> + Send>>;

impl<S, P, K, Req> Service<Req> for IdempotentService<S, P, K>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Response: Serialize + DeserializeOwned + Send + 'static,
    S::Error: Send + 'static,
    S::Future: Send + 'static,
    P: Persistence + 'static,
    K: RequestKey<Req> + 'static,
    Req: Send + 'static,
{
    type Response = S::Response;
    type Error = IdempotencyError<S::Error>;
    type Future = IdempotentFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(IdempotencyError::Handler)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        // The service made ready is the one called; the clone stays for the next request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let idempotency = Arc::clone(&self.idempotency);
        let keys = Arc::clone(&self.keys);
        let operation = Arc::clone(&self.operation);
        Box::pin(async move {
            if !idempotency.config().enabled() {
                let run = idempotency
                    .run_disabled(move || inner.call(request))
                    .await?;
                return response(run, String::new());
            }
            let key = match keys.key_json(&request) {
                Ok(json) => RecordKey::of(json),
                Err(e) if idempotency.config().on_missing_key() == MissingKey::Run => {
                    tracing::warn!(operation = %operation, error = %e, "no idempotency key: the service is called without idempotency");
                    return inner.call(request).await.map_err(IdempotencyError::Handler);
                }
                Err(e) => return Err(IdempotencyError::Key(e)),
            };
            let payload = keys.payload(&request);
            let deadline_ms = keys.deadline_ms(&request);
            let run = idempotency
                .run_keyed(
                    &operation,
                    &key,
                    &payload,
                    deadline_ms,
                    keys.wait_for_holder(),
                    move || inner.call(request),
                )
                .await?;
            response(run, key.text)
        })
    }
}

/// The inner service's response a run gives, or why there is none.
fn response<R, E>(run: Run<R>, key: String) -> Result<R, IdempotencyError<E>> {
    match run {
        Run::Replayed(response) => {
            tracing::debug!(key, "duplicate answered with the stored response");
            Ok(response)
        }
        // No response to answer with: the key's service call completed earlier.
        Run::ReplayedWithoutValue(why) => Err(IdempotencyError::Completed { key, why }),
        run => run.value().ok_or(IdempotencyError::Completed {
            key,
            why: NoValue::NotKept,
        }),
    }
}

#[cfg(test)]
#[path = "layer_tests.rs"]
mod tests;
