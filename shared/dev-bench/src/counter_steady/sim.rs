//! The simulated clock the designs run on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dynamodb_exactly_once::Clock;

/// A simulated clock (epoch ms): set by the driver, or running with the wall clock from a
/// simulated instant (a roll-up runs in real time from its scheduled start).
#[derive(Clone, Default)]
pub struct SimClock {
    ms: Arc<AtomicU64>,
    running_since: Arc<Mutex<Option<Instant>>>,
}

impl SimClock {
    /// A clock reading `ms`.
    pub fn at(ms: u64) -> Self {
        let clock = SimClock::default();
        clock.set(ms);
        clock
    }

    /// Stop at `ms`.
    pub fn set(&self, ms: u64) {
        *self.running_since.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.ms.store(ms, Ordering::SeqCst);
    }

    /// Run with the wall clock from `ms`.
    pub fn run_from(&self, ms: u64) {
        self.ms.store(ms, Ordering::SeqCst);
        *self.running_since.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Now (ms).
    pub fn now_ms(&self) -> u64 {
        let base = self.ms.load(Ordering::SeqCst);
        let since = *self.running_since.lock().unwrap_or_else(|p| p.into_inner());
        base + since.map_or(0, |s| s.elapsed().as_millis() as u64)
    }

    /// The library's clock reading this one.
    pub fn clock(&self) -> Clock {
        let me = self.clone();
        Clock::from_fn(move || me.now_ms())
    }
}
