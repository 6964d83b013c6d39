//! Kafka values in Avro with schema-registry framing through a ready function, against
//! DynamoDB Local: the decoded values reach the mapping and the table exactly (a long beyond
//! f64's integers), a value that does not decode is a dead letter `undecodable_value` kept as
//! delivered, and its partition goes on.

use crate::counter::{counters, writer_on as counter_writer_on, TABLES as COUNTER_TABLES};

use std::time::Duration;

use apache_avro::types::Record;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::Schema;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use dev_testing::client;
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::event_time::EventTime;
use dynamodb_exactly_once_lambda::mapping::RecordMapping;
use dynamodb_exactly_once_lambda::source::value::KafkaValues;
use dynamodb_exactly_once_lambda::{Batch, Writer};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};

const PAYMENT_AVSC: &str = r#"{"type": "record", "name": "Payment", "namespace": "shop",
  "fields": [{"name": "account", "type": "string"}, {"name": "amount", "type": "long"}]}"#;

/// A Payment in Confluent's wire format (magic byte 0, schema id 1).
fn payment(account: &str, amount: i64) -> Vec<u8> {
    let schema = Schema::parse_str(PAYMENT_AVSC).expect("schema");
    let mut record = Record::new(&schema).expect("a record schema");
    record.put("account", account);
    record.put("amount", amount);
    let writer = GenericDatumWriter::builder(&schema)
        .build()
        .expect("writer");
    let mut out = vec![0, 0, 0, 0, 1];
    out.extend(writer.write_value_to_vec(record).expect("encodes"));
    out
}

/// An MSK batch of `(partition, offset, value bytes)` on topic `payments`.
fn batch(records: &[(i64, i64, Vec<u8>)]) -> Batch {
    let now_ms = dynamodb_exactly_once::__private::epoch_millis();
    let mut partitions = serde_json::Map::new();
    for (partition, offset, value) in records {
        let list = partitions
            .entry(format!("payments-{partition}"))
            .or_insert_with(|| json!([]));
        if let Value::Array(list) = list {
            list.push(
                json!({"topic": "payments", "partition": partition, "offset": offset,
                "timestamp": now_ms, "timestampType": "CREATE_TIME",
                "value": BASE64.encode(value), "headers": []}),
            );
        }
    }
    let event = json!({"eventSource": "aws:kafka",
        "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/shop/abc",
        "records": partitions});
    Batch::from_event(event).expect("a Kafka batch")
}

#[tokio::test]
async fn kafka_avro_values_are_counted_exactly_and_undecodable_ones_kept() {
    // Given a counter reading Confluent-framed Avro payments through a mapping
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &COUNTER_TABLES).await;
    let mapping = RecordMapping::new(
        "COUNTER_RECORD_MAPPING",
        r#"{"key":{"PK":"/account","SK":"=totals"},"add":{"amount":"/amount"},
            "idempotencyKey":"={$topic}-{$partition}-{$offset}"}"#,
    )
    .expect("template");
    let plain = counter_writer_on(setup.clone(), &tables, |c| c, None);
    let writer = Writer::builder("counter-writer", plain.protocol().clone())
        .dead_letters(DeadLetters::new(
            setup.clone(),
            &tables["DeadLetterTable"],
            "counter-writer",
        ))
        .mapping(mapping)
        .kafka_values(
            KafkaValues::avro("COUNTER_KAFKA_VALUE_SCHEMA", PAYMENT_AVSC).expect("schema"),
        )
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("writer");
    let mut wrong_magic = payment("acct-a", 1000);
    wrong_magic[0] = 1;
    let truncated = payment("acct-a", 1000)[..8].to_vec();
    let records = [
        (0, 0, payment("acct-a", 9_007_199_254_740_993)),
        (0, 1, wrong_magic.clone()),
        (0, 2, truncated),
        (0, 3, payment("acct-a", 2)),
        (1, 0, payment("acct-b", 5)),
    ];

    // When the batch is handled, then delivered again whole
    let first = writer
        .handle_batch(&batch(&records), Deadline::none())
        .await;
    assert!(
        first.response.failed_ids().is_empty(),
        "{:?}",
        first.response
    );
    let again = writer
        .handle_batch(&batch(&records), Deadline::none())
        .await;
    assert!(again.response.failed_ids().is_empty());

    // Then each decoded value counted once, exactly; the others kept as delivered
    let sums = counters(&setup, &tables["CounterTable"]).await;
    assert_eq!(sums["acct-a|totals"]["amount"], 9_007_199_254_740_995);
    assert_eq!(sums["acct-b|totals"]["amount"], 5);
    let letters = DeadLetters::new(setup, &tables["DeadLetterTable"], "counter-writer");
    let mut kept: Vec<_> = letters.list().await.expect("letters");
    kept.sort_by(|a, b| a.position.id.cmp(&b.position.id));
    let ids: Vec<_> = kept.iter().map(|l| l.position.id.as_str()).collect();
    assert_eq!(ids, ["payments-0:1", "payments-0:2"]);
    assert!(
        kept.iter()
            .all(|l| l.reason.code.as_str() == "undecodable_value"),
        "{kept:?}"
    );
    assert_eq!(kept[0].payload, wrong_magic);
}

