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

/// A seeded fault plan for randomized checkers ([`super::Mapping::set_faults`]): each
/// invocation, with `percent` % probability, meets one fault drawn evenly from: killed at
/// an await (the k-th `Pending`, k drawn from 0 to `max_polls`), response lost, delivered
/// twice. The same seed gives the same faults for the same sequence of invocations.
pub fn seeded_faults(
    seed: u64,
    percent: u32,
    max_polls: u32,
) -> impl FnMut(&InvocationInfo) -> Fault + Send + 'static {
    let mut state = seed;
    move |_info: &InvocationInfo| {
        let mut next = || {
            // splitmix64
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        if next() % 100 >= u64::from(percent) {
            return Fault::None;
        }
        match next() % 3 {
            0 => Fault::KillAfterPolls((next() % (u64::from(max_polls) + 1)) as u32),
            1 => Fault::LoseResponse,
            _ => Fault::Duplicate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> InvocationInfo {
        InvocationInfo {
            n: 0,
            shard_id: "s".into(),
            lane: 0,
            records: 1,
            attempt: 0,
            final_for_window: false,
        }
    }

    #[test]
    fn a_seeded_plan_repeats_and_respects_its_rate() {
        let draw = |seed| {
            let mut plan = seeded_faults(seed, 30, 4);
            (0..1000).map(|_| plan(&info())).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let faults = draw(7).iter().filter(|f| **f != Fault::None).count();
        assert!((200..400).contains(&faults), "{faults} of 1000 at 30 %");
        assert!(draw(7).iter().all(|f| match f {
            Fault::KillAfterPolls(k) => *k <= 4,
            _ => true,
        }));
    }

    #[tokio::test]
    async fn a_kill_drops_the_future_at_its_kth_await() {
        let steps = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let s = std::sync::Arc::clone(&steps);
        let h = move |_: Value| {
            let s = std::sync::Arc::clone(&s);
            async move {
                for _ in 0..5 {
                    s.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
                Ok::<_, String>(Value::Null)
            }
        };
        let ended = run(&h, Value::Null, Fault::KillAfterPolls(2)).await;
        assert_eq!(ended, Ended::Failed("killed".into()));
        assert_eq!(steps.load(std::sync::atomic::Ordering::SeqCst), 2);
        let ended = run(&h, Value::Null, Fault::KillAfterPolls(100)).await;
        assert_eq!(ended, Ended::Answered(Value::Null));
    }
}
