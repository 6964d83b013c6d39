//! Plain writes refused by a transaction in flight are retried by the SDK, without spending
//! its retry quota.
//!
//! DynamoDB refuses a `PutItem`, `UpdateItem` or `DeleteItem` on an item that an in-flight
//! `TransactWriteItems` holds with `TransactionConflictException`, *without applying it*. The
//! SDK's standard retry does not retry that code (it is neither throttling nor transient to
//! it), so one collision would fail the write. Since the write was not applied, sending it
//! again is always safe, whatever its condition: [`retrying_conflicts`] gives a client whose
//! retry policy (the caller's own: attempts, backoff) also covers this code. Every protocol
//! handle (`new`) but the transaction coordinator wraps its client with it: their items may
//! take part in transactions (this project's, or the application's own `TransactWriteItems`).
//!
//! **The retry quota.** The SDK's standard retry takes tokens from a bucket shared by every
//! client of the process in one retry partition (500 tokens; 10 per transient retry, 5 per
//! throttling retry; a retry's tokens are forgotten when another retry follows it, and come
//! back only one per first-attempt success). Conflicts on a hot TX header (every lock write
//! checks it) would drain it, and then no DynamoDB call of the process is retried, throttling
//! included. An attempt that ends in a conflict is therefore retried on a bucket of its own
//! that costs nothing ([`ConflictsSpendNoQuota`]): bounded by the client's attempts and
//! jittered by its backoff, never by the shared quota, which stays whole for what it is for.
//! Conflict *cancellations* of a `TransactWriteItems` (`TransactionCanceledException` with
//! `TransactionConflict` reasons) are never retried by the SDK: the transaction protocol
//! retries them in its own loops (`txn::fast`, `txn::lock`), outside the quota too; and the
//! coordinator's plain writes are not retried by the SDK on a conflict at all (its waits, up to
//! 1 s then 2 s with the standard settings, would make one write take 3 s per send): they are
//! sent again by [`again_on_conflict`], a short local loop outside the quota that ends at the
//! run's deadline ([`under_deadline`]).

use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::retry::TokenBucket;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::InterceptorContext;
use aws_smithy_runtime_api::client::orchestrator::OrchestratorError;
use aws_smithy_runtime_api::client::retries::classifiers::{ClassifyRetry, RetryAction};
use aws_smithy_types::config_bag::{Storable, StoreReplace};

use crate::ddb::retry::Backoff;

/// Sends of a plain write the coordinator makes again after a conflict: 5 ms doubling up to
/// 100 ms, each jittered up to twice that, 16 times: 1.3–2.5 s of waits at most, and never
/// past the run's deadline (17 sends, each one SDK attempt for a conflict).
const CONFLICT_AGAIN: Backoff =
    Backoff::new(Duration::from_millis(5), Duration::from_millis(100), 16);

/// Whether a run's deadline has expired (the run's `Deadline::expired`; the module keeps no
/// dependency on `batch`, which depends on it).
pub(crate) type Expired = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

tokio::task_local! {
    /// The deadline of the run (a coordinator's message, a sweeper's drive) whose writes are
    /// being sent: [`again_on_conflict`] sends nothing again once it has expired.
    static RUN_DEADLINE: Expired;
}

/// Run `work` (a coordinator's run, a sweeper's drive) with `expired` (its deadline's) as the
/// bound of every [`again_on_conflict`] loop inside it.
pub(crate) async fn under_deadline<F: Future>(expired: Expired, work: F) -> F::Output {
    RUN_DEADLINE.scope(expired, work).await
}

/// Whether the deadline of the run in progress (if any) has expired.
pub(crate) fn run_deadline_expired() -> bool {
    RUN_DEADLINE.try_with(|expired| expired()).unwrap_or(false)
}

/// Send a plain write (`send` builds and sends it) again while DynamoDB refuses it with
/// `TransactionConflictException`: a short, jittered, bounded local loop ([`CONFLICT_AGAIN`])
/// that touches no retry quota and sends nothing once the run's deadline has expired
/// ([`under_deadline`]; the run then ends `Deferred`). Used by the transaction coordinator,
/// whose header every lock write checks (a hot item for conflicts); the last answer is
/// returned as it is.
pub(crate) async fn again_on_conflict<T, E, R, F, Fut>(send: F) -> Result<T, SdkError<E, R>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
    E: ProvideErrorMetadata,
{
    again_on_conflict_alive(send, || async {}).await
}

