//! A protocol behind a record mapping: each Kinesis or SQS body is rewritten through the
//! mapping before the protocol reads it; everything else is the protocol's.

use std::time::Duration;

use dynamodb_exactly_once::{Applied, Deadline, Protocol, Rejection};

use super::RecordMapping;
use crate::pipeline::work::Work;
use crate::pipeline::OrderKey;
use crate::source::{Batch, SourceKind, SourceRecord};

/// `protocol` reading records through `mapping`.
#[derive(Debug)]
pub(crate) struct Mapped<'a, P> {
    pub(crate) protocol: &'a P,
    pub(crate) mapping: &'a RecordMapping,
}

impl<P: Protocol> Work for Mapped<'_, P> {
    type Record = P::Record;
    type Outcome = P::Outcome;

    fn parse(&self, record: &SourceRecord) -> Result<P::Record, Rejection> {
        match record.position.kind {
            SourceKind::DynamoDb => Work::parse(self.protocol, record),
            SourceKind::Kinesis | SourceKind::Sqs | SourceKind::Kafka => {
                let body = self.mapping.map(record)?;
                self.protocol
                    .parse_delivered(&body, &record.position.delivery_id())
            }
        }
    }

    fn max_record_age(&self) -> Option<Duration> {
        Work::max_record_age(self.protocol)
    }

    fn with_arrival(&self, record: P::Record, arrived_ms: u64) -> P::Record {
        Work::with_arrival(self.protocol, record, arrived_ms)
    }

    fn order(&self, batch: &Batch) -> Option<OrderKey> {
        Work::order(self.protocol, batch)
    }

    fn concurrency(&self) -> usize {
        Work::concurrency(self.protocol)
    }

    fn run_key(&self, record: &P::Record) -> Option<String> {
        Work::run_key(self.protocol, record)
    }

    async fn apply(
        &self,
        records: Vec<(usize, P::Record)>,
        deadline: Deadline,
    ) -> Applied<P::Outcome> {
        Protocol::apply(self.protocol, records, deadline).await
    }
}
