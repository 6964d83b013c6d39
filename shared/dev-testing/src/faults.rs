//! Faults injected through an SDK interceptor around the real client: a request refused
//! before it reaches DynamoDB, a response lost after DynamoDB applied the request, or a
//! `TransactionConflictException` (which DynamoDB Local never raises for a plain write).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeSerializationInterceptorContextRef,
    BeforeTransmitInterceptorContextMut,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{Storable, StoreReplace};

/// What happens to one request attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Sent normally.
    None,
    /// Never reaches DynamoDB: a connection failure (transient, not applied).
    Refuse,
    /// Reaches DynamoDB and is applied, but the response is replaced by a 500.
    LoseResponse,
    /// Not applied, answered with a 400 `TransactionConflictException`: what DynamoDB answers
    /// a plain write on an item that an in-flight `TransactWriteItems` holds. (The request is
    /// sent with an empty body, which DynamoDB refuses without applying anything; its answer
    /// is then replaced.)
    TransactionConflict,
    /// Not applied, answered with a 400 `TransactionCanceledException` whose cancellation
    /// reason is `TransactionConflict`: what DynamoDB answers a `TransactWriteItems` that met
    /// another transaction (or a plain write) on one of its items.
    TransactionCanceledByConflict,
    /// Not applied, answered with a 400 `TransactionCanceledException` whose cancellation
    /// reason is `ThrottlingError`: what DynamoDB answers a `TransactWriteItems` one of whose
    /// items is throttled (the SDK does not retry it).
    TransactionCanceledByThrottling,
    /// Not applied, answered with a 400 `ProvisionedThroughputExceededException`: what
    /// DynamoDB answers a request on a throttled partition (the SDK retries it with backoff).
    Throttle,
    /// Sent without `ReturnValuesOnConditionCheckFailure` (the request is rewritten): DynamoDB
    /// answers a failed condition without the item, as it may leave `ALL_OLD` out of a
    /// cancellation reason. Applied or not as DynamoDB decides.
    WithoutOldItems,
}

/// DynamoDB's answer to a plain write on an item an in-flight transaction holds.
pub(crate) const TRANSACTION_CONFLICT: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"injected: Transaction is ongoing for the item"}"#;
/// DynamoDB's answer to a `TransactWriteItems` that met another write on one of its items.
pub(crate) const TRANSACTION_CANCELED_BY_CONFLICT: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","message":"injected: Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict]","CancellationReasons":[{"Code":"TransactionConflict","Message":"Transaction is ongoing for the item"}]}"#;

/// DynamoDB's answer to a `TransactWriteItems` one of whose items was throttled.
pub(crate) const TRANSACTION_CANCELED_BY_THROTTLING: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","message":"injected: Transaction cancelled, please refer cancellation reasons for specific reasons [ThrottlingError]","CancellationReasons":[{"Code":"ThrottlingError","Message":"Throughput exceeds the current capacity for one or more global secondary indexes"}]}"#;
/// DynamoDB's answer to a request on a throttled partition.
pub(crate) const THROTTLED: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"injected: The level of configured provisioned throughput for the table was exceeded"}"#;

/// DynamoDB's answer as the SDK sees it when the response to an applied request was lost.
pub(crate) const LOST_RESPONSE: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected: the response was lost after the request was applied"}"#;

/// The operation (from `X-Amz-Target`, e.g. `PutItem`) and the JSON body of a request.
pub(crate) fn operation_and_body(request: &HttpRequest) -> (String, String) {
    let operation = request
        .headers()
        .get("x-amz-target")
        .and_then(|t| t.rsplit('.').next())
        .unwrap_or("Unknown")
        .to_string();
    let body = request
        .body()
        .bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    (operation, body)
}

/// Empty the request's body: DynamoDB refuses it without applying anything (its answer is
/// then replaced).
pub(crate) fn send_unapplied(request: &mut HttpRequest) {
    *request.body_mut() = SdkBody::from("{}");
    request.headers_mut().insert("content-length", "2");
}

/// Replace the response with `status` and `body`.
pub(crate) fn answer(
    response: &mut HttpResponse,
    status: u16,
    body: &'static str,
) -> Result<(), BoxError> {
    *response.status_mut() = StatusCode::try_from(status)?;
    *response.body_mut() = SdkBody::from(body);
    response.headers_mut().remove("content-length");
    Ok(())
}

#[derive(Debug, Clone, Copy)]
struct Decided(Fault);
impl Storable for Decided {
    type Storer = StoreReplace<Self>;
}

/// The round trip an attempt is on (see [`FaultInjector::round_trips`]).
#[derive(Debug, Clone, Copy)]
struct Depth(usize);
impl Storable for Depth {
    type Storer = StoreReplace<Self>;
}

/// Decides one attempt from its index, its operation and its JSON request body.
type Plan = dyn Fn(usize, &str, &str) -> Fault + Send + Sync;

/// An SDK interceptor that counts calls by operation and injects faults by plan.
#[derive(Clone)]
pub struct FaultInjector {
    plan: Arc<Plan>,
    calls: Arc<AtomicUsize>,
    by_operation: Arc<Mutex<BTreeMap<String, usize>>>,
    injected: Arc<AtomicUsize>,
    /// The deepest round trip answered so far.
    answered_depth: Arc<AtomicUsize>,
}

