use std::collections::HashMap;

use super::*;

const SPEC: FunctionSpec = FunctionSpec {
    name: "sink-test",
    env_prefix: "SINKTEST",
};

fn choice(vars: &[(&str, &str)]) -> Result<SinkChoice, ConfigError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    SinkChoice::from_vars(&SPEC, |name| vars.get(name).cloned())
}

#[test]
fn the_dead_letter_sink_is_the_table_by_default_and_needs_its_name() {
    let table = [("SINKTEST_DEAD_LETTER_TABLE", "letters")];
    assert_eq!(
        choice(&table).ok(),
        Some(SinkChoice::Table("letters".into()))
    );
    let explicit = [table[0], ("SINKTEST_DEAD_LETTER_SINK", " Table ")];
    assert_eq!(
        choice(&explicit).ok(),
        Some(SinkChoice::Table("letters".into()))
    );
    let err = choice(&[]).expect_err("no table");
    assert_eq!(err.setting, "SINKTEST_DEAD_LETTER_TABLE");
    let err = choice(&[("SINKTEST_DEAD_LETTER_SINK", "table")]).expect_err("no table");
    assert_eq!(err.setting, "SINKTEST_DEAD_LETTER_TABLE");
}

#[test]
fn the_sqs_sink_needs_its_queue_url_and_not_the_table() {
    let sqs = [
        ("SINKTEST_DEAD_LETTER_SINK", "sqs"),
        (
            "SINKTEST_DEAD_LETTER_QUEUE_URL",
            "https://sqs.eu-west-1.amazonaws.com/1/dlq",
        ),
    ];
    assert_eq!(
        choice(&sqs).ok(),
        Some(SinkChoice::Sqs(
            "https://sqs.eu-west-1.amazonaws.com/1/dlq".into()
        ))
    );
    let err = choice(&sqs[..1]).expect_err("no queue URL");
    assert_eq!(err.setting, "SINKTEST_DEAD_LETTER_QUEUE_URL");
    assert!(
        err.message.contains("SINKTEST_DEAD_LETTER_SINK is sqs"),
        "{}",
        err.message
    );
}

#[test]
fn the_report_sink_needs_nothing_else() {
    assert_eq!(
        choice(&[("SINKTEST_DEAD_LETTER_SINK", "report")]).ok(),
        Some(SinkChoice::Report)
    );
}

#[test]
fn an_unknown_dead_letter_sink_is_refused_naming_its_variable() {
    let err = choice(&[
        ("SINKTEST_DEAD_LETTER_SINK", "s3"),
        ("SINKTEST_DEAD_LETTER_TABLE", "letters"),
    ])
    .expect_err("not a sink");
    assert_eq!(err.setting, "SINKTEST_DEAD_LETTER_SINK");
    assert!(
        err.message.contains("table (the default), sqs or report"),
        "{}",
        err.message
    );
}

#[test]
fn a_deadline_margin_below_the_answer_margin_is_refused_naming_its_variable() {
    let spec = FunctionSpec {
        name: "writer-test",
        env_prefix: "WRITERTEST",
    };
    // Variables of this test's own prefix only: nothing else reads them.
    assert_eq!(
        deadline_margin_from_env(&spec).ok(),
        Some(DEFAULT_DEADLINE_MARGIN)
    );
    std::env::set_var("WRITERTEST_DEADLINE_MARGIN_MS", "100");
    let err = deadline_margin_from_env(&spec).expect_err("below 250 ms");
    assert_eq!(err.setting, "WRITERTEST_DEADLINE_MARGIN_MS");
    assert!(err.message.contains("at least 250 ms"), "{}", err.message);
    std::env::set_var("WRITERTEST_DEADLINE_MARGIN_MS", "250");
    assert_eq!(
        deadline_margin_from_env(&spec).ok(),
        Some(Duration::from_millis(250))
    );
}

fn offline_client() -> Client {
    Client::from_conf(
        aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build(),
    )
}

#[tokio::test]
async fn a_record_mapping_of_the_wrong_shape_refuses_to_build_the_writer() {
    use dynamodb_exactly_once::counter::Counter;
    let spec = FunctionSpec {
        name: "writer-shape-test",
        env_prefix: "WRITERSHAPE",
    };
    // Variables of this test's own prefix only: nothing else reads them.
    std::env::set_var("WRITERSHAPE_DEAD_LETTER_TABLE", "letters");
    std::env::set_var("WRITERSHAPE_TABLE", "counters");
    std::env::set_var(
        "WRITERSHAPE_RECORD_MAPPING",
        r#"{"key":{"PK":"/customer"},"add":{"n":1},"idempotency_key":"$id"}"#,
    );
    let err = writer_from_env::<Counter>(offline_client(), spec)
        .await
        .expect_err("misspelled");
    assert_eq!(err.setting, "WRITERSHAPE_RECORD_MAPPING");
    assert!(
        err.message.contains("did you mean `idempotencyKey`"),
        "{}",
        err.message
    );
    std::env::set_var(
        "WRITERSHAPE_RECORD_MAPPING",
        r#"{"key":{"PK":"/customer"},"add":{"n":1},"idempotencyKey":"$id"}"#,
    );
    let writer = writer_from_env::<Counter>(offline_client(), spec)
        .await
        .expect("a writer");
    assert_eq!(
        writer.dead_letter_table().map(DeadLetters::table),
        Some("letters")
    );
}

#[tokio::test]
async fn each_sink_value_builds_its_sink() {
    use dynamodb_exactly_once::counter::Counter;
    let spec = FunctionSpec {
        name: "writer-sink-test",
        env_prefix: "WRITERSINK",
    };
    // Variables of this test's own prefix only: nothing else reads them.
    std::env::set_var("WRITERSINK_TABLE", "counters");
    std::env::set_var("WRITERSINK_DEAD_LETTER_SINK", "report");
    let writer = writer_from_env::<Counter>(offline_client(), spec)
        .await
        .expect("a writer");
    assert_eq!(writer.dead_letters().target(), "report-only");
    assert!(writer.dead_letter_table().is_none());
    std::env::set_var("WRITERSINK_DEAD_LETTER_SINK", "sqs");
    std::env::set_var(
        "WRITERSINK_DEAD_LETTER_QUEUE_URL",
        "http://127.0.0.1:9/1/dlq",
    );
    let built = writer_from_env::<Counter>(offline_client(), spec).await;
    #[cfg(feature = "sqs")]
    assert_eq!(
        built.expect("a writer").dead_letters().target(),
        "http://127.0.0.1:9/1/dlq"
    );
    #[cfg(not(feature = "sqs"))]
    assert_eq!(
        built.expect_err("no SQS sink").setting,
        "WRITERSINK_DEAD_LETTER_SINK"
    );
}
