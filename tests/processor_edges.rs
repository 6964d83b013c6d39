//! The batch processor at its edges: records held back behind a rejected one under the
//! default sink (never discarded unrun), raw bodies and record metadata, the Lambda context,
//! a budget below the deadline margin.

use std::time::Duration;

use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::dead_letter::ReportOnly;
use dynamodb_exactly_once_lambda::processor::{Processor, StreamOrder};
use dynamodb_exactly_once_lambda::Batch;
use serde_json::json;

use crate::processor::{
    dead_letters, handle, invocation, kinesis_event, kinesis_orders, order, Calls, Order,
};

fn defaults(calls: &Calls) -> Processor<Order> {
    let calls = calls.clone();
    Processor::builder("orders", move |r| handle(calls.clone(), r))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid processor")
}

#[tokio::test]
async fn an_ordered_stream_batch_without_a_chosen_sink_is_refused_before_anything_runs() {
    // Given the processor's defaults (no dead-letter sink chosen, shard order) and a Kinesis
    // batch whose head can never succeed
    let calls = Calls::default();
    let p = defaults(&calls);
    let mut records = vec![("k", "not JSON".to_string())];
    records.extend((1..4).map(|i| ("k", order(&format!("ok-{i}"), 1).to_string())));
    let event = kinesis_event(&records);

    // When it is delivered
    let refused = p.handle(invocation(event.clone(), 60_000)).await;

    // Then the invocation is refused, naming the choice to make, and nothing ran: the held
    // back records could otherwise be discarded by the source without ever running
    let err = refused.expect_err("refused");
    assert!(err.to_string().contains(".dead_letters("), "{err}");
    let batch = Batch::from_event(event.clone()).expect("batch");
    let report = p.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(report.response.failed_ids().len(), 4);
    assert!(calls.seen().is_empty(), "{:?}", calls.seen());

    // And an SQS batch, or a stream run unordered, is not affected
    let sqs = crate::processor::sqs_event(&[order("ok-9", 1)], None);
    assert!(p
        .handle(invocation(sqs, 60_000))
        .await
        .expect("sqs")
        .failed_ids()
        .is_empty());
}

#[tokio::test]
async fn report_only_chosen_explicitly_or_a_keeping_sink_runs_the_stream_batch() {
    let batch = |_: ()| {
        Batch::from_event(kinesis_orders(&[
            ("k", json!("not an order")),
            ("k", order("ok-1", 1)),
        ]))
        .expect("batch")
    };
    // ReportOnly chosen: the head is reported and the rest held back (they share its fate)
    let calls = Calls::default();
    let c = calls.clone();
    let p = Processor::builder("orders", move |r| handle(c.clone(), r))
        .dead_letters(ReportOnly)
        .build()
        .expect("processor");
    let report = p.handle_batch(&batch(()), Deadline::none()).await;
    assert_eq!(report.response.failed_ids().len(), 2);
    assert!(calls.seen().is_empty());
    // A keeping sink: the head is kept, the rest runs
    let calls = Calls::default();
    let c = calls.clone();
    let p = Processor::builder("orders", move |r| handle(c.clone(), r))
        .dead_letters(dead_letters().await)
        .stream_order(StreamOrder::Shard)
        .build()
        .expect("processor");
    let report = p.handle_batch(&batch(()), Deadline::none()).await;
    assert!(report.response.failed_ids().is_empty());
    assert_eq!(calls.seen(), ["ok-1"]);
}

#[tokio::test]
async fn an_invocation_budget_below_the_deadline_margin_still_runs_its_records() {
    // Given the default 2 s margin and a function whose timeout leaves 1.5 s
    let calls = Calls::default();
    let c = calls.clone();
    let p = Processor::builder("orders", move |r| handle(c.clone(), r))
        .build()
        .expect("processor");
    let sqs = crate::processor::sqs_event(&[order("ok-1", 1), order("ok-2", 1)], None);

    // When it is invoked
    let failed = p
        .handle(invocation(sqs, 1_500))
        .await
        .expect("answered")
        .failed_ids();

    // Then the invocation runs with a reduced margin (an ERROR names the timeout) instead of
    // deferring every record on every invocation
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(calls.seen().len(), 2);
}