/// `shop.v1.Order {string id = 1; int64 cents = 2;}` as a serialized FileDescriptorSet.
fn order_descriptors() -> Vec<u8> {
    use prost::Message;
    use prost_reflect::prost_types::field_descriptor_proto::{Label, Type};
    use prost_reflect::prost_types::{
        DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet,
    };
    let field = |name: &str, number: i32, kind: Type| FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(Label::Optional as i32),
        r#type: Some(kind as i32),
        json_name: Some(name.into()),
        ..Default::default()
    };
    let order = DescriptorProto {
        name: Some("Order".into()),
        field: vec![field("id", 1, Type::String), field("cents", 2, Type::Int64)],
        ..Default::default()
    };
    let file = FileDescriptorProto {
        name: Some("order.proto".into()),
        package: Some("shop.v1".into()),
        message_type: vec![order],
        syntax: Some("proto3".into()),
        ..Default::default()
    };
    FileDescriptorSet { file: vec![file] }.encode_to_vec()
}

/// An Order in AWS Glue's framing: header version 3, no compression, the schema version
/// UUID, the message index 0, the message.
fn glue_order(id: &str, cents: i64) -> Vec<u8> {
    use prost::Message;
    use prost_reflect::{DescriptorPool, DynamicMessage, Value as Proto};
    let pool = DescriptorPool::decode(order_descriptors().as_slice()).expect("descriptors");
    let mut order = DynamicMessage::new(pool.get_message_by_name("shop.v1.Order").expect("Order"));
    order.set_field_by_name("id", Proto::String(id.into()));
    order.set_field_by_name("cents", Proto::I64(cents));
    let mut out = vec![3, 0];
    out.extend_from_slice(&[7; 16]);
    out.push(0);
    out.extend(order.encode_to_vec());
    out
}

#[tokio::test]
async fn kafka_protobuf_values_reach_a_handler_as_json_and_undecodable_ones_are_reported() {
    // Given a processor reading Glue-framed Protobuf orders into a typed record
    #[derive(serde::Deserialize)]
    struct Order {
        id: String,
        cents: i64,
    }
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["DeadLetterTable"]).await;
    let letters = DeadLetters::new(setup, &tables["DeadLetterTable"], "orders");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = seen.clone();
    let values = KafkaValues::protobuf(
        "ORDERS_KAFKA_VALUE_DESCRIPTORS",
        &order_descriptors(),
        "shop.v1.Order",
    )
    .expect("descriptors");
    let p = dynamodb_exactly_once_lambda::processor::Processor::builder(
        "orders",
        move |r: dynamodb_exactly_once_lambda::processor::Record<Order>| {
            let keep = keep.clone();
            async move {
                if let Ok(mut seen) = keep.lock() {
                    seen.push((r.body.id, r.body.cents));
                }
                Ok::<(), dynamodb_exactly_once_lambda::processor::RecordError>(())
            }
        },
    )
    .dead_letters(letters.clone())
    .kafka_values(values)
    .build()
    .expect("processor");
    let mut truncated = glue_order("o-2", 5);
    // (Cut inside its last field: a message cut at a field boundary is a valid shorter one.)
    truncated.truncate(truncated.len() - 1);

    // When it runs a partition holding a good value, a truncated one, and another good one
    let records = [
        (0, 0, glue_order("o-1", -9_007_199_254_740_993)),
        (0, 1, truncated),
        (0, 2, glue_order("o-3", 7)),
    ];
    let report = p.handle_batch(&batch(&records), Deadline::none()).await;

    // Then the handler saw the good ones exactly (the later offset not held back), and the
    // undecodable one is a dead letter with its reason
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(
        seen,
        [
            ("o-1".to_string(), -9_007_199_254_740_993),
            ("o-3".to_string(), 7)
        ]
    );
    assert!(report.response.failed_ids().is_empty());
    let kept = letters.list().await.expect("letters");
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].position.id, "payments-0:1");
    assert_eq!(kept[0].reason.code.as_str(), "undecodable_value");
    assert!(
        kept[0].reason.message.contains("shop.v1.Order"),
        "{}",
        kept[0].reason.message
    );
}

