//! The function the mapping invokes (Lambda's contract: a JSON event in, a JSON response or a
//! function error out), and the faults a test can ask for per invocation.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

/// A Lambda function as the mapping sees it: `invoke` gets the event exactly as Lambda sends
/// it (`{"Records": [...]}`, plus the window fields with a tumbling window) and answers the
/// function's response (`{"batchItemFailures": [...]}`, `{"state": {...}, ...}`, or `null`),
/// or `Err` for a function error (an unhandled error, a crash).
///
/// Implemented for every `Fn(Value) -> impl Future<Output = Result<Value, String>>`.
pub trait Handler: Send + Sync {
    /// One invocation. The mapping may drop the future at any await (a killed or timed-out
    /// invocation): whatever it wrote stays written.
    fn invoke(&self, payload: Value) -> BoxFuture<'static, Result<Value, String>>;
}

impl<F, Fut> Handler for F
where
    F: Fn(Value) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Value, String>> + Send + 'static,
{
    fn invoke(&self, payload: Value) -> BoxFuture<'static, Result<Value, String>> {
        Box::pin(self(payload))
    }
}

/// What happens to one invocation (chosen by the mapping's fault plan, [`super::Mapping::set_faults`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Fault {
    /// Runs to its end; its response counts.
    #[default]
    None,
    /// The invocation is killed once its future has returned `Pending` this many times (0:
    /// before it starts): a crash or an environment recycled at an await. Counts as a function
    /// error. A future that finishes first is not killed.
    KillAfterPolls(u32),
    /// The function times out after this much real time: its future is dropped; a function
    /// error.
    Timeout(Duration),
    /// The function finishes, but its response is lost (the invoke call failed on the way
    /// back): the mapping retries the batch as after a function error.
    LoseResponse,
    /// The same batch is delivered twice in a row (at-least-once delivery); the second
    /// response counts.
    Duplicate,
}

/// What the fault plan is told about an invocation before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvocationInfo {
    /// The mapping's invocation counter (0-based, over every shard).
    pub n: u64,
    /// The shard of the batch.
    pub shard_id: String,
    /// The lane within the shard (`ParallelizationFactor`; 0 without).
    pub lane: usize,
    /// Records in the batch (0: a window's final invoke with none).
    pub records: usize,
    /// Earlier failed invocations of these records.
    pub attempt: u32,
    /// A tumbling window's final invoke.
    pub final_for_window: bool,
}

/// How an invocation ended, before the mapping reads the response.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ended {
    /// The function answered.
    Answered(Value),
    /// A function error, a kill, a timeout or a lost response (its reason).
    Failed(String),
}

/// Run `handler` on `payload` under `fault`.
pub(crate) async fn run<H: Handler + ?Sized>(handler: &H, payload: Value, fault: Fault) -> Ended {
    let once = |p: Value| async move {
        match handler.invoke(p).await {
            Ok(v) => Ended::Answered(v),
            Err(e) => Ended::Failed(format!("function error: {e}")),
        }
    };
    match fault {
        Fault::None => once(payload).await,
        Fault::Duplicate => {
            let _first = once(payload.clone()).await;
            once(payload).await
        }
        Fault::LoseResponse => match once(payload).await {
            Ended::Answered(_) => Ended::Failed("response lost".into()),
            failed => failed,
        },
        Fault::Timeout(d) => match tokio::time::timeout(d, handler.invoke(payload)).await {
            Ok(Ok(v)) => Ended::Answered(v),
            Ok(Err(e)) => Ended::Failed(format!("function error: {e}")),
            Err(_) => Ended::Failed("timed out".into()),
        },
        Fault::KillAfterPolls(k) => match (KillAt {
            inner: handler.invoke(payload),
            pending_left: k,
        })
        .await
        {
            Some(Ok(v)) => Ended::Answered(v),
            Some(Err(e)) => Ended::Failed(format!("function error: {e}")),
            None => Ended::Failed("killed".into()),
        },
    }
}

/// Polls `inner` until it has returned `Pending` `pending_left` times, then drops it
/// (`None`).
struct KillAt<F> {
    inner: F,
    pending_left: u32,
}

impl<F: Future + Unpin> Future for KillAt<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.pending_left == 0 {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll(cx) {
            Poll::Ready(v) => Poll::Ready(Some(v)),
            Poll::Pending => {
                self.pending_left -= 1;
                if self.pending_left == 0 {
                    // Woken again at once so that the kill happens now, not at the next event.
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
        }
    }
}
