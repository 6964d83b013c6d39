//! A [`Writer`] takes any dead-letter sink, as the processor does: a record it rejects is
//! acknowledged once the SQS sink's letter is accepted (reported when SQS refuses it), and
//! reported for the source's own dead-letter queue under [`ReportOnly`]; a writer whose
//! protocol applies stream batches in order is refused without a chosen sink.

use crate::common::put;
use crate::sqs_support::{sqs_client, Answer, FakeSqs};

use std::time::Duration;

use dev_testing::{client, events::sqs_batch, template_tables};
use dynamodb_exactly_once::document::{Document, DocumentConfig};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetConfig};
use dynamodb_exactly_once::{Deadline, RecordResult};
use dynamodb_exactly_once_lambda::dead_letter::{
    DeadLetterSink, ReportOnly, SqsDeadLetters, SqsLetter,
};
use dynamodb_exactly_once_lambda::Writer;
use serde_json::json;

const FUNCTION: &str = "ratchet-writer";

async fn ratchet_writer(sink: impl DeadLetterSink + 'static) -> Writer<Ratchet> {
    let c = client();
    let tables = template_tables(&c, &["RatchetTable"]).await;
    let ratchet = Ratchet::new(
        c,
        RatchetConfig::builder(&tables["RatchetTable"])
            .build()
            .expect("valid configuration"),
    );
    Writer::builder(FUNCTION, ratchet)
        .dead_letters(sink)
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer")
}

/// A good put (`m0`) and a body that is not a ratchet record (`m1`).
fn batch_with_a_bad_record() -> dynamodb_exactly_once_lambda::Batch {
    sqs_batch(
        &[put("u", "a", 1, json!({"v": 1})), json!({"op": "upsert"})],
        0,
    )
}

#[tokio::test]
async fn a_writer_with_the_sqs_sink_acknowledges_a_bad_record_once_sqs_took_its_letter() {
    // Given a ratchet writer whose dead letters go to an SQS queue
    let sqs = FakeSqs::start(Answer::Accept, false).await;
    let url = sqs.queue_url("dead-letters");
    let w = ratchet_writer(SqsDeadLetters::new(
        sqs_client(&sqs.endpoint(), false),
        &url,
        FUNCTION,
    ))
    .await;
    assert!(w.dead_letter_table().is_none());

    // When a batch with a record it cannot parse runs
    let report = w
        .handle_batch(&batch_with_a_bad_record(), Deadline::none())
        .await;

    // Then both are acknowledged: the good one applied, the bad one sent as a letter
    assert!(report.response.failed_ids().is_empty(), "{report:?}");
    assert!(matches!(report.results[0], RecordResult::Done(_)));
    assert!(matches!(report.results[1], RecordResult::Rejected(_)));
    assert_eq!(
        report.summary.outcomes.get("invalid"),
        Some(&1),
        "{report:?}"
    );
    let requests = sqs.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["QueueUrl"], url.as_str());
    let body = requests[0].body["MessageBody"]
        .as_str()
        .expect("a message body");
    let letter: SqsLetter = serde_json::from_str(body).expect("an SqsLetter");
    assert_eq!(letter.position.id, "m1");
    assert_eq!(letter.function, FUNCTION);
}

#[tokio::test]
async fn a_writer_with_the_sqs_sink_reports_a_bad_record_whose_letter_sqs_refused() {
    // Given a writer whose queue SQS says does not exist
    let sqs = FakeSqs::start(Answer::Refuse, false).await;
    let w = ratchet_writer(SqsDeadLetters::new(
        sqs_client(&sqs.endpoint(), false),
        sqs.queue_url("deleted"),
        FUNCTION,
    ))
    .await;

    // When a batch with a record it cannot parse runs
    let report = w
        .handle_batch(&batch_with_a_bad_record(), Deadline::none())
        .await;

    // Then the bad record is reported for redelivery, the good one is not
    assert_eq!(report.response.failed_ids(), ["m1"], "{report:?}");
    assert_eq!(sqs.requests().len(), 1);
}

#[tokio::test]
async fn a_writer_with_report_only_reports_a_bad_record_for_the_sources_dead_letter_queue() {
    // Given a writer that keeps no dead letters
    let w = ratchet_writer(ReportOnly).await;
    assert_eq!(w.dead_letters().target(), "report-only");

    // When a batch with a record it cannot parse runs
    let report = w
        .handle_batch(&batch_with_a_bad_record(), Deadline::none())
        .await;

    // Then the bad record is reported (the queue's redrive policy takes it), the good one
    // applied and acknowledged
    assert_eq!(report.response.failed_ids(), ["m1"], "{report:?}");
    assert!(matches!(report.results[0], RecordResult::Done(_)));
    assert_eq!(
        report.summary.outcomes.get("rejected_reported"),
        Some(&1),
        "{report:?}"
    );
    assert_eq!(report.summary.outcomes.get("invalid"), None, "{report:?}");
}

#[test]
fn a_writer_applying_stream_batches_in_order_needs_a_chosen_sink() {
    // The document protocol is not idempotent under redelivery: its batches run in order.
    let offline = || {
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::Config::builder()
                .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
                .build(),
        )
    };
    let document = || {
        Document::new(
            offline(),
            DocumentConfig::builder("Docs").build().expect("valid"),
        )
    };
    let err = Writer::builder("document-writer", document())
        .build()
        .expect_err("no sink chosen");
    assert_eq!(err.setting, "dead_letters");
    assert!(
        err.message.contains(".dead_letters(ReportOnly)"),
        "{}",
        err.message
    );
    assert!(Writer::builder("document-writer", document())
        .dead_letters(ReportOnly)
        .build()
        .is_ok());
    // An idempotent protocol without a chosen sink reports rejected records.
    let ratchet = Ratchet::new(
        offline(),
        RatchetConfig::builder("Items").build().expect("valid"),
    );
    let w = Writer::builder(FUNCTION, ratchet)
        .build()
        .expect("a writer");
    assert_eq!(w.dead_letters().target(), "report-only");
}
