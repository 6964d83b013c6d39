//! Real encoded values: Avro written by `apache-avro`, Protobuf by `prost-reflect`, framed as
//! Confluent's and AWS Glue's serializers frame them.

use apache_avro::types::{Record, Value as Avro};
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::{Decimal, Schema};
use dynamodb_exactly_once::RejectionCode;
use prost_reflect::prost::Message;
use prost_reflect::prost_types::{
    field_descriptor_proto::{Label, Type},
    DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet,
};
use prost_reflect::{DescriptorPool, DynamicMessage, Value as Proto};
use serde_json::{json, Value};

use super::{Framing, KafkaValues, MAX_DETAIL_CHARS};

const ORDER_AVSC: &str = r#"{"type": "record", "name": "Order", "namespace": "shop",
  "fields": [
    {"name": "id", "type": "string"},
    {"name": "amount", "type": "long"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 2}},
    {"name": "note", "type": ["null", "string"], "default": null},
    {"name": "tags", "type": {"type": "array", "items": "string"}}
  ]}"#;

/// An Order with an amount f64 cannot hold (2^53 + 1) and a price of 12345678901234567.89.
fn avro_order() -> Vec<u8> {
    let schema = Schema::parse_str(ORDER_AVSC).expect("schema");
    let mut record = Record::new(&schema).expect("a record schema");
    record.put("id", "o-1");
    record.put("amount", Avro::Long(9_007_199_254_740_993));
    let unscaled = num_bigint::BigInt::from(1_234_567_890_123_456_789_i64);
    record.put(
        "price",
        Avro::Decimal(Decimal::from(unscaled.to_signed_bytes_be())),
    );
    record.put(
        "note",
        Avro::Union(1, Box::new(Avro::String("gift".into()))),
    );
    record.put("tags", Avro::Array(vec![Avro::String("a".into())]));
    encode(&schema, record)
}

fn encode(schema: &Schema, record: Record<'_>) -> Vec<u8> {
    let writer = GenericDatumWriter::builder(schema).build().expect("writer");
    writer.write_value_to_vec(record).expect("encodes")
}

fn confluent(schema_id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&schema_id.to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn glue(compression: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![3, compression];
    out.extend_from_slice(&[0xab; 16]);
    out.extend_from_slice(body);
    out
}

fn decoded(values: &KafkaValues, bytes: &[u8]) -> Value {
    let json = values.decode(bytes).expect("decodes");
    serde_json::from_slice(&json).expect("JSON")
}

fn undecodable(values: &KafkaValues, bytes: &[u8]) -> String {
    let rejection = values.decode(bytes).expect_err("undecodable");
    assert_eq!(rejection.code, RejectionCode::UndecodableValue);
    rejection.message
}

fn avro_values() -> KafkaValues {
    KafkaValues::avro("S", ORDER_AVSC).expect("a schema")
}

#[test]
fn confluent_avro_value_decodes_with_exact_long_and_decimal() {
    let got = decoded(&avro_values(), &confluent(42, &avro_order()));
    assert_eq!(
        got,
        json!({"id": "o-1", "amount": 9_007_199_254_740_993_i64,
               "price": serde_json::Number::from_string_unchecked("12345678901234567.89".into()),
               "note": "gift", "tags": ["a"]})
    );
    // The text the mapping reads: the numbers as written, not through f64.
    let text = String::from_utf8(
        avro_values()
            .decode(&confluent(42, &avro_order()))
            .expect("decodes"),
    )
    .expect("utf-8");
    assert!(text.contains("\"amount\":9007199254740993"), "{text}");
    assert!(text.contains("\"price\":12345678901234567.89"), "{text}");
}

#[test]
fn glue_avro_value_decodes_compressed_or_not() {
    let body = avro_order();
    let plain = decoded(&avro_values(), &glue(0, &body));
    let zlib = miniz_oxide::deflate::compress_to_vec_zlib(&body, 6);
    assert_eq!(decoded(&avro_values(), &glue(5, &zlib)), plain);
    assert_eq!(plain["id"], "o-1");
}

#[test]
fn unframed_avro_needs_the_framing_none() {
    let values = avro_values().with_framing(Framing::None);
    assert_eq!(decoded(&values, &avro_order())["id"], "o-1");
}

#[test]
fn wrong_magic_byte_is_undecodable() {
    let mut bytes = confluent(42, &avro_order());
    bytes[0] = 7;
    let why = undecodable(&avro_values(), &bytes);
    assert!(why.contains("first byte is 7"), "{why}");
    undecodable(&avro_values(), &[]);
    let why = undecodable(&avro_values(), &glue(9, &avro_order()));
    assert!(why.contains("compression byte is 9"), "{why}");
}

#[test]
fn truncated_value_is_undecodable() {
    let bytes = confluent(42, &avro_order());
    let why = undecodable(&avro_values(), &bytes[..bytes.len() - 3]);
    assert!(why.contains("not Avro of the configured schema"), "{why}");
    undecodable(&avro_values(), &bytes[..3]);
    undecodable(&avro_values(), &glue(0, &[])[..10]);
    let why = undecodable(&avro_values(), &glue(5, b"not zlib at all"));
    assert!(why.contains("zlib"), "{why}");
}

#[test]
fn value_written_under_another_schema_is_undecodable() {
    let other = Schema::parse_str(
        r#"{"type": "record", "name": "Order", "namespace": "shop",
            "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"},
                       {"name": "extra", "type": "string"}]}"#,
    )
    .expect("schema");
    let mut record = Record::new(&other).expect("record");
    record.put("id", "o-1");
    record.put("qty", 3);
    record.put("extra", "x".repeat(40));
    let bytes = confluent(43, &encode(&other, record));
    undecodable(&avro_values(), &bytes);
}

