//! What a response does to a lane: success, partial failure (resume at the lowest failed
//! record), a failed batch (retry, bisect, discard) and the window's new state.

use serde_json::{json, Value};

use super::{Planned, Window, WindowPlan, STATE_MAX_BYTES};
use crate::mapping::handler::Ended;
use crate::mapping::payload::Condition;
use crate::mapping::Mapping;

/// What a response means for the batch.
#[derive(Debug)]
enum Verdict {
    /// Every record succeeded; the window's new state.
    Success(Option<Value>),
    /// The records before index `from` succeeded; the rest failed.
    Partial {
        from: usize,
        state: Option<Value>,
    },
    Failed(String),
}

impl Mapping {
    /// Apply one invocation's outcome to its lane.
    pub(super) fn apply(&mut self, p: Planned, ended: Ended) {
        let verdict = self.verdict(&p, ended);
        let now_ms = self.clock.now_ms();
        let (id, lane) = (p.shard_id.as_str(), p.lane);
        match verdict {
            Verdict::Success(state) => {
                self.succeed(id, lane, p.records.len(), now_ms);
                self.set_window(id, lane, p.window.as_ref(), state);
            }
            Verdict::Partial { from, state } => {
                self.succeed(id, lane, from, now_ms);
                self.set_window(id, lane, p.window.as_ref().map(not_final).as_ref(), state);
                self.fail(
                    id,
                    lane,
                    p.records.len() - from,
                    p.window.as_ref(),
                    "partial batch failure",
                );
            }
            Verdict::Failed(why) => {
                self.stats.failed_invocations += 1;
                self.fail(id, lane, p.records.len(), p.window.as_ref(), &why);
            }
        }
        if let Some(shard) = self.shards.get_mut(id) {
            shard.advance_checkpoint();
        }
    }

    /// Read the response as Lambda does.
    fn verdict(&self, p: &Planned, ended: Ended) -> Verdict {
        let v = match ended {
            Ended::Failed(why) => return Verdict::Failed(why),
            Ended::Answered(v) => v,
        };
        let state = match &p.window {
            None => None,
            Some(_) => match v.get("state") {
                Some(s @ Value::Object(_)) => Some(s.clone()),
                _ => return Verdict::Failed("the response has no state".into()),
            },
        };
        if !self.config.report_batch_item_failures {
            return Verdict::Success(state);
        }
        let failures = match v.get("batchItemFailures") {
            None | Some(Value::Null) => return Verdict::Success(state),
            Some(Value::Array(f)) if f.is_empty() => return Verdict::Success(state),
            Some(Value::Array(f)) => f,
            Some(other) => return Verdict::Failed(format!("batchItemFailures is {other}")),
        };
        let mut lowest = usize::MAX;
        for f in failures {
            let id = f
                .get("itemIdentifier")
                .and_then(Value::as_str)
                .unwrap_or("");
            match p
                .records
                .iter()
                .position(|r| !id.is_empty() && r.seq_text == id)
            {
                Some(i) => lowest = lowest.min(i),
                None => return Verdict::Failed(format!("unknown itemIdentifier {f}")),
            }
        }
        Verdict::Partial {
            from: lowest,
            state,
        }
    }

    fn succeed(&mut self, id: &str, lane: usize, n: usize, now_ms: u64) {
        if let Some(shard) = self.shards.get_mut(id) {
            let l = &mut shard.lanes[lane];
            l.pop(n, now_ms);
            if n > 0 {
                l.attempt = 0;
            }
        }
        self.stats.records_succeeded += n as u64;
    }

    /// After a successful invoke: the window's new state, its end, or its early end.
    fn set_window(
        &mut self,
        id: &str,
        lane: usize,
        plan: Option<&WindowPlan>,
        state: Option<Value>,
    ) {
        let (Some(w), Some(shard)) = (plan, self.shards.get_mut(id)) else {
            return;
        };
        let l = &mut shard.lanes[lane];
        if w.is_final {
            l.window = w.early.then(|| Window {
                start_ms: w.start_ms,
                end_ms: w.end_ms,
                state: json!({}),
                ends_early: false,
            });
            return;
        }
        let state = state.unwrap_or_else(|| json!({}));
        let ends_early = state.to_string().len() > STATE_MAX_BYTES;
        self.stats.windows_terminated_early += u64::from(ends_early);
        l.window = Some(Window {
            start_ms: w.start_ms,
            end_ms: w.end_ms,
            state,
            ends_early,
        });
    }

    /// `n` head records failed: retry, bisect, or discard once retries are spent.
    fn fail(&mut self, id: &str, lane: usize, n: usize, plan: Option<&WindowPlan>, why: &str) {
        let bisect = self.config.bisect_on_error;
        let max_retries = self.config.max_retry_attempts;
        let Some(l) = self.shards.get_mut(id).map(|s| &mut s.lanes[lane]) else {
            return;
        };
        l.attempt += 1;
        if max_retries.is_some_and(|m| l.attempt > m) {
            let invokes = l.attempt;
            l.attempt = 0;
            if plan.is_some_and(|w| w.is_final) {
                l.window = None;
            }
            self.discard(
                id,
                lane,
                n,
                Condition::RetryAttemptsExhausted,
                invokes,
                Some(why),
            );
        } else if bisect && n > 1 {
            l.bisect(n);
            l.attempt = 0;
            self.stats.bisections += 1;
        }
    }
}

fn not_final(w: &WindowPlan) -> WindowPlan {
    WindowPlan {
        is_final: false,
        early: false,
        ..w.clone()
    }
}
