//! Kafka values decoded (Avro, Protobuf: [`KafkaValues`]) before a unit of work reads them:
//! the work parses the value's JSON; a value that does not decode is rejected,
//! `undecodable_value`. The batch keeps the value as delivered, so a dead letter holds the
//! bytes the producer wrote and a replay decodes them again.

use std::time::Duration;

use dynamodb_exactly_once::{Applied, Deadline, Rejection};

use super::work::Work;
use super::OrderKey;
use crate::source::value::KafkaValues;
use crate::source::{Batch, SourceKind, SourceRecord};

/// `work` reading Kafka values through `values` (`None`: as they are).
#[derive(Debug)]
pub(crate) struct Decoded<'a, W> {
    pub(crate) work: &'a W,
    pub(crate) values: Option<&'a KafkaValues>,
}

impl<W: Work> Work for Decoded<'_, W> {
    type Record = W::Record;
    type Outcome = W::Outcome;

    fn parse(&self, record: &SourceRecord) -> Result<W::Record, Rejection> {
        match self.values {
            Some(values) if record.position.kind == SourceKind::Kafka => {
                let body = values.decode(&record.body)?;
                self.work
                    .parse(&SourceRecord::new(record.position.clone(), body))
            }
            _ => self.work.parse(record),
        }
    }

    fn max_record_age(&self) -> Option<Duration> {
        self.work.max_record_age()
    }

    fn with_arrival(&self, record: W::Record, arrived_ms: u64) -> W::Record {
        self.work.with_arrival(record, arrived_ms)
    }

    fn order(&self, batch: &Batch) -> Option<OrderKey> {
        self.work.order(batch)
    }

    fn concurrency(&self) -> usize {
        self.work.concurrency()
    }

    fn run_key(&self, record: &W::Record) -> Option<String> {
        self.work.run_key(record)
    }

    async fn apply(
        &self,
        records: Vec<(usize, W::Record)>,
        deadline: Deadline,
    ) -> Applied<W::Outcome> {
        self.work.apply(records, deadline).await
    }
}
