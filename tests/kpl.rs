//! KPL-aggregated Kinesis records against DynamoDB Local (fixtures made by the
//! `aws-kinesis-agg` package, see `scripts/kpl-events.py`): the same table as the same records
//! unaggregated, the aggregate reported once when one of its user records fails, malformed
//! aggregates dead-lettered whole and byte for byte.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use common::*;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::ratchet::RatchetOutcome;
use dynamodb_exactly_once::{Deadline, RecordResult, RejectionCode};
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::source::Batch;
use dynamodb_exactly_once_lambda::Writer;
use serde_json::{json, Value};

/// Every item of a ratchet table, without the tombstones' expiry (a wall-clock time).
async fn ratchet_table(
    client: &Client,
    table: &str,
) -> BTreeMap<String, serde_json::Map<String, Value>> {
    let mut items = scan(client, table).await;
    for item in items.values_mut() {
        item.remove("TTL");
    }
    items
}

#[tokio::test]
async fn aggregated_records_give_the_same_table_as_the_same_records_unaggregated() {
    let setup = client();
    let (aggregated, agg_tables) = ratchet_writer(setup.clone()).await;
    let (plain, plain_tables) = ratchet_writer(setup.clone()).await;

    let agg_event = fixture("ratchet-kinesis-aggregated.json");
    let parents = agg_event["Records"].as_array().map_or(0, Vec::len);
    let agg_batch = Batch::from_event(agg_event).expect("kinesis");
    let plain_batch =
        Batch::from_event(fixture("ratchet-kinesis-unaggregated.json")).expect("kinesis");
    assert_eq!(parents, 3);
    assert_eq!(agg_batch.records.len(), plain_batch.records.len());

    let a = aggregated.handle_batch(&agg_batch, Deadline::none()).await;
    let p = plain.handle_batch(&plain_batch, Deadline::none()).await;

    assert!(a.response.failed_ids().is_empty());
    assert!(p.response.failed_ids().is_empty());
    assert_eq!(a.summary.outcomes, p.summary.outcomes);
    let a_items = ratchet_table(&setup, &agg_tables["RatchetTable"]).await;
    let p_items = ratchet_table(&setup, &plain_tables["RatchetTable"]).await;
    assert_eq!(a_items, p_items);
    assert_eq!(a_items["User#7|Movie#K"]["Rating"], json!(4));
    assert_eq!(a_items.len(), 4, "{a_items:?}");
}