impl std::fmt::Debug for FaultInjector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultInjector")
            .field("calls", &self.calls())
            .field(
                "by_operation",
                &self.by_operation.lock().map(|m| m.clone()).ok(),
            )
            .field("round_trips", &self.round_trips())
            .finish()
    }
}

impl FaultInjector {
    /// Decide each attempt with `plan(attempt_index, operation)` (index from 0, operation like
    /// `PutItem`).
    pub fn new(plan: impl Fn(usize, &str) -> Fault + Send + Sync + 'static) -> Self {
        Self::with_plan(Arc::new(move |i, op, _body| plan(i, op)))
    }

    /// Decide each attempt with `plan(operation, body)`, the body being the request's JSON
    /// (e.g. fault every request that names one item or one transaction id, whatever the
    /// order in which concurrent records reach DynamoDB).
    pub fn by_request(plan: impl Fn(&str, &str) -> Fault + Send + Sync + 'static) -> Self {
        Self::with_plan(Arc::new(move |_, op, body| plan(op, body)))
    }

    fn with_plan(plan: Arc<Plan>) -> Self {
        FaultInjector {
            plan,
            calls: Arc::default(),
            by_operation: Arc::default(),
            injected: Arc::default(),
            answered_depth: Arc::default(),
        }
    }

    /// Only count calls.
    pub fn counting() -> Self {
        Self::new(|_, _| Fault::None)
    }

    /// Refuse every attempt from index `k` on (a coordinator that dies after `k` calls).
    pub fn fail_from(k: usize) -> Self {
        Self::new(move |i, _| if i >= k { Fault::Refuse } else { Fault::None })
    }

    /// Attempts seen so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Attempts of one operation seen so far.
    pub fn calls_of(&self, operation: &str) -> usize {
        self.by_operation
            .lock()
            .map(|m| m.get(operation).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// Round trips so far: the longest chain of operations each started after the previous one
    /// was answered. An operation started while the deepest answered one is on round trip `d`
    /// is on `d + 1`, so concurrent operations share a round trip and a window of `k` in
    /// flight that refills as answers come counts as the waves it takes. (What the wall time
    /// is at least, in round-trip latencies, whatever DynamoDB's speed; an SDK retry stays in
    /// its operation's round trip.)
    pub fn round_trips(&self) -> usize {
        self.answered_depth.load(Ordering::SeqCst)
    }

    /// Start counting calls by operation and round trips again (e.g. after a warm-up).
    /// [`FaultInjector::calls`] goes on: it is the index plans decide by.
    pub fn reset_counts(&self) {
        if let Ok(mut m) = self.by_operation.lock() {
            m.clear();
        }
        self.answered_depth.store(0, Ordering::SeqCst);
    }

    /// Faults injected so far.
    pub fn injected(&self) -> usize {
        self.injected.load(Ordering::SeqCst)
    }
}

impl Intercept for FaultInjector {
    fn name(&self) -> &'static str {
        "FaultInjector"
    }

    fn read_before_execution(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // Dated when the operation starts (before serialization and signing, which take CPU
        // time per request): the answers of a burst's first requests do not date its last.
        let depth = self.answered_depth.load(Ordering::SeqCst) + 1;
        cfg.interceptor_state().store_put(Depth(depth));
        Ok(())
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let (operation, body) = operation_and_body(request);
        let index = self.calls.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut m) = self.by_operation.lock() {
            *m.entry(operation.clone()).or_default() += 1;
        }
        let fault = (self.plan)(index, &operation, &body);
        if fault != Fault::None {
            self.injected.fetch_add(1, Ordering::SeqCst);
        }
        if fault == Fault::Refuse {
            // Port 1 on loopback: nothing listens, the connection is refused at once.
            request.set_uri("http://127.0.0.1:1/")?;
        }
        if fault == Fault::WithoutOldItems {
            let stripped = body
                .replace(r#","ReturnValuesOnConditionCheckFailure":"ALL_OLD""#, "")
                .replace(r#""ReturnValuesOnConditionCheckFailure":"ALL_OLD","#, "");
            let length = stripped.len().to_string();
            *request.body_mut() = SdkBody::from(stripped);
            request.headers_mut().insert("content-length", length);
        }
        if matches!(
            fault,
            Fault::TransactionConflict
                | Fault::TransactionCanceledByConflict
                | Fault::TransactionCanceledByThrottling
                | Fault::Throttle
        ) {
            send_unapplied(request);
        }
        cfg.interceptor_state().store_put(Decided(fault));
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(Depth(depth)) = cfg.load::<Depth>() {
            self.answered_depth.fetch_max(*depth, Ordering::SeqCst);
        }
        match cfg.load::<Decided>() {
            Some(Decided(Fault::LoseResponse)) => {
                answer(context.response_mut(), 500, LOST_RESPONSE)
            }
            Some(Decided(Fault::TransactionConflict)) => {
                answer(context.response_mut(), 400, TRANSACTION_CONFLICT)
            }
            Some(Decided(Fault::Throttle)) => answer(context.response_mut(), 400, THROTTLED),
            Some(Decided(Fault::TransactionCanceledByConflict)) => answer(
                context.response_mut(),
                400,
                TRANSACTION_CANCELED_BY_CONFLICT,
            ),
            Some(Decided(Fault::TransactionCanceledByThrottling)) => answer(
                context.response_mut(),
                400,
                TRANSACTION_CANCELED_BY_THROTTLING,
            ),
            _ => Ok(()),
        }
    }
}
