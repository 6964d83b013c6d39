//! The example crates (`examples/*`): each one's handler on its own sample event, against
//! tables created from its own `template.yaml`, delivered twice. The second delivery is a
//! no-op: the tables are as the first left them, and its answer is the first's.

use std::collections::BTreeMap;
use std::path::PathBuf;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dev_testing::{client, unique_prefix, workspace_root};
use dynamodb_exactly_once_lambda::idempotency::IdempotencyError;
use idempotent_payment::{PaymentError, PaymentRequest};
use lambda_runtime::LambdaEvent;
use serde_json::Value;

use crate::processor::invocation;

/// `examples/<name>`.
fn example(name: &str) -> PathBuf {
    workspace_root().join("examples").join(name)
}

/// The example's sample event, as it is.
fn sample(name: &str, event: &str) -> Value {
    let path = example(name).join("events").join(event);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("sample event is JSON")
}

/// The tables of the example's template, under a unique prefix: logical id → name.
async fn tables(client: &Client, name: &str) -> BTreeMap<String, String> {
    let template = example(name).join("template.yaml");
    dynamo_provision::create_template_tables(client, &template, &unique_prefix(), &[])
        .await
        .unwrap_or_else(|e| panic!("creating the tables of {}: {e}", template.display()))
}

/// Every item of a table, attribute by attribute, in a stable order.
async fn items(client: &Client, table: &str) -> Vec<BTreeMap<String, AttributeValue>> {
    let page = client
        .scan()
        .table_name(table)
        .consistent_read(true)
        .send()
        .await
        .expect("scan");
    assert!(page.last_evaluated_key.is_none(), "one page");
    let mut items: Vec<BTreeMap<String, AttributeValue>> = page
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|item| item.into_iter().collect())
        .collect();
    items.sort_by_key(|item| format!("{item:?}"));
    items
}

fn number(item: &BTreeMap<String, AttributeValue>, name: &str) -> String {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.clone(),
        other => panic!("{name}: {other:?}"),
    }
}

#[tokio::test]
async fn processor_sqs_counts_each_order_once() {
    let client = client();
    let tables = tables(&client, "processor-sqs").await;
    let (totals, dead_letters) = (&tables["TotalsTable"], &tables["DeadLetterTable"]);
    let processor =
        processor_sqs::processor(client.clone(), totals, dead_letters).expect("valid processor");
    let event = sample("processor-sqs", "orders.json");

    // Given the sample batch delivered once:
    let first = processor
        .handle(invocation(event.clone(), 60_000))
        .await
        .expect("handled");
    assert!(first.failed_ids().is_empty(), "{:?}", first.failed_ids());
    let after_first = (
        items(&client, totals).await,
        items(&client, dead_letters).await,
    );
    let counted: Vec<(String, String, String)> = after_first
        .0
        .iter()
        .map(|i| {
            (
                format!("{:?}", i["PK"]),
                number(i, "orders"),
                number(i, "amountCents"),
            )
        })
        .collect();
    assert_eq!(
        counted,
        [
            (r#"S("customer#alice")"#.into(), "1".into(), "2599".into()),
            (r#"S("customer#bob")"#.into(), "1".into(), "1250".into()),
        ]
    );
    assert_eq!(
        after_first.1.len(),
        1,
        "o-1003 (a negative amount) kept as a dead letter"
    );

    // When it is delivered again, then nothing changes.
    let second = processor
        .handle(invocation(event, 60_000))
        .await
        .expect("handled");
    assert!(second.failed_ids().is_empty(), "{:?}", second.failed_ids());
    assert_eq!(items(&client, totals).await, after_first.0, "counted again");
    // The dead letter is written again: the same item, its `RejectedAt` the second's.
    let letters = |mut letters: Vec<BTreeMap<String, AttributeValue>>| {
        letters
            .iter_mut()
            .for_each(|l| drop(l.remove("RejectedAt")));
        letters
    };
    assert_eq!(
        letters(items(&client, dead_letters).await),
        letters(after_first.1),
        "another dead letter"
    );
}

#[tokio::test]
async fn idempotent_payment_charges_once_and_replays_the_receipt() {
    let client = client();
    let tables = tables(&client, "idempotent-payment").await;
    let table = &tables["IdempotencyTable"];
    let payments = idempotent_payment::payments(client.clone(), table).expect("valid config");
    let request = || -> LambdaEvent<PaymentRequest> {
        let payload = sample("idempotent-payment", "payment.json");
        let event = invocation(payload, 60_000);
        LambdaEvent::new(
            serde_json::from_value(event.payload).expect("a request"),
            event.context,
        )
    };

    // Given the sample request charged once:
    let first = idempotent_payment::handle(&payments, request())
        .await
        .expect("charged");
    let after_first = items(&client, table).await;
    assert_eq!(after_first.len(), 1);

    // When it comes again, then it gets the same receipt (a new charge would have a new id)
    // and the table is unchanged.
    let second = idempotent_payment::handle(&payments, request())
        .await
        .expect("replayed");
    assert_eq!(second, first);
    assert_eq!(items(&client, table).await, after_first);

    // The same payment id with another amount is refused, charging nothing.
    let mut other = request();
    other.payload.amount_cents += 1;
    let refused = idempotent_payment::handle(&payments, other).await;
    assert!(
        matches!(
            refused,
            Err(PaymentError::Idempotency(
                IdempotencyError::PayloadMismatch { .. }
            ))
        ),
        "{refused:?}"
    );
    assert_eq!(items(&client, table).await, after_first);
}