#[tokio::test]
async fn aggregated_counter_records_count_once_like_unaggregated_ones() {
    let setup = client();
    let names = ["CounterTable", "DeadLetterTable"];
    let counter = |tables: &BTreeMap<String, String>| {
        let config =
            dynamodb_exactly_once::counter::CounterConfig::builder(&tables["CounterTable"])
                .build()
                .expect("valid configuration");
        Writer::builder(
            "counter-writer",
            dynamodb_exactly_once::counter::Counter::new(setup.clone(), config),
        )
        .dead_letters(DeadLetters::new(
            setup.clone(),
            &tables["DeadLetterTable"],
            "counter-writer",
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer")
    };
    let agg_tables = dev_testing::template_tables(&setup, &names).await;
    let plain_tables = dev_testing::template_tables(&setup, &names).await;
    let (aggregated, plain) = (counter(&agg_tables), counter(&plain_tables));

    let agg = Batch::from_event(fixture("counter-kinesis-aggregated.json")).expect("kinesis");
    assert!(aggregated
        .handle_batch(&agg, Deadline::none())
        .await
        .response
        .failed_ids()
        .is_empty());
    for name in ["counter-kinesis-batch.json", "counter-kinesis-more.json"] {
        let batch = Batch::from_event(fixture(name)).expect("kinesis");
        let report = plain.handle_batch(&batch, Deadline::none()).await;
        assert!(report.response.failed_ids().is_empty());
    }

    let values = |items: BTreeMap<String, serde_json::Map<String, Value>>| {
        items
            .into_iter()
            .map(|(id, item)| {
                let counts: BTreeMap<String, Value> = item
                    .into_iter()
                    .filter(|(k, _)| !k.starts_with("ctr_"))
                    .collect();
                (id, counts)
            })
            .collect::<BTreeMap<_, _>>()
    };
    let a = values(scan(&setup, &agg_tables["CounterTable"]).await);
    let p = values(scan(&setup, &plain_tables["CounterTable"]).await);
    assert_eq!(a, p);
    assert_eq!(a["acct#42|2024-11-22"]["logins"], json!(4));
}

#[tokio::test]
async fn malformed_aggregates_are_dead_lettered_whole() {
    let setup = client();
    let (w, tables) = ratchet_writer(setup.clone()).await;
    let event = fixture("ratchet-kinesis-aggregated-malformed.json");
    let records = event["Records"].as_array().cloned().unwrap_or_default();
    let field = |r: &Value, f: &str| r["kinesis"][f].as_str().unwrap_or_default().to_string();
    let raw: Vec<Vec<u8>> = records
        .iter()
        .map(|r| BASE64.decode(field(r, "data")).expect("base64"))
        .collect();
    let seqs: Vec<String> = records.iter().map(|r| field(r, "sequenceNumber")).collect();
    let batch = Batch::from_event(event).expect("kinesis");
    // The valid aggregate's three user records, then the three malformed aggregates whole.
    assert_eq!(batch.records.len(), 6);

    let report = w.handle_batch(&batch, Deadline::none()).await;

    assert!(report.response.failed_ids().is_empty());
    let items = scan(&setup, &tables["RatchetTable"]).await;
    assert!(items.contains_key("User#9|Movie#P") && items.contains_key("User#9|Movie#Q"));
    assert!(
        !items.contains_key("User#9|Movie#R"),
        "nothing of a bad aggregate applied"
    );
    let letters = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 4, "{letters:?}");
    let by_tail: BTreeMap<String, _> = letters
        .iter()
        .map(|l| (l.id.rsplit('|').next().unwrap_or_default().to_string(), l))
        .collect();
    // The bad user record of the valid aggregate: its own letter, with its sub-sequence number.
    let sub = by_tail[&format!("{}:2", seqs[0])];
    assert_eq!(sub.reason.code, RejectionCode::BadJson);
    assert_eq!(sub.payload, b"{not json");
    for (seq, payload) in seqs.iter().zip(&raw).skip(1) {
        let whole = by_tail[seq];
        assert_eq!(whole.reason.code, RejectionCode::BadAggregate, "{whole:?}");
        assert_eq!(
            &whole.payload, payload,
            "the aggregate is kept byte for byte"
        );
        assert!(whole.position.sub_record.is_none());
    }

    // A replay rejects them again, for the same reasons.
    let replay = w
        .replay_dead_letters(
            w.dead_letter_table().expect("a dead-letter table"),
            &dynamodb_exactly_once_lambda::ReplayScope::all(),
        )
        .await
        .expect("replay");
    assert_eq!(replay.still_rejected.len(), 4);
    assert!(replay.replayed.is_empty());
}

#[tokio::test]
async fn a_failed_user_record_reports_its_aggregate_once() {
    // Given DynamoDB refusing the writes of one item, written by user records of the first
    // aggregate only
    let refuse_k = FaultInjector::by_request(|_, body| {
        if body.contains("Movie#K") {
            Fault::Refuse
        } else {
            Fault::None
        }
    });
    let setup = client();
    let (_, tables) = ratchet_writer(setup.clone()).await;
    let faulty = ratchet_writer_on(client_with(Some(refuse_k.clone()), 1), &tables);
    let event = fixture("ratchet-kinesis-aggregated.json");
    let first = event["Records"][0]["kinesis"]["sequenceNumber"].clone();
    let batch = Batch::from_event(event).expect("kinesis");

    // When the batch is handled
    let report = faulty.handle_batch(&batch, Deadline::none()).await;

    // Then the aggregate is named once, whatever number of its user records failed; the
    // other records are applied
    assert!(refuse_k.injected() > 0);
    assert_eq!(
        report.response.failed_ids(),
        [first.as_str().unwrap_or("?")]
    );
    let failed = report
        .results
        .iter()
        .filter(|r| matches!(r, RecordResult::Failed(_)))
        .count();
    assert_eq!(failed, 3, "the three user records of Movie#K");
    assert_eq!(report.summary.reported_failures, 1);
    assert!(report
        .results
        .iter()
        .any(|r| matches!(r, RecordResult::Done(RatchetOutcome::Applied))));

    // When Lambda delivers everything from that aggregate again, DynamoDB answering
    let healthy = ratchet_writer_on(setup.clone(), &tables);
    let report = healthy.handle_batch(&batch, Deadline::none()).await;

    // Then the table is what the unaggregated records give
    assert!(report.response.failed_ids().is_empty());
    let (plain, plain_tables) = ratchet_writer(setup.clone()).await;
    let unaggregated =
        Batch::from_event(fixture("ratchet-kinesis-unaggregated.json")).expect("kinesis");
    let _ = plain.handle_batch(&unaggregated, Deadline::none()).await;
    assert_eq!(
        ratchet_table(&setup, &tables["RatchetTable"]).await,
        ratchet_table(&setup, &plain_tables["RatchetTable"]).await
    );
}

/// A KPL aggregate of `n` user records with empty data, all under partition key `k` (six
/// bytes of protobuf per user record: what a buggy producer of empty records sends).
fn aggregate_of_empty_records(n: usize) -> Vec<u8> {
    use md5::{Digest, Md5};
    // AggregatedRecord { partition_key_table: ["k"], records: n × { partition_key_index: 0, data: b"" } }
    let mut message = vec![0x0A, 0x01, b'k'];
    for _ in 0..n {
        message.extend_from_slice(&[0x1A, 0x04, 0x08, 0x00, 0x1A, 0x00]);
    }
    let mut body = dynamodb_exactly_once_lambda::__private::KPL_MAGIC.to_vec();
    body.extend_from_slice(&message);
    body.extend_from_slice(&Md5::digest(&message));
    body
}

#[tokio::test]
async fn an_aggregate_of_too_many_user_records_is_dead_lettered_whole() {
    // Given one aggregate of 20,000 empty user records (120 KB)
    let (w, _) = ratchet_writer(client()).await;
    let body = aggregate_of_empty_records(20_000);
    let now = dynamodb_exactly_once::__private::epoch_millis() as f64 / 1000.0;
    let seq = "49590338271490256608559692538361571095921575989136592001";
    let event = json!({"Records": [{"eventSource": "aws:kinesis",
        "eventID": format!("shardId-000000000000:{seq}"),
        "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/s",
        "kinesis": {"data": BASE64.encode(&body), "partitionKey": "k", "sequenceNumber": seq,
            "approximateArrivalTimestamp": now, "kinesisSchemaVersion": "1.0"}}]});

    // When it is decoded, it is not expanded: it stays one record with a bounded reason
    let batch = Batch::from_event(event).expect("kinesis");
    assert_eq!(
        batch.records.len(),
        1,
        "the aggregate was expanded into its user records"
    );
    let reason = dynamodb_exactly_once_lambda::__private::kpl_defect(&batch.records[0])
        .expect("an aggregate over the cap is a defect");
    assert_eq!(reason.code, RejectionCode::BadAggregate);
    assert!(reason.message.contains("20000"), "{}", reason.message);

    // And the batch keeps it as one dead letter, byte for byte
    let report = w.handle_batch(&batch, Deadline::none()).await;
    assert!(report.response.failed_ids().is_empty());
    let letters = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].payload, body);
}
