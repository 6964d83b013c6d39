//! The counter roll-up as the handler of the journal's stream event source mapping, fed the
//! journal's real stream records (DynamoDB Local's stream) as Lambda delivers them: a shard's
//! batch in a tumbling window's event, answered with a partial batch response. Delivered
//! again whole or from any record, cut by a lost response or a throttled update, each key
//! counts once; a record that can never count is one dead letter and the rest counts.

use std::str::FromStr;

use aws_sdk_dynamodbstreams::types::{AttributeValue as StreamValue, Record, ShardIteratorType};
use base64::Engine;
use dev_testing::{client, client_with, streams_client, Fault, FaultInjector};
use dynamodb_exactly_once::counter::journal::{Rollup, RollupBatchReport, RollupConfig};
use dynamodb_exactly_once::counter::CounterConfig;
use dynamodb_exactly_once_lambda::RollupFunction;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Map, Value};

use crate::counter::journal::{apply, counter, first_of, key, record, tables, total};

/// The roll-up of the mapping over `counters` and `journal`, with `client`.
fn mapping_rollup(client: aws_sdk_dynamodb::Client, counters: &str, journal: &str) -> Rollup {
    let counter = CounterConfig::builder(counters).journal(journal).build();
    let config = RollupConfig::builder(counter.expect("counter config")).build();
    Rollup::new(client, config.expect("config"))
}

/// The journal's stream as the mapping reads it: its (one) shard and every record, each as
/// Lambda's JSON for a DynamoDB stream record.
pub(crate) async fn journal_batch(journal: &str) -> (String, Vec<Value>) {
    let streams = streams_client();
    let table = client()
        .describe_table()
        .table_name(journal)
        .send()
        .await
        .expect("describe");
    let arn = table
        .table()
        .and_then(|t| t.latest_stream_arn())
        .expect("stream")
        .to_string();
    let stream = streams
        .describe_stream()
        .stream_arn(&arn)
        .send()
        .await
        .expect("stream");
    let shards = stream
        .stream_description()
        .map(|d| d.shards())
        .unwrap_or_default();
    assert_eq!(shards.len(), 1, "DynamoDB Local's stream has one shard");
    let shard = shards[0].shard_id().expect("shard id").to_string();
    let mut iterator = streams
        .get_shard_iterator()
        .stream_arn(&arn)
        .shard_id(&shard)
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await
        .expect("iterator")
        .shard_iterator;
    let mut records = Vec::new();
    while let Some(it) = iterator {
        let page = streams
            .get_records()
            .shard_iterator(it)
            .send()
            .await
            .expect("records");
        if page.records().is_empty() {
            break;
        }
        records.extend(page.records().iter().map(|r| lambda_record(&arn, r)));
        iterator = page.next_shard_iterator().map(str::to_string);
    }
    (shard, records)
}

fn lambda_record(arn: &str, record: &Record) -> Value {
    let change = record.dynamodb().expect("stream record");
    let image = |m: Option<&std::collections::HashMap<String, StreamValue>>| {
        Value::Object(
            m.into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), attribute(v)))
                .collect::<Map<_, _>>(),
        )
    };
    let created = change
        .approximate_creation_date_time()
        .map_or(0.0, |t| t.secs() as f64);
    json!({
        "eventID": record.event_id(),
        "eventName": record.event_name().map(|n| n.as_str()),
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "eventSourceARN": arn,
        "dynamodb": {
            "ApproximateCreationDateTime": created,
            "Keys": image(change.keys()),
            "NewImage": image(change.new_image()),
            "SequenceNumber": change.sequence_number(),
            "SizeBytes": change.size_bytes(),
            "StreamViewType": "NEW_IMAGE",
        }
    })
}

