//! What the layer did, counted per process ([`Idempotency::stats`](super::Idempotency::stats)),
//! with a hook called when a run's result could not be stored (the one case in which the
//! layer gives up "once": the Lambda edge prints an EMF count there, to alarm on).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counts since the layer was built.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdempotencyStats {
    /// Runs whose result was stored.
    pub ran: u64,
    /// Duplicates answered with a stored result (from the table or the cache).
    pub replayed: u64,
    /// Duplicates of a completed run whose result could not be given (too large to keep,
    /// or not readable by the caller's type).
    pub replayed_without_value: u64,
    /// Calls refused because another run held the key.
    pub in_progress: u64,
    /// Runs whose result is not the stored one: the completion failed, or was refused (the
    /// key taken over). (Records run without a key under `MissingKey::Run` are only
    /// logged.)
    pub result_not_stored: u64,
    /// Runs that failed or panicked (their key released).
    pub failed: u64,
    /// Runs whose result could not be serialized (recorded as completed without it).
    pub result_not_serialized: u64,
    /// Waits for another run's claim that ends before this record's deadline (one per
    /// sleep; the key is claimed again after each).
    pub waited: u64,
    /// Runs with the layer turned off (nothing claimed or stored: `Run::NotStored`).
    pub disabled: u64,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    ran: AtomicU64,
    replayed: AtomicU64,
    replayed_without_value: AtomicU64,
    in_progress: AtomicU64,
    result_not_stored: AtomicU64,
    failed: AtomicU64,
    result_not_serialized: AtomicU64,
    waited: AtomicU64,
    disabled: AtomicU64,
    pub(super) on_not_stored: Option<fn()>,
}

/// One counted event.
#[derive(Debug, Clone, Copy)]
pub(super) enum Event {
    Ran,
    Replayed,
    ReplayedWithoutValue,
    InProgress,
    ResultNotStored,
    Failed,
    ResultNotSerialized,
    Waited,
    Disabled,
}

impl Counters {
    pub(super) fn count(&self, event: Event) {
        let counter = match event {
            Event::Ran => &self.ran,
            Event::Replayed => &self.replayed,
            Event::ReplayedWithoutValue => &self.replayed_without_value,
            Event::InProgress => &self.in_progress,
            Event::ResultNotStored => &self.result_not_stored,
            Event::Failed => &self.failed,
            Event::ResultNotSerialized => &self.result_not_serialized,
            Event::Waited => &self.waited,
            Event::Disabled => &self.disabled,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let (Event::ResultNotStored, Some(hook)) = (event, self.on_not_stored) {
            hook();
        }
    }

    pub(super) fn snapshot(&self) -> IdempotencyStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        IdempotencyStats {
            ran: get(&self.ran),
            replayed: get(&self.replayed),
            replayed_without_value: get(&self.replayed_without_value),
            in_progress: get(&self.in_progress),
            result_not_stored: get(&self.result_not_stored),
            failed: get(&self.failed),
            result_not_serialized: get(&self.result_not_serialized),
            waited: get(&self.waited),
            disabled: get(&self.disabled),
        }
    }
}