#[test]
fn the_dead_letter_reason_is_bounded() {
    let why = undecodable(&avro_values(), &vec![9; 100_000]);
    assert!(
        why.chars().count() <= MAX_DETAIL_CHARS + 64,
        "{}",
        why.len()
    );
}

/// `shop.v1`: `Order {string id = 1; int64 amount = 2; Line line = 3; message Line {uint64
/// qty = 1;}}` and `Refund {string id = 1;}`.
fn descriptors() -> Vec<u8> {
    let field =
        |name: &str, number: i32, kind: Type, type_name: Option<&str>| FieldDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            label: Some(Label::Optional as i32),
            r#type: Some(kind as i32),
            type_name: type_name.map(str::to_string),
            json_name: Some(name.into()),
            ..Default::default()
        };
    let line = DescriptorProto {
        name: Some("Line".into()),
        field: vec![field("qty", 1, Type::Uint64, None)],
        ..Default::default()
    };
    let order = DescriptorProto {
        name: Some("Order".into()),
        field: vec![
            field("id", 1, Type::String, None),
            field("amount", 2, Type::Int64, None),
            field("line", 3, Type::Message, Some(".shop.v1.Order.Line")),
        ],
        nested_type: vec![line],
        ..Default::default()
    };
    let refund = DescriptorProto {
        name: Some("Refund".into()),
        field: vec![field("id", 1, Type::String, None)],
        ..Default::default()
    };
    let file = FileDescriptorProto {
        name: Some("shop.proto".into()),
        package: Some("shop.v1".into()),
        message_type: vec![order, refund],
        syntax: Some("proto3".into()),
        ..Default::default()
    };
    FileDescriptorSet { file: vec![file] }.encode_to_vec()
}

fn proto_order() -> Vec<u8> {
    let pool = DescriptorPool::decode(descriptors().as_slice()).expect("pool");
    let order = pool.get_message_by_name("shop.v1.Order").expect("Order");
    let line = pool
        .get_message_by_name("shop.v1.Order.Line")
        .expect("Line");
    let mut msg = DynamicMessage::new(order);
    msg.set_field_by_name("id", Proto::String("o-1".into()));
    msg.set_field_by_name("amount", Proto::I64(-9_007_199_254_740_993));
    let mut l = DynamicMessage::new(line);
    l.set_field_by_name("qty", Proto::U64(u64::MAX));
    msg.set_field_by_name("line", Proto::Message(l));
    msg.encode_to_vec()
}

fn proto_values() -> KafkaValues {
    KafkaValues::protobuf("D", &descriptors(), "shop.v1.Order").expect("descriptors")
}