/// An attribute value in DynamoDB's JSON.
fn attribute(value: &StreamValue) -> Value {
    let b64 = |b: &aws_smithy_types::Blob| base64::engine::general_purpose::STANDARD.encode(b);
    match value {
        StreamValue::S(s) => json!({ "S": s }),
        StreamValue::N(n) => json!({ "N": n }),
        StreamValue::B(b) => json!({ "B": b64(b) }),
        StreamValue::Bool(b) => json!({ "BOOL": b }),
        StreamValue::Null(n) => json!({ "NULL": n }),
        StreamValue::Ss(v) => json!({ "SS": v }),
        StreamValue::Ns(v) => json!({ "NS": v }),
        StreamValue::M(m) => {
            json!({ "M": m.iter().map(|(k, v)| (k.clone(), attribute(v))).collect::<Map<_, _>>() })
        }
        StreamValue::L(l) => json!({ "L": l.iter().map(attribute).collect::<Vec<_>>() }),
        other => panic!("unexpected attribute {other:?}"),
    }
}

/// A tumbling window's final invoke for `records` of `shard` (a whole window at once: the
/// roll-up applies its keys).
pub(crate) fn window_event(shard: &str, records: &[Value]) -> Value {
    json!({
        "Records": records,
        "window": {"start": "2026-11-29T00:00:00Z", "end": "2026-11-29T00:01:00Z"},
        "state": {},
        "shardId": shard,
        "eventSourceARN": records.first().and_then(|r| r.get("eventSourceARN")),
        "isFinalInvokeForWindow": true,
        "isWindowTerminatedEarly": false,
    })
}

/// Deliver `records` of `shard` to the function; the sequence number it asks again from.
async fn deliver(function: &RollupFunction, shard: &str, records: &[Value]) -> Option<String> {
    let event = LambdaEvent::new(window_event(shard, records), Context::default());
    let answer = function.handle(event).await.expect("answered");
    let failures = answer["batchItemFailures"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(failures.len() <= 1, "{answer}");
    failures
        .first()
        .and_then(|f| f["itemIdentifier"].as_str())
        .map(str::to_string)
}

/// The records from `seq` on (what the mapping delivers again after a reported failure).
fn from_seq(records: &[Value], seq: &str) -> Vec<Value> {
    let at = records
        .iter()
        .position(|r| r["dynamodb"]["SequenceNumber"] == seq)
        .expect("a record of the batch");
    records[at..].to_vec()
}

pub(crate) fn changes(records: &[Value]) -> Vec<dynamodb_exactly_once::ItemChange> {
    records
        .iter()
        .map(|r| {
            let body = serde_json::to_vec(r).expect("json");
            dynamodb_exactly_once_lambda::__private::decode_change(&body).expect("change")
        })
        .collect()
}

#[tokio::test]
async fn a_batch_delivered_again_whole_or_from_any_record_counts_each_key_once() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let counter = counter(c.clone(), &counters, &journal);
    let mut records = Vec::new();
    for (i, item) in ["a", "b", "c"].iter().cycle().take(9).enumerate() {
        records.push(record(&counter, item, 1 << i, &format!("k{i}")));
    }
    apply(&counter, &records).await;
    apply(&counter, &records[..4]).await; // redelivered to the writer: no new record
    let (shard, batch) = journal_batch(&journal).await;
    assert_eq!(batch.len(), 9);
    let function = RollupFunction::new("counter-rollup", mapping_rollup(c, &counters, &journal));
    assert_eq!(deliver(&function, &shard, &batch).await, None);
    let expected = [1 + 8 + 64, 2 + 16 + 128, 4 + 32 + 256];
    for (item, want) in ["a", "b", "c"].iter().zip(expected) {
        assert_eq!(total(&counter, item).await, want, "{item}");
    }
    // The same batch again (a lost answer), then from its middle (a retry after a failure).
    assert_eq!(deliver(&function, &shard, &batch).await, None);
    for at in [1, 4, 8] {
        assert_eq!(deliver(&function, &shard, &batch[at..]).await, None);
    }
    let report = function.rollup.apply_batch(&shard, &changes(&batch)).await;
    assert_eq!((report.applied, report.duplicates, report.keys), (0, 9, 9));
    for (item, want) in ["a", "b", "c"].iter().zip(expected) {
        assert_eq!(total(&counter, item).await, want, "{item} counted once");
    }
}

