//! Lanes: the records of a shard waiting for the function (one lane per shard, or
//! `ParallelizationFactor` lanes by partition key), the batch each invokes, and what a
//! response does to them (success, partial failure, retry, bisect, discard, window state).

mod response;

use std::collections::VecDeque;

use futures::future::join_all;
use serde_json::{json, Value};

use super::handler::{self, Fault, Handler, InvocationInfo};
use super::payload::{event, on_failure_message, Condition, StreamRecord, WindowFields};
use super::Mapping;

/// Lambda's limit on an invocation's event.
const EVENT_MAX_BYTES: usize = 6 * 1024 * 1024;
/// Lambda's limit on a tumbling window's state per shard.
const STATE_MAX_BYTES: usize = 1024 * 1024;

/// A tumbling window a lane is in.
#[derive(Debug, Clone)]
struct Window {
    start_ms: u64,
    end_ms: u64,
    state: Value,
    /// The last response's state was over 1 MB: the next invoke ends the window early.
    ends_early: bool,
}

/// One lane of a shard.
#[derive(Debug, Default)]
pub(crate) struct Lane {
    pub pending: VecDeque<StreamRecord>,
    /// When the oldest pending record was read (the batching window runs from it).
    since_ms: Option<u64>,
    /// Failed invocations of the records at the head.
    attempt: u32,
    /// The sizes of the bisected batches at the head, in order (`BisectBatchOnFunctionError`:
    /// each half is invoked on its own).
    segments: VecDeque<usize>,
    window: Option<Window>,
}

impl Lane {
    pub fn push(&mut self, record: StreamRecord, now_ms: u64) {
        if self.pending.is_empty() {
            self.since_ms = Some(now_ms);
        }
        self.pending.push_back(record);
    }

    /// Nothing pending and no window open.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty() && self.window.is_none()
    }

    /// Remove the `n` records at the head (and them from the bisected batches).
    fn pop(&mut self, n: usize, now_ms: u64) -> Vec<StreamRecord> {
        let out = self.pending.drain(..n.min(self.pending.len())).collect();
        self.since_ms = (!self.pending.is_empty()).then_some(now_ms);
        let mut left = n;
        while left > 0 {
            let Some(front) = self.segments.front_mut() else {
                break;
            };
            let used = left.min(*front);
            *front -= used;
            left -= used;
            if *front == 0 {
                self.segments.pop_front();
            }
        }
        out
    }

    /// The head batch of `n` records failed: invoke its halves one after the other.
    fn bisect(&mut self, n: usize) {
        if self.segments.front() == Some(&n) {
            self.segments.pop_front();
        } else {
            self.segments.clear();
        }
        self.segments.push_front(n - n / 2);
        self.segments.push_front(n / 2);
    }
}

/// The window part of a planned invocation.
#[derive(Debug, Clone)]
struct WindowPlan {
    start_ms: u64,
    end_ms: u64,
    state: Value,
    is_final: bool,
    early: bool,
}

/// One invocation about to run.
#[derive(Debug)]
struct Planned {
    shard_id: String,
    lane: usize,
    records: Vec<StreamRecord>,
    window: Option<WindowPlan>,
    info: InvocationInfo,
    fault: Fault,
}

/// What the lane's shard tells the planner.
#[derive(Debug, Clone, Copy)]
struct Ctx {
    now_ms: u64,
    ended: bool,
    caught_up: bool,
}

impl Mapping {
    /// Plan one invocation per ready lane of every readable shard, run them all at once,
    /// apply their outcomes; returns how many ran.
    pub(crate) async fn invoke_lanes<H: Handler + ?Sized>(&mut self, handler: &H) -> usize {
        let now_ms = self.clock.now_ms();
        let mut planned = Vec::new();
        for id in self.order.clone() {
            if !self.readable(&id) {
                continue;
            }
            for lane in 0..self.config.parallelization_factor {
                self.discard_aged(&id, lane, now_ms);
                if let Some(p) = self.plan(&id, lane, now_ms) {
                    planned.push(p);
                }
            }
        }
        for p in &mut planned {
            p.info.n = self.stats.invocations;
            p.fault = self
                .faults
                .as_mut()
                .map_or(Fault::None, |plan| plan(&p.info));
            self.stats.invocations += if p.fault == Fault::Duplicate { 2 } else { 1 };
        }
        let arn = self.stream_arn.clone();
        let runs = planned.iter().map(|p| {
            let window = p.window.as_ref().map(|w| WindowFields {
                start_ms: w.start_ms,
                end_ms: w.end_ms,
                state: &w.state,
                shard_id: &p.shard_id,
                is_final: w.is_final,
                terminated_early: w.early,
            });
            handler::run(handler, event(&p.records, &arn, window), p.fault)
        });
        let ended = join_all(runs).await;
        let n = planned.len();
        for (p, e) in planned.into_iter().zip(ended) {
            self.apply(p, e);
        }
        n
    }