#[test]
fn glue_protobuf_value_decodes_with_exact_int64() {
    // Glue's index of Order among the file's messages sorted by full name: Order = 0,
    // Order.Line = 1, Refund = 2.
    let mut body = vec![0];
    body.extend(proto_order());
    let zlib = miniz_oxide::deflate::compress_to_vec_zlib(&body, 6);
    let got = decoded(&proto_values(), &glue(5, &zlib));
    assert_eq!(
        got,
        json!({"id": "o-1", "amount": -9_007_199_254_740_993_i64, "line": {"qty": u64::MAX}})
    );
    let text =
        String::from_utf8(proto_values().decode(&glue(5, &zlib)).expect("decodes")).expect("utf-8");
    assert!(text.contains("\"amount\":-9007199254740993"), "{text}");
}

#[test]
fn confluent_protobuf_value_decodes_after_its_message_indexes() {
    // A count of 0: the file's first message.
    let mut short = vec![0];
    short.extend(proto_order());
    assert_eq!(decoded(&proto_values(), &confluent(7, &short))["id"], "o-1");
    // The explicit path [0] (count 1, index 0; zig-zag: 2, 0).
    let mut long = vec![2, 0];
    long.extend(proto_order());
    assert_eq!(
        decoded(&proto_values(), &confluent(7, &long))["amount"],
        json!(-9_007_199_254_740_993_i64)
    );
}

#[test]
fn protobuf_value_of_another_message_is_undecodable() {
    // Confluent path [1]: Refund.
    let mut refund = vec![2, 2];
    refund.extend(proto_order());
    let why = undecodable(&proto_values(), &confluent(7, &refund));
    assert!(why.contains("shop.v1.Refund"), "{why}");
    // Glue index 1: Order.Line.
    let mut line = vec![1];
    line.extend(proto_order());
    let why = undecodable(&proto_values(), &glue(0, &line));
    assert!(why.contains("shop.v1.Order.Line"), "{why}");
    // An index out of the file.
    let mut far = vec![9];
    far.extend(proto_order());
    undecodable(&proto_values(), &glue(0, &far));
}

#[test]
fn truncated_protobuf_value_is_undecodable() {
    let mut body = vec![0];
    body.extend(proto_order());
    let bytes = confluent(7, &body);
    let why = undecodable(&proto_values(), &bytes[..bytes.len() - 4]);
    assert!(why.contains("not a Protobuf shop.v1.Order"), "{why}");
    // Indexes cut off inside a varint.
    undecodable(&proto_values(), &confluent(7, &[0x80]));
}

#[test]
fn bad_settings_refuse_to_start() {
    assert!(KafkaValues::avro("S", "{not json").is_err());
    assert!(KafkaValues::protobuf("D", &descriptors(), "shop.v1.Nope").is_err());
    assert!(KafkaValues::protobuf("D", b"\xff\xff", "shop.v1.Order").is_err());
}

#[test]
fn settings_choose_the_format_and_refuse_what_is_missing() {
    use crate::settings::FunctionSpec;
    let spec = FunctionSpec::new("values-test", "VALUESTEST");
    assert!(KafkaValues::from_env(&spec).expect("json").is_none());
    std::env::set_var("VALUESTEST_KAFKA_VALUE_FORMAT", "avro");
    let missing = KafkaValues::from_env(&spec).expect_err("no schema");
    assert!(
        missing
            .to_string()
            .contains("VALUESTEST_KAFKA_VALUE_SCHEMA"),
        "{missing}"
    );
    std::env::set_var("VALUESTEST_KAFKA_VALUE_SCHEMA", ORDER_AVSC);
    std::env::set_var("VALUESTEST_KAFKA_VALUE_FRAMING", "none");
    let values = KafkaValues::from_env(&spec).expect("avro").expect("some");
    assert_eq!(values.framing(), Framing::None);
    assert_eq!(decoded(&values, &avro_order())["id"], "o-1");
    std::env::set_var("VALUESTEST_KAFKA_VALUE_FORMAT", "thrift");
    assert!(KafkaValues::from_env(&spec).is_err());
}