#[tokio::test]
async fn a_throttled_update_is_delivered_again_from_its_items_first_record() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let counter = counter(c.clone(), &counters, &journal);
    let records: Vec<_> = (0..6)
        .map(|i| record(&counter, ["a", "b"][i % 2], 1, &format!("k{i}")))
        .collect();
    apply(&counter, &records).await;
    let (shard, batch) = journal_batch(&journal).await;
    // Every update of item b is throttled (the SDK gives up after one attempt).
    let faults = FaultInjector::by_request(|op, body| {
        match op == "UpdateItem" && body.contains(r#""PK":{"S":"b"}"#) {
            true => Fault::Throttle,
            false => Fault::None,
        }
    });
    let throttled = mapping_rollup(client_with(Some(faults), 1), &counters, &journal);
    let report: RollupBatchReport = throttled.apply_batch(&shard, &changes(&batch)).await;
    assert_eq!(report.failed_items, 1, "{report:?}");
    let b_first = batch[1]["dynamodb"]["SequenceNumber"]
        .as_str()
        .expect("seq");
    assert_eq!(report.retry_from.as_deref(), Some(b_first), "{report:?}");
    assert_eq!(
        (total(&counter, "a").await, total(&counter, "b").await),
        (3, 0)
    );
    // The mapping delivers the batch again from there, to a roll-up no longer throttled.
    let function = RollupFunction::new("counter-rollup", mapping_rollup(c, &counters, &journal));
    assert_eq!(
        deliver(&function, &shard, &from_seq(&batch, b_first)).await,
        None
    );
    assert_eq!(
        (total(&counter, "a").await, total(&counter, "b").await),
        (3, 3)
    );
}

#[tokio::test]
async fn a_lost_response_of_an_update_counts_its_keys_once() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let counter = counter(c.clone(), &counters, &journal);
    let records: Vec<_> = (0..4)
        .map(|i| record(&counter, "a", 1 << i, &format!("k{i}")))
        .collect();
    apply(&counter, &records).await;
    let (shard, batch) = journal_batch(&journal).await;
    // The update lands, its answer is lost and the SDK does not retry: the window's final
    // invoke fails as a whole, and the mapping invokes it again as it was.
    let lost = mapping_rollup(
        client_with(Some(first_of("UpdateItem", Fault::LoseResponse)), 1),
        &counters,
        &journal,
    );
    let function = RollupFunction::new("counter-rollup", lost);
    let event = LambdaEvent::new(window_event(&shard, &batch), Context::default());
    let err = function.handle(event).await.expect_err("invoked again");
    assert_eq!(err.error_type(), "Retryable");
    assert_eq!(
        total(&counter, "a").await,
        15,
        "applied before the answer was lost"
    );
    assert_eq!(deliver(&function, &shard, &batch).await, None);
    assert_eq!(total(&counter, "a").await, 15, "counted once");
}

#[tokio::test]
async fn an_overflowing_sum_is_one_dead_letter_and_the_rest_of_the_batch_counts() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let counter = counter(c.clone(), &counters, &journal);
    let number = |s: &str| serde_json::Number::from_str(s).expect("number");
    let mut records = vec![
        counter
            .record(key("a"), [("n", number("100000000000000000000"))], "big")
            .expect("record"),
        counter
            .record(key("a"), [("n", number("0.00000000000000000001"))], "tiny")
            .expect("record"),
    ];
    records.extend((0..3).map(|i| record(&counter, "b", 1, &format!("k{i}"))));
    apply(&counter, &records).await;
    let (shard, batch) = journal_batch(&journal).await;
    let rollup = mapping_rollup(c, &counters, &journal);
    let report = rollup.apply_batch(&shard, &changes(&batch)).await;
    assert_eq!(report.failed_items, 0, "{report:?}");
    assert_eq!(
        report.retry_from, None,
        "never blocks the shard: {report:?}"
    );
    assert_eq!(report.dead_letters, 1, "{report:?}");
    assert_eq!(total(&counter, "b").await, 3);
    let again = rollup.apply_batch(&shard, &changes(&batch)).await;
    assert_eq!(
        (again.dead_letters, again.retry_from.as_deref()),
        (0, None),
        "{again:?}"
    );
}

