//! The sample events of `events/` (for `cargo lambda invoke --data-file`, the demo and the
//! tests) are data, edited as such. A Kinesis sample named like an SQS one
//! (`<writer>-kinesis-<name>.json` beside `<writer>-sqs-<name>.json`) carries the SQS sample's
//! bodies, in order, as its base64 `data`: [`kinesis_twin`] writes it from the SQS sample
//! (`make events`, which runs this module's tests with `BLESS_EVENTS=1`), and the tests fail
//! when the two differ. The KPL-aggregated samples are made by AWS's own aggregator
//! (`scripts/kpl-events.py`): test vectors from an independent implementation.

use base64::Engine as _;
use serde_json::Value;

/// The Kinesis sample carrying the bodies of the SQS sample `sqs`, one record per SQS record
/// (partition key `pk-<i>`), shaped as the first record of `kinesis`: its shard, stream ARN and
/// arrival time, sequence numbers counted from its own. `None` when either is not a sample of
/// its kind.
pub fn kinesis_twin(sqs: &Value, kinesis: &Value) -> Option<Value> {
    let template = kinesis.pointer("/Records/0")?;
    let first_sequence = template.pointer("/kinesis/sequenceNumber")?.as_str()?;
    let shard = template.get("eventID")?.as_str()?.split(':').next()?;
    let records = sqs
        .get("Records")?
        .as_array()?
        .iter()
        .enumerate()
        .map(|(i, message)| {
            let sequence = add(first_sequence, i)?;
            let body = message.get("body")?.as_str()?;
            let mut record = template.clone();
            record["kinesis"]["partitionKey"] = format!("pk-{i}").into();
            record["kinesis"]["sequenceNumber"] = sequence.clone().into();
            record["kinesis"]["data"] = base64::engine::general_purpose::STANDARD
                .encode(body)
                .into();
            record["eventID"] = format!("{shard}:{sequence}").into();
            Some(record)
        });
    Some(serde_json::json!({ "Records": records.collect::<Option<Vec<_>>>()? }))
}

/// `decimal + n`, for sequence numbers longer than any integer type.
fn add(decimal: &str, n: usize) -> Option<String> {
    let mut digits: Vec<u8> = decimal
        .bytes()
        .map(|b| b.is_ascii_digit().then(|| b - b'0'))
        .collect::<Option<_>>()?;
    let mut carry = n;
    for digit in digits.iter_mut().rev() {
        let sum = usize::from(*digit) + carry;
        *digit = u8::try_from(sum % 10).ok()?;
        carry = sum / 10;
    }
    let head = if carry > 0 {
        carry.to_string()
    } else {
        String::new()
    };
    Some(
        head + &digits
            .iter()
            .map(|d| char::from(b'0' + d))
            .collect::<String>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynamodb_exactly_once_lambda::source::Batch;
    use std::path::PathBuf;

    /// The first bytes of a KPL aggregate.
    const KPL_MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];

    fn events_dir() -> PathBuf {
        crate::workspace_root().join("events")
    }

    fn read(name: &str) -> Value {
        let path = events_dir().join(name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: not JSON: {e}"))
    }

    fn sample_names() -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(events_dir())
            .expect("events/")
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.ends_with(".json"))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn sequence_numbers_add_past_any_integer_type() {
        assert_eq!(
            add(
                "49590338271490256608559692538361571095921575989136588800",
                7
            )
            .as_deref(),
            Some("49590338271490256608559692538361571095921575989136588807")
        );
        assert_eq!(add("999", 1).as_deref(), Some("1000"));
        assert_eq!(add("12x", 1), None);
    }

    /// Each sample decodes as the Lambda event of its source (aws_lambda_events' types for
    /// SQS, Kinesis and DynamoDB Streams; the edge's Kafka reader) and, but in the `malformed`
    /// samples, every record's payload too (base64 values, KPL aggregates expanded); the sweeper's
    /// is the scheduler's event. The Avro values are decoded by apache-avro in
    /// `tests/kafka/values.rs`, the record bodies by the tests of each writer.
    #[test]
    fn every_sample_event_decodes_as_its_source() {
        let names = sample_names();
        assert!(names.len() >= 30, "events/ holds {} samples", names.len());
        for name in names {
            let event = read(&name);
            if event.get("detail-type").and_then(Value::as_str) == Some("Scheduled Event") {
                assert_eq!(event["source"], "aws.scheduler", "{name}");
                continue;
            }
            let batch = Batch::from_event(crate::events::arriving_now(event))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!batch.records.is_empty(), "{name}: no records");
            if name.contains("malformed") {
                continue; // their defects are what they are for
            }
            for record in &batch.records {
                let kafka_defect = record
                    .position
                    .kafka
                    .as_ref()
                    .and_then(|k| k.defect.as_ref());
                assert!(
                    kafka_defect.is_none(),
                    "{name}: {}: {kafka_defect:?}",
                    record.position.id
                );
                let unexpanded =
                    record.body.starts_with(&KPL_MAGIC) && record.position.sub_record.is_none();
                assert!(
                    !unexpanded,
                    "{name}: {}: a KPL aggregate that does not expand",
                    record.position.id
                );
            }
        }
    }

    /// The Kinesis samples carry their SQS twins' bodies (`BLESS_EVENTS=1`: rewrite them).
    #[test]
    fn kinesis_samples_carry_their_sqs_twins_bodies() {
        let bless = std::env::var_os("BLESS_EVENTS").is_some_and(|v| v == "1");
        let mut twins = 0;
        for sqs_name in sample_names() {
            let kinesis_name = sqs_name.replacen("-sqs-", "-kinesis-", 1);
            if kinesis_name == sqs_name || !events_dir().join(&kinesis_name).exists() {
                continue;
            }
            twins += 1;
            let committed = read(&kinesis_name);
            let wanted = kinesis_twin(&read(&sqs_name), &committed).unwrap_or_else(|| {
                panic!("{sqs_name}, {kinesis_name}: not an SQS and a Kinesis sample")
            });
            if wanted == committed {
                continue;
            }
            if bless {
                let text = serde_json::to_string_pretty(&wanted).expect("JSON") + "\n";
                std::fs::write(events_dir().join(&kinesis_name), text).expect("write");
            } else {
                panic!(
                    "events/{kinesis_name} does not carry the bodies of events/{sqs_name}: \
                        `make events` (BLESS_EVENTS=1) writes it from the SQS sample"
                );
            }
        }
        assert!(twins >= 10, "{twins} Kinesis samples with an SQS twin");
    }
}
