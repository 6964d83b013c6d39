//! The interceptor side of an interleaving: each attempt is recorded, the first rule that
//! fires on it is applied, and a paused call blocks its thread until it is released.

use std::collections::BTreeMap;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeSerializationInterceptorContextRef,
    BeforeTransmitInterceptorContextMut,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_types::config_bag::{Storable, StoreReplace};

use crate::faults;

use super::{Action, ActorInterceptor, ActorState, Call, Parked, MAX_PAUSE};

/// The operation index of the execution in progress (kept across its attempts).
#[derive(Debug, Clone, Copy)]
struct Operation(usize, u32);
impl Storable for Operation {
    type Storer = StoreReplace<Self>;
}

/// What was decided for the attempt in progress, for the response hook.
#[derive(Debug, Clone)]
struct AfterSend {
    call: Call,
    /// The actor's `release_alls` when the call was sent.
    release_alls: u64,
    lose: bool,
    pause: bool,
    conflict: bool,
}
impl Storable for AfterSend {
    type Storer = StoreReplace<Self>;
}

impl ActorInterceptor {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, ActorState>> {
        self.shared
            .actors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Record the attempt and take the action of the first rule that fires on it; also the
    /// actor's `release_alls` now.
    fn decide(
        &self,
        operation: Operation,
        name: String,
        body: String,
    ) -> (Call, Option<Action>, u64) {
        let mut actors = self.lock();
        let actor = actors.entry(self.name.clone()).or_default();
        let call = Call {
            index: actor.attempts,
            call: operation.0,
            attempt: operation.1,
            operation: name,
            body,
        };
        actor.attempts += 1;
        actor.log.push(call.clone());
        let release_alls = actor.release_alls;
        if actor.crash_from.is_some_and(|k| call.index >= k) {
            return (call, Some(Action::Refuse), release_alls);
        }
        let mut fired = None;
        for (i, rule) in actor.rules.iter_mut().enumerate() {
            if rule.at.matches(&call) {
                if rule.skip == 0 {
                    fired = Some(i);
                    break;
                }
                rule.skip -= 1;
            }
        }
        let action = fired.map(|i| actor.rules.remove(i).action);
        (call, action, release_alls)
    }

    /// Hold this thread until the actor is released (see the module docs), unless a
    /// `release_all` came after the pause was decided (`release_alls` then).
    fn park(&self, call: Call, after: bool, release_alls: u64) -> Result<(), BoxError> {
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if !multi_thread {
            return Err("interleave: pausing a call needs a multi-thread tokio runtime".into());
        }
        tokio::task::block_in_place(|| self.wait_for_release(call, after, release_alls))
    }

    fn wait_for_release(&self, call: Call, after: bool, release_alls: u64) -> Result<(), BoxError> {
        let started = Instant::now();
        let mut actors = self.lock();
        let actor = actors.entry(self.name.clone()).or_default();
        if actor.release_alls != release_alls {
            return Ok(());
        }
        let releases = actor.releases;
        actor.parked = Some(Parked { call, after });
        loop {
            let actor = actors.entry(self.name.clone()).or_default();
            if actor.releases != releases {
                actor.parked = None;
                return Ok(());
            }
            if started.elapsed() > MAX_PAUSE {
                actor.parked = None;
                return Err(format!("interleave: {} was never released", self.name).into());
            }
            actors = self
                .shared
                .changed
                .wait_timeout(actors, Duration::from_millis(200))
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

impl Intercept for ActorInterceptor {
    fn name(&self) -> &'static str {
        "Interleaving"
    }

    fn read_before_execution(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let mut actors = self.lock();
        let actor = actors.entry(self.name.clone()).or_default();
        let index = actor.operations;
        actor.operations += 1;
        cfg.interceptor_state().store_put(Operation(index, 0));
        Ok(())
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Operation(op, attempt) = cfg.load::<Operation>().copied().unwrap_or(Operation(0, 0));
        cfg.interceptor_state()
            .store_put(Operation(op, attempt + 1));
        let request = context.request_mut();
        let (operation, body) = faults::operation_and_body(request);
        let (call, action, release_alls) = self.decide(Operation(op, attempt + 1), operation, body);
        let mut after = AfterSend {
            call: call.clone(),
            release_alls,
            lose: false,
            pause: false,
            conflict: false,
        };
        match action {
            None => {}
            Some(Action::PauseBefore) => self.park(call, false, release_alls)?,
            Some(Action::Delay(d)) => {
                let multi_thread = tokio::runtime::Handle::try_current().is_ok_and(|h| {
                    h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
                });
                if multi_thread {
                    tokio::task::block_in_place(|| std::thread::sleep(d));
                } else {
                    std::thread::sleep(d);
                }
            }
            Some(Action::Refuse) => request.set_uri("http://127.0.0.1:1/")?,
            Some(Action::LoseResponse) => after.lose = true,
            Some(Action::PauseAfter) => after.pause = true,
            Some(Action::Conflict) => {
                faults::send_unapplied(request);
                after.conflict = true;
            }
        }
        cfg.interceptor_state().store_put(after);
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(after) = cfg.load::<AfterSend>().cloned() else {
            return Ok(());
        };
        if after.pause {
            self.park(after.call.clone(), true, after.release_alls)?;
        }
        if after.lose {
            faults::answer(context.response_mut(), 500, faults::LOST_RESPONSE)?;
        }
        if after.conflict {
            let body = match after.call.operation.as_str() {
                "TransactWriteItems" | "TransactGetItems" => {
                    faults::TRANSACTION_CANCELED_BY_CONFLICT
                }
                _ => faults::TRANSACTION_CONFLICT,
            };
            faults::answer(context.response_mut(), 400, body)?;
        }
        Ok(())
    }
}
