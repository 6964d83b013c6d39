//! Every rejected record is kept, whatever its size or content: arbitrary bodies up to the
//! sources' largest record (1 MiB) go through the ratchet and counter writers, and each one
//! that is not applied is in the dead-letter table with its exact payload; nothing is reported
//! for redelivery and no rejection message repeats the payload.

use crate::common;

use std::time::Duration;

use common::*;
use dev_testing::{client, template_tables};
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::{Deadline, Protocol, RecordResult};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::source::{Batch, SourceKind, SourcePosition, SourceRecord};
use dynamodb_exactly_once_lambda::Writer;
use proptest::prelude::*;

/// The largest record Kinesis (and SQS, since 2025) delivers.
const MAX_RECORD_BYTES: usize = 1024 * 1024;

/// A body of about `size` bytes whose bad part is itself large.
fn body(shape: u8, size: usize, bytes: &[u8]) -> Vec<u8> {
    let big = "v".repeat(size);
    match shape % 9 {
        0 => bytes.to_vec(),
        1 => format!(r#"{{"op":"{big}","key":{{"PK":"a","SK":"b"}},"ts":1}}"#).into_bytes(),
        2 => format!(r#"{{"op":"put","key":{{"PK":"a","SK":"b"}},"ts":"{big}","item":{{}}}}"#)
            .into_bytes(),
        3 => format!(r#"{{"op":"put","key":{{"{big}":"a"}},"ts":1,"item":{{}}}}"#).into_bytes(),
        4 => format!(r#"{{"op":"put","key":{{"PK":"a","SK":"b"}},"ts":1,"item":{{"x":"{big}"}}}}"#)
            .into_bytes(),
        5 => format!(r#"{{"key":{{"PK":"a","SK":"b"}},"add":{{"{big}":1}},"idempotencyKey":"k"}}"#)
            .into_bytes(),
        6 => format!(r#"{{"key":{{"PK":"a","SK":"b"}},"add":{{"n":1}},"idempotencyKey":"{big}"}}"#)
            .into_bytes(),
        7 => format!(r#"{{"op":"put","key":{{"PK":"a","SK":"b"}},"ts":1,"item":{{"{big}":1}}}}"#)
            .into_bytes(),
        _ => {
            let sk = "s".repeat(size % 2048);
            format!(r#"{{"op":"put","key":{{"PK":"a","SK":"{sk}"}},"ts":1,"item":{{}}}}"#)
                .into_bytes()
        }
    }
}

fn kinesis_batch_of(bodies: &[Vec<u8>], case: usize) -> Batch {
    let records = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            SourceRecord::new(
                {
                    let mut position =
                        SourcePosition::new(SourceKind::Kinesis, format!("{case:010}{i:010}"));
                    position.source_arn = Some("arn:aws:kinesis:us-east-1:1:stream/s".into());
                    position.shard_id = Some("shardId-000".into());
                    position.partition_key = Some("p".into());
                    position
                },
                body.clone(),
            )
        })
        .collect();
    Batch::new(SourceKind::Kinesis, records)
}

/// Every record of `batch` was applied or kept with its exact payload.
async fn assert_kept<P: Protocol>(w: &Writer<P>, batch: &Batch) {
    let report = w.handle_batch(batch, Deadline::none()).await;
    let failed: Vec<String> = report
        .results
        .iter()
        .filter_map(|r| match r {
            RecordResult::Failed(e) => Some(e.to_string()),
            _ => None,
        })
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    let letters = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("list");
    for (record, result) in batch.records.iter().zip(&report.results) {
        if let RecordResult::Rejected(reason) = result {
            assert!(reason.message.len() < 400, "{}", reason.code);
            let letter = letters
                .iter()
                .find(|l| l.position.id == record.position.id)
                .expect("kept");
            assert!(letter.payload == record.body, "payload kept byte for byte");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn every_rejected_record_is_kept_whatever_its_size(
        shapes in prop::collection::vec(any::<u8>(), 1..4),
        size in 0usize..MAX_RECORD_BYTES - 200,
        bytes in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let case = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Random bytes of the full size for shape 0.
            let noise: Vec<u8> = bytes.iter().copied().cycle().take(size).collect();
            let bodies: Vec<Vec<u8>> = shapes.iter().map(|s| body(*s, size, &noise)).collect();
            let batch = kinesis_batch_of(&bodies, case);
            let client = client();
            let tables = template_tables(&client, &["RatchetTable", "CounterTable", "DeadLetterTable"]).await;
            let ratchet = ratchet_writer_on(client.clone(), &tables);
            assert_kept(&ratchet, &batch).await;
            let counter = Writer::builder("counter-writer", Counter::new(client.clone(), CounterConfig::builder(&tables["CounterTable"]).build().expect("valid configuration"))).dead_letters(DeadLetters::new(client, &tables["DeadLetterTable"], "counter-writer")).deadline_margin(Duration::from_secs(1)).build().expect("valid writer");
            assert_kept(&counter, &batch).await;
        });
    }
}

/// A batch of `(body, arrived seconds ago)` from SQS.
fn sqs_batch_arrived(records: &[(serde_json::Value, u64)]) -> Batch {
    let now = dynamodb_exactly_once::__private::epoch_millis();
    let records = records
        .iter()
        .enumerate()
        .map(|(i, (body, ago))| {
            SourceRecord::new(
                {
                    let mut position = SourcePosition::new(SourceKind::Sqs, format!("old{i}"));
                    position.source_arn = Some("arn:aws:sqs:us-east-1:1:q".into());
                    position.arrived_at_ms = Some(now - ago * 1000);
                    position
                },
                body.to_string().into_bytes(),
            )
        })
        .collect();
    Batch::new(SourceKind::Sqs, records)
}

#[tokio::test]
async fn a_put_older_than_the_tombstone_lifetime_is_kept_and_replayed_only_when_forced() {
    let client = client();
    let tables = template_tables(&client, &["RatchetTable", "DeadLetterTable"]).await;
    let mut w = ratchet_writer_on(client.clone(), &tables);
    let config = w
        .protocol()
        .config()
        .to_builder()
        .tombstone_ttl(Duration::from_secs(60))
        .build()
        .expect("valid configuration");
    w = crate::common::with_protocol(
        &w,
        dynamodb_exactly_once::ratchet::Ratchet::new(client.clone(), config),
    );
    // Its item's tombstone may already have expired: applying it could revive a deleted item.
    let late = put("u", "late", 1, serde_json::json!({"v":1}));
    let fresh = put("u", "fresh", 1, serde_json::json!({"v":2}));
    let batch = sqs_batch_arrived(&[(late, 120), (fresh, 1)]);

    let report = w.handle_batch(&batch, Deadline::none()).await;

    assert!(report.response.failed_ids().is_empty());
    assert_eq!(report.summary.count("applied"), 1);
    let letters = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("list");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason.code, "too_old");
    let replay = w
        .replay_dead_letters(
            w.dead_letter_table().expect("a dead-letter table"),
            &dynamodb_exactly_once_lambda::ReplayScope::all(),
        )
        .await
        .expect("replay");
    assert_eq!(replay.still_rejected.len(), 1, "a replay keeps refusing it");
    let forced = w
        .replay_dead_letters(
            w.dead_letter_table().expect("a dead-letter table"),
            &dynamodb_exactly_once_lambda::ReplayScope::all().forced(true),
        )
        .await
        .expect("forced");
    assert_eq!(forced.replayed.len(), 1, "an operator can force it");
    let items = scan(&client, &tables["RatchetTable"]).await;
    assert_eq!(items.len(), 2);
}

#[tokio::test]
async fn a_counter_record_older_than_the_window_is_kept_not_counted() {
    let client = client();
    let tables = template_tables(&client, &["CounterTable", "DeadLetterTable"]).await;
    let w = Writer::builder(
        "counter-writer",
        Counter::new(
            client.clone(),
            CounterConfig::builder(&tables["CounterTable"])
                .window(Duration::from_secs(60))
                .build()
                .expect("valid configuration"),
        ),
    )
    .dead_letters(DeadLetters::new(
        client.clone(),
        &tables["DeadLetterTable"],
        "counter-writer",
    ))
    .deadline_margin(Duration::from_secs(1))
    .build()
    .expect("valid writer");
    // Its key may have left the window: applied again, it could count twice.
    let late = serde_json::json!({"key":{"PK":"a","SK":"b"},"add":{"n":1},"idempotencyKey":"k1"});
    let fresh = serde_json::json!({"key":{"PK":"a","SK":"b"},"add":{"n":1},"idempotencyKey":"k2"});
    let batch = sqs_batch_arrived(&[(late, 600), (fresh, 1)]);

    let report = w.handle_batch(&batch, Deadline::none()).await;

    assert!(report.response.failed_ids().is_empty());
    assert_eq!(report.summary.count("applied"), 1);
    let letters = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("list");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason.code, "too_old");
}

pub(crate) mod sqs;
