//! Interleavings: named actors (one SDK client each) whose DynamoDB calls a test can pause,
//! delay, refuse or answer with a lost response, at a chosen call, so that a schedule found
//! by reading the protocol can be replayed exactly against the real DynamoDB Local.
//!
//! ```text
//! let il = Interleaving::new();
//! let a = env.coordinator(il.client("A", 1));         // actor A's calls go through `il`
//! il.pause_before("A", At::op("GetItem").table(accounts));
//! let task = tokio::spawn(async move { a.run(&msg, deadline).await });
//! il.wait_paused("A").await;                          // A is held before that call
//! /* run B, the sweeper, readers: they complete while A is held */
//! il.crash_from("A", il.calls("A").len() + 2);        // A dies two calls after it resumes
//! il.release("A");
//! ```
//!
//! # Design: a gate in the interceptor, on a multi-thread runtime
//!
//! Interceptor hooks are synchronous, so a paused call blocks the thread that runs it, inside
//! [`tokio::task::block_in_place`]: the runtime hands that worker's other tasks to a new
//! thread, so every other actor keeps running, however many actors are paused at once. Tests
//! that pause or delay must therefore run on a multi-thread runtime
//! (`#[tokio::test(flavor = "multi_thread", worker_threads = 2)]`); on a current-thread
//! runtime a pause fails the call with an error instead of deadlocking. (A loopback proxy per
//! actor, see [`crate::proxy`], needs no blocking but can only see bytes; the interceptor sees
//! the operation, the body and the SDK's retries, and shares the attempt numbering with
//! [`crate::FaultInjector`].)
//!
//! # What can happen to a call
//!
//! * **pause before** ([`Interleaving::pause_before`]): the request is held before it is sent;
//!   nothing reached DynamoDB (a slow coordinator, a delayed SDK retry: match the retry with
//!   [`At::attempt`]).
//! * **pause after** ([`Interleaving::pause_after`]): DynamoDB applied the request and
//!   answered; the answer is held before the SDK reads it (a stalled response).
//! * **lose the response** ([`Interleaving::lose_response`]): applied, and the SDK sees a 500
//!   (it retries with the same request, idempotency token included).
//! * **refuse** ([`Interleaving::refuse`], [`Interleaving::crash_from`]): never sent; the SDK
//!   sees a connection failure. `crash_from(k)` refuses every attempt from index `k` on (the
//!   actor died).
//! * **delay** ([`Interleaving::delay_before`]): held for a fixed time, then sent.
//!
//! Every rule fires once, on the `nth` call it matches. A paused call waits at most
//! [`MAX_PAUSE`]; then it fails (a test that forgot to release an actor fails instead of
//! hanging).
//!
//! # Layout
//!
//! This file holds the schedule (actors, rules, releases); `actor.rs` the interceptor that
//! records each attempt, applies the rule that fires and parks a paused call.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;

mod actor;

/// Longest time a paused call waits for [`Interleaving::release`].
pub const MAX_PAUSE: Duration = Duration::from_secs(120);

/// One request attempt of an actor, as the interceptor saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Attempt index over all the actor's attempts (from 0; SDK retries included), the
    /// numbering of [`crate::FaultInjector`].
    pub index: usize,
    /// Operation index over the actor's operations (from 0; a retry keeps its operation's).
    pub call: usize,
    /// Attempt of this operation (1 = first, 2 = the SDK's first retry, ...).
    pub attempt: u32,
    /// The operation, e.g. `UpdateItem`.
    pub operation: String,
    /// The request body (JSON).
    pub body: String,
}

/// Which call a rule applies to: every field set must match, and the rule fires on the
/// `nth` matching call (1 = the first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct At {
    index: Option<usize>,
    operation: Option<String>,
    attempt: Option<u32>,
    contains: Vec<String>,
    nth: usize,
}

impl At {
    /// The attempt with this index ([`Call::index`]).
    pub fn call(index: usize) -> At {
        At {
            index: Some(index),
            ..At::default()
        }
    }

    /// Any call of `operation` (e.g. `GetItem`, `TransactWriteItems`).
    pub fn op(operation: &str) -> At {
        At {
            operation: Some(operation.to_string()),
            ..At::default()
        }
    }

    /// Any call.
    pub fn any() -> At {
        At::default()
    }

    /// Only calls on `table` (its name appears in the body as `"TableName":"<table>"`).
    pub fn table(mut self, table: &str) -> At {
        self.contains.push(format!("\"TableName\":\"{table}\""));
        self
    }

    /// Only calls whose body contains `text`.
    pub fn containing(mut self, text: &str) -> At {
        self.contains.push(text.to_string());
        self
    }

    /// Only this attempt of an operation (2 = the SDK's first retry).
    pub fn attempt(mut self, attempt: u32) -> At {
        self.attempt = Some(attempt);
        self
    }

    /// Fire on the `n`-th matching call (1 = the first).
    pub fn nth(mut self, n: usize) -> At {
        self.nth = n.saturating_sub(1);
        self
    }

    fn matches(&self, call: &Call) -> bool {
        self.index.is_none_or(|i| i == call.index)
            && self
                .operation
                .as_deref()
                .is_none_or(|o| o == call.operation)
            && self.attempt.is_none_or(|a| a == call.attempt)
            && self.contains.iter().all(|t| call.body.contains(t.as_str()))
    }
}

/// What a rule does to the call it fires on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    PauseBefore,
    PauseAfter,
    LoseResponse,
    Refuse,
    Delay(Duration),
    Conflict,
}