/// The ratchet writer reading Avro values under the sample's schema file
/// (`events/schemas/rating.avsc`), its dead letters in the template's table, and the event
/// time at `event_time` when given.
fn avro_ratchet(
    setup: &aws_sdk_dynamodb::Client,
    tables: &std::collections::BTreeMap<String, String>,
    event_time: Option<EventTime>,
) -> Writer<dynamodb_exactly_once::ratchet::Ratchet> {
    let plain = crate::common::ratchet_writer_on(setup.clone(), tables);
    let schema = include_str!("../../events/schemas/rating.avsc");
    let mut builder = Writer::builder("ratchet-writer", plain.protocol().clone())
        .dead_letters(DeadLetters::new(
            setup.clone(),
            &tables["DeadLetterTable"],
            "ratchet-writer",
        ))
        .kafka_values(KafkaValues::avro("RATCHET_KAFKA_VALUE_SCHEMA", schema).expect("schema"));
    if let Some(event_time) = event_time {
        builder = builder.event_time(event_time);
    }
    builder.build().expect("writer")
}

#[tokio::test]
async fn kafka_the_avro_sample_event_applies_through_the_ratchet() {
    // Given the ratchet reading the sample's Avro values under its schema file
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
    let writer = avro_ratchet(&setup, &tables, None);
    let event = crate::common::fixture("ratchet-kafka-avro.json");

    // When the sample is handled
    let report = writer
        .handle_batch(&Batch::from_event(event).expect("Kafka"), Deadline::none())
        .await;

    // Then the Avro values are applied (Confluent and Glue, plain and zlib) and the JSON value
    // is a dead letter
    assert!(report.response.failed_ids().is_empty());
    let items = crate::common::scan(&setup, &tables["RatchetTable"]).await;
    assert_eq!(items["User#31|Movie#A"]["Rating"], json!(5));
    assert_eq!(items["User#31|Movie#A"]["Review"], json!("great"));
    assert_eq!(items["User#32|Movie#B"]["Rating"], json!(4));
    let letters = DeadLetters::new(setup, &tables["DeadLetterTable"], "ratchet-writer");
    let kept = letters.list().await.expect("letters");
    let kept: Vec<_> = kept
        .iter()
        .map(|l| (l.position.id.as_str(), l.reason.code.as_str()))
        .collect();
    assert_eq!(kept, [("ratings-avro-0:301", "undecodable_value")]);
}

#[tokio::test]
async fn kafka_an_avro_value_is_as_old_as_the_event_time_it_carries() {
    // Given the ratchet reading Avro values, its age guard told to read the producer's event
    // time at `/ts` of the decoded value (the sample's values were produced in July 2024,
    // their Kafka records re-stamped as arriving now)
    let setup = client();
    let tables = dev_testing::template_tables(&setup, &["RatchetTable", "DeadLetterTable"]).await;
    let pointer = EventTime::new("RATCHET_EVENT_TIME_POINTER", "/ts").expect("pointer");
    let writer = avro_ratchet(&setup, &tables, Some(pointer));
    let event = crate::common::fixture("ratchet-kafka-avro.json");

    // When the sample is handled as Lambda hands it over
    let response = writer
        .handle(LambdaEvent::new(event, Context::default()))
        .await
        .expect("handled");

    // Then every Avro value is kept as too old (older than the 7-day tombstone lifetime by
    // the event time it carries), none applied
    assert!(response.failed_ids().is_empty());
    assert!(crate::common::scan(&setup, &tables["RatchetTable"])
        .await
        .is_empty());
    let letters = DeadLetters::new(setup, &tables["DeadLetterTable"], "ratchet-writer");
    let mut codes: Vec<_> = letters
        .list()
        .await
        .expect("letters")
        .iter()
        .map(|l| (l.position.id.clone(), l.reason.code.as_str().to_owned()))
        .collect();
    codes.sort();
    assert!(
        codes
            .iter()
            .filter(|(id, _)| id != "ratings-avro-0:301")
            .all(|(_, code)| code == "too_old"),
        "{codes:?}"
    );
}