    /// Discard the head records older than `MaximumRecordAgeInSeconds` (a batch at a time).
    fn discard_aged(&mut self, id: &str, lane: usize, now_ms: u64) {
        let Some(max_age) = self.config.max_record_age else {
            return;
        };
        let max_ms = u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX);
        let batch = self.config.batch_size;
        loop {
            let Some(l) = self.shards.get_mut(id).map(|s| &mut s.lanes[lane]) else {
                return;
            };
            let aged = l
                .pending
                .iter()
                .take(batch)
                .take_while(|r| now_ms.saturating_sub(r.created_ms) > max_ms)
                .count();
            if aged == 0 {
                return;
            }
            let invokes = l.attempt;
            l.attempt = 0;
            self.discard(id, lane, aged, Condition::RecordAgeExceeded, invokes, None);
        }
    }

    /// Pop `n` head records of a lane to the on-failure destination.
    fn discard(
        &mut self,
        id: &str,
        lane: usize,
        n: usize,
        why: Condition,
        invokes: u32,
        error: Option<&str>,
    ) {
        let now_ms = self.clock.now_ms();
        let Some(shard) = self.shards.get_mut(id) else {
            return;
        };
        let records = shard.lanes[lane].pop(n, now_ms);
        shard.advance_checkpoint();
        self.stats.records_discarded += records.len() as u64;
        if records.is_empty() {
            // A window's final invoke without records given up on: no record to describe.
            return;
        }
        self.on_failure.push(on_failure_message(
            why,
            invokes,
            id,
            &self.stream_arn,
            &records,
            now_ms,
            error,
        ));
    }

    /// The invocation a lane is ready for, if any.
    fn plan(&self, id: &str, lane: usize, now_ms: u64) -> Option<Planned> {
        let shard = self.shards.get(id)?;
        let l = &shard.lanes[lane];
        let ctx = Ctx {
            now_ms,
            ended: shard.ended,
            caught_up: shard.caught_up,
        };
        let limit = l
            .segments
            .front()
            .map_or(self.config.batch_size, |n| (*n).min(self.config.batch_size));
        let (take, window) = match self.config.tumbling_window {
            None => (
                self.ready(l, limit, ctx).then(|| fit(&l.pending, limit))?,
                None,
            ),
            Some(len) => {
                let len_ms = u64::try_from(len.as_millis()).unwrap_or(u64::MAX);
                let (take, w) = self.plan_window(l, limit, len_ms, ctx)?;
                (take, Some(w))
            }
        };
        let records: Vec<StreamRecord> = l.pending.iter().take(take).cloned().collect();
        let info = InvocationInfo {
            n: 0,
            shard_id: id.to_string(),
            lane,
            records: records.len(),
            attempt: l.attempt,
            final_for_window: window.as_ref().is_some_and(|w| w.is_final),
        };
        Some(Planned {
            shard_id: id.to_string(),
            lane,
            records,
            window,
            info,
            fault: Fault::None,
        })
    }

    /// A full batch, a retry, the shard's end, or the batching window passed.
    fn ready(&self, l: &Lane, limit: usize, ctx: Ctx) -> bool {
        let window_ms = u64::try_from(self.config.batching_window.as_millis()).unwrap_or(u64::MAX);
        !l.pending.is_empty()
            && (l.pending.len() >= limit
                || l.attempt > 0
                || !l.segments.is_empty()
                || ctx.ended
                || l.since_ms
                    .is_some_and(|s| ctx.now_ms.saturating_sub(s) >= window_ms))
    }

    /// A tumbling window's next invoke: how many records, and the window fields.
    fn plan_window(
        &self,
        l: &Lane,
        limit: usize,
        len_ms: u64,
        ctx: Ctx,
    ) -> Option<(usize, WindowPlan)> {
        if let Some(w) = l.window.as_ref().filter(|w| w.ends_early) {
            return Some((0, window_plan(w, true, true)));
        }
        let start_ms = match &l.window {
            Some(w) => w.start_ms,
            None => {
                let head = l.pending.front()?;
                head.created_ms - head.created_ms % len_ms.max(1)
            }
        };
        let end_ms = start_ms.saturating_add(len_ms);
        let in_window = l
            .pending
            .iter()
            .take_while(|r| r.created_ms < end_ms)
            .count();
        let take = fit(&l.pending, in_window.min(limit));
        let later = l.pending.len() > in_window;
        let rest = in_window - take;
        let is_final = rest == 0 && (later || ctx.ended || (ctx.now_ms >= end_ms && ctx.caught_up));
        if !is_final && (take == 0 || !self.ready(l, limit, ctx)) {
            return None;
        }
        let current = Window {
            start_ms,
            end_ms,
            state: l
                .window
                .as_ref()
                .map_or_else(|| json!({}), |w| w.state.clone()),
            ends_early: false,
        };
        Some((take, window_plan(&current, is_final, false)))
    }
}

/// The head records, at most `limit` and within Lambda's event size (at least one).
fn fit(pending: &VecDeque<StreamRecord>, limit: usize) -> usize {
    let mut bytes = 0;
    let mut n = 0;
    for r in pending.iter().take(limit) {
        bytes += r.json.to_string().len();
        if n > 0 && bytes > EVENT_MAX_BYTES {
            break;
        }
        n += 1;
    }
    n
}

fn window_plan(w: &Window, is_final: bool, early: bool) -> WindowPlan {
    WindowPlan {
        start_ms: w.start_ms,
        end_ms: w.end_ms,
        state: w.state.clone(),
        is_final,
        early,
    }
}