#[derive(Debug)]
struct Rule {
    at: At,
    action: Action,
    /// Matching calls still to skip before it fires.
    skip: usize,
}

/// Where an actor is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked {
    /// The held call.
    pub call: Call,
    /// `true`: after DynamoDB answered (the request applied); `false`: before sending.
    pub after: bool,
}

#[derive(Debug, Default)]
struct ActorState {
    attempts: usize,
    operations: usize,
    rules: Vec<Rule>,
    crash_from: Option<usize>,
    parked: Option<Parked>,
    releases: u64,
    /// `release_all`s so far: a pause decided before one (its rule fired when the call was
    /// sent) is dropped, not held, when the call reaches it.
    release_alls: u64,
    log: Vec<Call>,
}

#[derive(Debug, Default)]
struct Shared {
    actors: Mutex<BTreeMap<String, ActorState>>,
    changed: Condvar,
}

/// The schedule shared by a test and its actors' interceptors (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct Interleaving {
    shared: Arc<Shared>,
}

/// The SDK interceptor of one actor (see [`Interleaving::interceptor`]).
#[derive(Debug, Clone)]
pub struct ActorInterceptor {
    name: String,
    shared: Arc<Shared>,
}

impl Interleaving {
    /// An empty schedule: every call goes through until a rule says otherwise.
    pub fn new() -> Self {
        Interleaving::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, ActorState>> {
        self.shared
            .actors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The interceptor of actor `name` (for a client built elsewhere).
    pub fn interceptor(&self, name: &str) -> ActorInterceptor {
        self.lock().entry(name.to_string()).or_default();
        ActorInterceptor {
            name: name.to_string(),
            shared: self.shared.clone(),
        }
    }

    /// A client of the test endpoint whose calls are actor `name`'s (`max_attempts` 1: no SDK
    /// retry).
    pub fn client(&self, name: &str, max_attempts: u32) -> Client {
        crate::local::client_intercepted(&crate::endpoint(), self.interceptor(name), max_attempts)
    }

    fn add(&self, name: &str, at: At, action: Action) {
        let skip = at.nth;
        self.lock()
            .entry(name.to_string())
            .or_default()
            .rules
            .push(Rule { at, action, skip });
    }

    /// Hold `name`'s call `at` before it is sent, until [`Interleaving::release`].
    pub fn pause_before(&self, name: &str, at: At) {
        self.add(name, at, Action::PauseBefore);
    }

    /// Hold `name`'s call `at` after DynamoDB answered (applied), until released.
    pub fn pause_after(&self, name: &str, at: At) {
        self.add(name, at, Action::PauseAfter);
    }

    /// Apply `name`'s call `at` and replace its answer with a 500.
    pub fn lose_response(&self, name: &str, at: At) {
        self.add(name, at, Action::LoseResponse);
    }

    /// Refuse `name`'s call `at` (a connection failure; not applied).
    pub fn refuse(&self, name: &str, at: At) {
        self.add(name, at, Action::Refuse);
    }

    /// Answer `name`'s call `at` as DynamoDB answers a write that met a transaction in
    /// flight, without applying it: `TransactionCanceledException` (reason
    /// `TransactionConflict`) for a `TransactWriteItems` or `TransactGetItems`,
    /// `TransactionConflictException` for
    /// a plain write (which DynamoDB Local never raises).
    pub fn conflict(&self, name: &str, at: At) {
        self.add(name, at, Action::Conflict);
    }

    /// Hold `name`'s call `at` for `delay`, then send it.
    pub fn delay_before(&self, name: &str, at: At, delay: Duration) {
        self.add(name, at, Action::Delay(delay));
    }

    /// Refuse every attempt of `name` from index `index` on (the actor died).
    pub fn crash_from(&self, name: &str, index: usize) {
        self.lock().entry(name.to_string()).or_default().crash_from = Some(index);
    }

    /// Release `name` if it is held (and let its next pause hold it again).
    pub fn release(&self, name: &str) {
        if let Some(actor) = self.lock().get_mut(name) {
            actor.releases += 1;
            // Not parked any more from now on: a `wait_paused` right after this waits for the
            // actor's *next* pause instead of seeing this one before its thread woke up.
            actor.parked = None;
        }
        self.shared.changed.notify_all();
    }

    /// Release `name` if it is held, and drop its pauses not reached yet, a `pause_after`
    /// whose call is in flight included (so that a release that comes before the pause cannot
    /// leave the actor held later).
    pub fn release_all(&self, name: &str) {
        if let Some(actor) = self.lock().get_mut(name) {
            actor
                .rules
                .retain(|r| !matches!(r.action, Action::PauseBefore | Action::PauseAfter));
            actor.releases += 1;
            actor.release_alls += 1;
            actor.parked = None;
        }
        self.shared.changed.notify_all();
    }

    /// Where `name` is held now, if it is.
    pub fn parked(&self, name: &str) -> Option<Parked> {
        self.lock().get(name).and_then(|a| a.parked.clone())
    }

    /// Wait until `name` is held (at most `MAX_PAUSE`); `None` if it never was.
    pub async fn wait_paused(&self, name: &str) -> Option<Parked> {
        let started = Instant::now();
        while started.elapsed() < MAX_PAUSE {
            if let Some(parked) = self.parked(name) {
                return Some(parked);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    }

    /// Every attempt `name` made so far, in order.
    pub fn calls(&self, name: &str) -> Vec<Call> {
        self.lock()
            .get(name)
            .map(|a| a.log.clone())
            .unwrap_or_default()
    }
}
