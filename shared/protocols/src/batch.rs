//! Batches of records through a protocol, independent of where they came from.
//!
//! A [`Protocol`] parses a record body (or rejects it with a [`Rejection`]) and applies the
//! valid records of a batch, returning one [`RecordResult`] per record. The Lambda edge
//! (`dynamo-lambda`) drives this from Kinesis and SQS events; any other consumer (an ECS
//! service, a Kafka consumer, a test) can drive it the same way.
//!
//! Each record ends in exactly one [`RecordResult`]:
//!
//! | result | meaning | a consumer should |
//! |---|---|---|
//! | `Done(outcome)` | decided (applied, stale, duplicate, superseded, …) | acknowledge it |
//! | `Rejected(reason)` | can never succeed | keep it (dead letter), then acknowledge it |
//! | `Failed(error)` | a DynamoDB call failed | deliver it again |
//! | `Deferred` | not attempted: the deadline is close | deliver it again |

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::ddb::StoreError;
use crate::rejection::Rejection;

/// A protocol outcome that a batch summary can count.
pub trait Outcome: std::fmt::Debug + Send {
    /// A stable snake_case label, e.g. `applied`.
    fn label(&self) -> &'static str;
}

/// What happened to one record.
#[derive(Debug)]
pub enum RecordResult<O> {
    /// The protocol decided the record (an expected outcome, not an error).
    Done(O),
    /// The record can never succeed; it must be kept as a dead letter.
    Rejected(Rejection),
    /// A DynamoDB call failed; the record must be delivered again.
    Failed(StoreError),
    /// Not attempted because the deadline is close; delivered again.
    Deferred,
}

impl<O: Outcome> RecordResult<O> {
    /// A label for logs and summaries.
    pub fn label(&self) -> &'static str {
        match self {
            RecordResult::Done(o) => o.label(),
            RecordResult::Rejected(_) => "invalid",
            RecordResult::Failed(_) => "failed",
            RecordResult::Deferred => "deferred",
        }
    }
}

/// What a protocol's batch application returns.
#[derive(Debug)]
pub struct Applied<O> {
    /// One result per input record, by the index it was given.
    pub results: Vec<(usize, RecordResult<O>)>,
    /// DynamoDB write calls made.
    pub write_calls: usize,
}

/// A write protocol applied to batches.
pub trait Protocol: Sync {
    /// A parsed, validated record.
    type Record: Send;
    /// The protocol's outcome type.
    type Outcome: Outcome;

    /// Parse and validate one record body.
    fn parse(&self, body: &[u8]) -> Result<Self::Record, Rejection>;

    /// Apply the valid records of a batch (indices refer to the batch).
    fn apply(
        &self,
        records: Vec<(usize, Self::Record)>,
        deadline: Deadline,
    ) -> impl Future<Output = Applied<Self::Outcome>> + Send;
}

/// When a batch must stop starting new work.
///
/// Built from the invocation deadline minus a safety margin; [`Deadline::none`] never expires.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    stop_at: Option<SystemTime>,
}

impl Deadline {
    /// No deadline.
    pub fn none() -> Self {
        Deadline { stop_at: None }
    }

    /// Stop `margin` before the deadline given in epoch milliseconds (`0`: none).
    ///
    /// A value too small to be an epoch time (before 2001) is read as a budget in milliseconds
    /// from now: `cargo lambda watch` sends the function timeout (e.g. `600000`) that way.
    pub fn from_epoch_ms(deadline_ms: u64, margin: Duration) -> Self {
        const EPOCH_2001_MS: u64 = 978_307_200_000;
        if deadline_ms == 0 {
            return Self::none();
        }
        let at = if deadline_ms < EPOCH_2001_MS {
            SystemTime::now() + Duration::from_millis(deadline_ms)
        } else {
            UNIX_EPOCH + Duration::from_millis(deadline_ms)
        };
        Deadline {
            stop_at: Some(at.checked_sub(margin).unwrap_or(UNIX_EPOCH)),
        }
    }

    /// Stop after `after` from now.
    pub fn after(after: Duration) -> Self {
        Deadline {
            stop_at: Some(SystemTime::now() + after),
        }
    }

    /// Whether new work must not be started any more.
    pub fn expired(&self) -> bool {
        self.stop_at.is_some_and(|at| SystemTime::now() >= at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddb::clock::epoch_millis;

    #[test]
    fn context_without_deadline_never_expires() {
        assert!(!Deadline::from_epoch_ms(0, Duration::from_secs(1)).expired());
        assert!(Deadline::from_epoch_ms(1_700_000_000_000, Duration::from_secs(1)).expired());
        assert!(
            !Deadline::from_epoch_ms(epoch_millis() + 60_000, Duration::from_secs(1)).expired()
        );
        // `cargo lambda watch` sends the timeout, not an epoch time.
        assert!(!Deadline::from_epoch_ms(600_000, Duration::from_secs(1)).expired());
        assert!(Deadline::from_epoch_ms(500, Duration::from_secs(1)).expired());
    }
}
