//! The one clock of the library: epoch milliseconds, injectable so that tests can move time.

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in epoch milliseconds.
///
/// ```
/// use dynamodb_exactly_once::Clock;
/// let fixed = Clock::from_fn(|| 1_700_000_000_000);
/// assert_eq!(fixed.now_secs(), 1_700_000_000);
/// assert!(Clock::system().now_ms() > 1_700_000_000_000);
/// ```
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Clock(Arc::new(epoch_millis))
    }

    /// A clock reading `now_ms` (tests move time with it).
    pub fn from_fn(now_ms: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        Clock(Arc::new(now_ms))
    }

    /// Epoch milliseconds.
    pub fn now_ms(&self) -> u64 {
        (self.0)()
    }

    /// Whole epoch seconds.
    pub fn now_secs(&self) -> u64 {
        self.now_ms() / 1000
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Clock({} ms)", self.now_ms())
    }
}

/// The system time in epoch milliseconds (0 before 1970).
pub fn epoch_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The system time in whole epoch seconds.
pub fn epoch_seconds() -> u64 {
    epoch_millis() / 1000
}
