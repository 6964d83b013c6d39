//! Every transaction's outcome is logged with its write count, members of a group commit
//! included.

use crate::common::LogCapture;

use crate::txn::env::*;
use dev_testing::client;
use dynamodb_exactly_once::batch::Protocol;
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::__private::json_subscriber;
use serde_json::Value;
use tracing_subscriber::EnvFilter;

#[tokio::test]
async fn every_member_of_a_group_commit_is_logged_with_its_outcome() {
    let base = client();
    let env = Env::new(&base).await.fast();
    let table = env.accounts().to_string();
    for a in 0..6 {
        seed(&base, &table, &format!("a{a}"), 100).await;
    }
    let c = env.coordinator(client());
    let records: Vec<_> = (0..3)
        .map(|t| {
            let body = transfer(
                &table,
                &format!("g{t}"),
                &format!("a{}", 2 * t),
                &format!("a{}", 2 * t + 1),
                10,
            );
            (t, message(&c, &body))
        })
        .collect();
    let capture = LogCapture::default();
    let guard =
        tracing::subscriber::set_default(json_subscriber(EnvFilter::new("info"), capture.clone()));
    let applied = c.apply(records, Deadline::none()).await;
    drop(guard);
    assert_eq!(applied.write_calls, 1, "one group call");
    let text = capture.text();
    let mut logged: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "transaction" || l["message"] == "transaction")
        .map(|l| {
            let fields = if l["fields"].is_object() {
                &l["fields"]
            } else {
                &l
            };
            format!(
                "{} {}",
                fields["tx_id"].as_str().unwrap_or("?"),
                fields["outcome"].as_str().unwrap_or("?")
            )
        })
        .collect();
    logged.sort();
    assert_eq!(
        logged,
        ["g0 committed", "g1 committed", "g2 committed"],
        "{text}"
    );
}
