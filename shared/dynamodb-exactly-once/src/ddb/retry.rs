//! The one backoff policy: callers say *what* is retried, this module owns *how long to wait*
//! (exponential backoff with full jitter, a ceiling per wait, a bounded number of tries),
//! through the `backon` crate. [`Backoff::delays`] gives the waits to loops that keep their
//! own state (a batch whose unprocessed part shrinks, a lock that is waited on, a guarded
//! write that re-reads).

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// A backoff policy: the first wait, the longest wait and how many retries.
#[non_exhaustive]
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
}