/// [`again_on_conflict`], calling `keep_alive` before each send again (a pending attempt's
/// heartbeat: a holder whose commit meets conflicts is not silent to its contenders).
pub(crate) async fn again_on_conflict_alive<T, E, R, F, Fut, K, KFut>(
    mut send: F,
    mut keep_alive: K,
) -> Result<T, SdkError<E, R>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
    E: ProvideErrorMetadata,
    K: FnMut() -> KFut,
    KFut: Future<Output = ()>,
{
    let mut waits = CONFLICT_AGAIN.delays();
    loop {
        let result = send().await;
        let conflict = match &result {
            Err(e) => e.code() == Some("TransactionConflictException"),
            Ok(_) => false,
        };
        match (conflict, waits.next()) {
            (true, Some(wait)) if !run_deadline_expired() => {
                tokio::time::sleep(wait).await;
                if run_deadline_expired() {
                    return result;
                }
                keep_alive().await;
            }
            _ => return result,
        }
    }
}

/// The same client, its retries also covering `TransactionConflictException` on plain
/// writes, without spending the retry quota on them.
pub(crate) fn retrying_conflicts(client: Client) -> Client {
    let config = client
        .config()
        .to_builder()
        .retry_classifier(TransactionConflictIsTransient)
        .interceptor(ConflictsSpendNoQuota)
        .build();
    Client::from_conf(config)
}

/// Whether an attempt's error is a `TransactionConflictException` of a plain write.
fn is_conflict(error: &aws_smithy_runtime_api::client::interceptors::context::Error) -> bool {
    error
        .downcast_ref::<UpdateItemError>()
        .is_some_and(UpdateItemError::is_transaction_conflict_exception)
        || error
            .downcast_ref::<PutItemError>()
            .is_some_and(PutItemError::is_transaction_conflict_exception)
        || error
            .downcast_ref::<DeleteItemError>()
            .is_some_and(DeleteItemError::is_transaction_conflict_exception)
}

/// The operation's own token bucket (its retry partition's), kept while a conflict's attempt
/// uses a free one.
#[derive(Debug, Clone)]
struct PartitionBucket(TokenBucket);

impl Storable for PartitionBucket {
    type Storer = StoreReplace<Self>;
}

/// After each attempt, before the retry strategy decides: an attempt that ended in a
/// `TransactionConflictException` is decided on an unlimited bucket (no token taken, none
/// forgotten); any other attempt on the partition's own bucket, as without this interceptor.
#[derive(Debug)]
struct ConflictsSpendNoQuota;

impl Intercept for ConflictsSpendNoQuota {
    fn name(&self) -> &'static str {
        "ConflictsSpendNoQuota"
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg.load::<PartitionBucket>().is_none() {
            if let Some(bucket) = cfg.load::<TokenBucket>().cloned() {
                cfg.interceptor_state().store_put(PartitionBucket(bucket));
            }
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let conflict = match context.output_or_error() {
            Some(Err(error)) => {
                OrchestratorError::as_operation_error(error).is_some_and(is_conflict)
            }
            _ => false,
        };
        let bucket = match (conflict, cfg.load::<PartitionBucket>()) {
            (true, _) => TokenBucket::unlimited(),
            (false, Some(PartitionBucket(own))) => own.clone(),
            (false, None) => return Ok(()),
        };
        cfg.interceptor_state().store_put(bucket);
        Ok(())
    }
}

/// `TransactionConflictException` on `PutItem`, `UpdateItem`, `DeleteItem`: retry.
#[derive(Debug)]
struct TransactionConflictIsTransient;

impl ClassifyRetry for TransactionConflictIsTransient {
    fn classify_retry(&self, ctx: &InterceptorContext) -> RetryAction {
        let Some(Err(error)) = ctx.output_or_error() else {
            return RetryAction::NoActionIndicated;
        };
        let Some(error) = OrchestratorError::as_operation_error(error) else {
            return RetryAction::NoActionIndicated;
        };
        if is_conflict(error) {
            RetryAction::transient_error()
        } else {
            RetryAction::NoActionIndicated
        }
    }

    fn name(&self) -> &'static str {
        "TransactionConflictIsTransient"
    }
}