#[tokio::test]
async fn a_record_the_journals_writer_did_not_write_is_a_dead_letter_and_the_rest_counts() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let counter = counter(c.clone(), &counters, &journal);
    apply(&counter, &[record(&counter, "a", 2, "k0")]).await;
    c.put_item()
        .table_name(&journal)
        .item(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S("stray".into()),
        )
        .item("sk", aws_sdk_dynamodb::types::AttributeValue::S("x".into()))
        .send()
        .await
        .expect("stray item");
    apply(&counter, &[record(&counter, "a", 3, "k1")]).await;
    let (shard, batch) = journal_batch(&journal).await;
    let function = RollupFunction::new("counter-rollup", mapping_rollup(c, &counters, &journal));
    assert_eq!(deliver(&function, &shard, &batch).await, None);
    assert_eq!(total(&counter, "a").await, 5);
    let report = function.rollup.apply_batch(&shard, &changes(&batch)).await;
    assert_eq!(
        (report.dead_letters, report.duplicates),
        (1, 2),
        "{report:?}"
    );
}

#[tokio::test]
async fn an_event_without_a_window_is_refused_whole_with_a_clear_error() {
    let c = client();
    let (counters, journal) = tables(&c).await;
    let counter = counter(c.clone(), &counters, &journal);
    apply(&counter, &[record(&counter, "a", 2, "k0")]).await;
    let (_, batch) = journal_batch(&journal).await;
    let function = RollupFunction::new("counter-rollup", mapping_rollup(c, &counters, &journal));
    let event = LambdaEvent::new(json!({ "Records": batch }), Context::default());
    let err = function.handle(event).await.expect_err("no shard id");
    assert_eq!(err.error_type(), "Configuration");
    assert!(err.to_string().contains("TumblingWindowInSeconds"), "{err}");
    assert_eq!(total(&counter, "a").await, 0, "nothing applied");
}

async fn pk_only_journal(c: &aws_sdk_dynamodb::Client, counters: &str) -> String {
    let journal = format!("{counters}-pk-only");
    crate::common::stream_table(c, &journal).await;
    journal
}

#[tokio::test]
async fn a_journal_keyed_by_pk_alone_is_refused_with_a_clear_error() {
    let c = client();
    let (counters, _) = tables(&c).await;
    let journal = pk_only_journal(&c, &counters).await;
    let counter = counter(c.clone(), &counters, &journal);
    let records: Vec<_> = (0..3)
        .map(|i| record(&counter, "a", 1, &format!("k{i}")))
        .collect();
    let indexed = records.iter().cloned().enumerate().collect();
    let applied = dynamodb_exactly_once::Protocol::apply(
        &counter,
        indexed,
        dynamodb_exactly_once::Deadline::none(),
    )
    .await;
    for (_, result) in &applied.results {
        let text = format!("{result:?}");
        assert!(
            text.contains("journal table") && text.contains("`sk`"),
            "{text}"
        );
    }
    let function = RollupFunction::new("counter-rollup", mapping_rollup(c, &counters, &journal));
    let event = LambdaEvent::new(window_event("shardId-1", &[]), Context::default());
    let err = function.handle(event).await.expect_err("refused");
    assert!(err.to_string().contains("`sk`"), "{err}");
}
