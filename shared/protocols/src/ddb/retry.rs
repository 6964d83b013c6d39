//! The one retry helper: callers say *what* is retryable, this module owns *how* (exponential
//! backoff with full jitter, a ceiling per wait, a bounded number of tries), through the
//! `backon` crate.
//!
//! * [`retry`] runs an operation again while a predicate approves its error.
//! * [`Backoff::delays`] gives the same delays to loops that keep their own state (a batch
//!   whose unprocessed part shrinks, a lock that is waited on).

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder, Retryable};

/// A backoff policy: the first wait, the longest wait and how many retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first wait (before jitter).
    pub first: Duration,
    /// The longest single wait.
    pub max: Duration,
    /// Retries after the first try.
    pub retries: usize,
}

impl Backoff {
    /// A policy.
    pub const fn new(first: Duration, max: Duration, retries: usize) -> Self {
        Backoff {
            first,
            max,
            retries,
        }
    }

    fn builder(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(self.first)
            .with_max_delay(self.max)
            .with_max_times(self.retries)
            .with_jitter()
    }

    /// The waits between tries (at most `retries` of them), jittered.
    pub fn delays(&self) -> impl Iterator<Item = Duration> + Send {
        self.builder().build()
    }
}

/// Run `op` until it succeeds, its error is not approved by `when`, or the policy's retries
/// are spent (then the last error is returned).
pub async fn retry<T, E, F, Fut>(
    policy: Backoff,
    op: F,
    when: impl FnMut(&E) -> bool,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    op.retry(policy.builder())
        .sleep(tokio::time::sleep)
        .when(when)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_bounded_in_number_and_size() {
        let policy = Backoff::new(Duration::from_millis(5), Duration::from_millis(40), 6);
        let delays: Vec<Duration> = policy.delays().collect();
        assert_eq!(delays.len(), 6);
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(80)));
    }

    #[tokio::test]
    async fn retries_only_what_the_predicate_approves() {
        let policy = Backoff::new(Duration::from_millis(1), Duration::from_millis(2), 3);
        let mut tries = 0;
        let result: Result<(), &str> = retry(
            policy,
            || {
                tries += 1;
                async { Err("transient") }
            },
            |e| *e == "transient",
        )
        .await;
        assert!(result.is_err());
        assert_eq!(tries, 4);
        let mut tries = 0;
        let _: Result<(), &str> = retry(
            policy,
            || {
                tries += 1;
                async { Err("fatal") }
            },
            |e| *e == "transient",
        )
        .await;
        assert_eq!(tries, 1);
    }
}
