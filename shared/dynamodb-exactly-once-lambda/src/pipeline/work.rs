//! What the pipeline needs from the unit of work it drives: a [`Protocol`] (every writer), or
//! a record handler (the [`processor`](crate::processor)).
//!
//! The pipeline owns the semantics (parse-time rejections, dead letters before
//! acknowledgement, ordered and unordered routes, deadlines, the partial batch response);
//! a `Work` only says how to read one source record, how to run a set of them, and which order
//! a batch needs. Every protocol is a `Work` through the blanket implementation, unchanged.

use std::future::Future;
use std::time::Duration;

use dynamodb_exactly_once::{Applied, Deadline, Outcome, Protocol, Rejection};

use super::{is_fifo, OrderKey};
use crate::source::dynamodb::decode_change;
use crate::source::{Batch, SourceKind, SourceRecord};

/// A unit of work the pipeline drives (see the module documentation).
pub(crate) trait Work: Sync {
    /// A parsed record.
    type Record: Send;
    /// What a record that was decided ended in.
    type Outcome: Outcome;

    /// Read one source record (body and position), or reject it.
    fn parse(&self, record: &SourceRecord) -> Result<Self::Record, Rejection>;

    /// The oldest record applied safely (`None`: no limit); see [`Protocol::max_record_age`].
    fn max_record_age(&self) -> Option<Duration>;

    /// A parsed record with its source's arrival time (epoch ms); see
    /// [`Protocol::with_arrival`]. The default ignores it.
    fn with_arrival(&self, record: Self::Record, _arrived_ms: u64) -> Self::Record {
        record
    }

    /// How the batch must be ordered (`None`: not at all: one `apply` of the whole batch).
    fn order(&self, batch: &Batch) -> Option<OrderKey>;

    /// How many independent units (records, ordered keys) run at once.
    fn concurrency(&self) -> usize;

    /// Consecutive records of one ordering key with the same run key may be applied in one
    /// `apply` (see [`Protocol::coalesce_key`]); `None`: one at a time.
    fn run_key(&self, _record: &Self::Record) -> Option<String> {
        None
    }

    /// Run parsed records (indices refer to the batch): one result per record.
    fn apply(
        &self,
        records: Vec<(usize, Self::Record)>,
        deadline: Deadline,
    ) -> impl Future<Output = Applied<Self::Outcome>> + Send;
}

impl<P: Protocol> Work for P {
    type Record = P::Record;
    type Outcome = P::Outcome;

    /// A record body through the protocol; a DynamoDB stream record as an item change, under
    /// the mapping the protocol's settings chose.
    fn parse(&self, record: &SourceRecord) -> Result<P::Record, Rejection> {
        match record.position.kind {
            SourceKind::DynamoDb => self.parse_change(&decode_change(&record.body)?),
            SourceKind::Kinesis | SourceKind::Sqs | SourceKind::Kafka => {
                self.parse_delivered(&record.body, &record.position.delivery_id())
            }
        }
    }

    fn max_record_age(&self) -> Option<Duration> {
        Protocol::max_record_age(self)
    }

    fn with_arrival(&self, record: P::Record, arrived_ms: u64) -> P::Record {
        Protocol::with_arrival(self, record, arrived_ms)
    }

    fn order(&self, batch: &Batch) -> Option<OrderKey> {
        super::key_of(batch, self)
    }

    fn concurrency(&self) -> usize {
        Protocol::concurrency(self)
    }

    fn run_key(&self, record: &P::Record) -> Option<String> {
        self.coalesce_key(record)
    }

    fn apply(
        &self,
        records: Vec<(usize, P::Record)>,
        deadline: Deadline,
    ) -> impl Future<Output = Applied<P::Outcome>> + Send {
        Protocol::apply(self, records, deadline)
    }
}

/// Whether a batch is ordered by message group (SQS FIFO), whatever the work asks.
pub(crate) fn fifo_or(batch: &Batch, otherwise: Option<OrderKey>) -> Option<OrderKey> {
    if is_fifo(batch) {
        Some(OrderKey::MessageGroup)
    } else {
        otherwise
    }
}
