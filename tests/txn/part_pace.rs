//! A large TX record's part items (up to 350 KB each, 350 write units) share one partition key
//! (`TxId`), and one partition takes at most 1,000 write units per second: parts are written
//! in waves of two, a wave starting a second after the previous one answered, so no second
//! ever sees more than two part writes of one record (counted through an SDK interceptor).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::txn::env::*;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::txn::TxOutcome;
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Value};

#[tokio::test]
async fn the_parts_of_a_large_record_are_written_at_most_two_per_second() {
    let base = client();
    let env = Env::new(&base).await.lock_path();
    let table = env.accounts().to_string();
    // Part writes as sent: partition key (`TxId`) → send times.
    let sent: Arc<Mutex<BTreeMap<String, Vec<Instant>>>> = Arc::default();
    let seen = Arc::clone(&sent);
    let counting = FaultInjector::by_request(move |op, body| {
        let part: Option<Value> = (op == "PutItem" && body.contains(r#""Part":{"S":"p#"#))
            .then(|| serde_json::from_str(body).ok())
            .flatten();
        if let Some(tx) = part.as_ref().and_then(|b| b["Item"]["TxId"]["S"].as_str()) {
            if let Ok(mut m) = seen.lock() {
                m.entry(tx.to_string()).or_default().push(Instant::now());
            }
        }
        Fault::None
    });
    let c = env.coordinator(client_with(Some(counting), 3));
    // Three puts of 250 KB: about 750 KB of requests JSON, three parts.
    let blob = "x".repeat(250 * 1024);
    let requests: Vec<Value> = (0..3)
        .map(|i| json!({"Put":{"TableName":table,"Item":{"PK":format!("big{i}"),"blob":blob}}}))
        .collect();
    let body = json!({"txId":"t-paced","requests":requests});
    let report = c
        .run(&message(&c, &body), Deadline::none())
        .await
        .expect("a large transaction");
    assert_eq!(report.outcome, TxOutcome::Committed);
    let sent = sent.lock().map(|m| m.clone()).unwrap_or_default();
    let times = &sent["t-paced"];
    assert_eq!(times.len(), 3, "three parts");
    // Any part write and the one two writes later are more than a second apart.
    for (k, pair) in times.windows(3).enumerate() {
        let apart = pair[2].duration_since(pair[0]);
        assert!(
            apart >= Duration::from_secs(1),
            "part writes {k} and {} of one partition key {apart:?} apart",
            k + 2
        );
    }
    assert_clean(&base, &env).await;
}
