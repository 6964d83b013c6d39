//! The counter writer as a Lambda handler: the `events/` fixtures counted once when
//! redelivered, malformed records kept as dead letters with their reason, the deadline.

use super::*;
#[tokio::test]
async fn handler_counts_the_sqs_and_kinesis_fixtures_once_even_when_redelivered() {
    let client = client();
    for source in ["sqs", "kinesis"] {
        let (w, tables) = counter_writer(client.clone()).await;
        for name in ["batch", "batch", "more", "batch", "more"] {
            let event = fixture(&format!("counter-{source}-{name}.json"));
            let response = w
                .handle(LambdaEvent::new(event, Context::default()))
                .await
                .expect("handler");
            assert!(response.failed_ids().is_empty(), "{source} {name}");
        }
        let got = counters(&client, &tables["CounterTable"]).await;
        assert_eq!(
            got["acct#42|2024-11-22"],
            BTreeMap::from([("logins".into(), 4), ("authz".into(), 14)]),
            "{source}"
        );
        assert_eq!(
            got["acct#7|2024-11-22"],
            BTreeMap::from([("logins".into(), 3), ("authz".into(), 5)])
        );
        assert_eq!(
            got["acct#42|2024-11-23"],
            BTreeMap::from([("logins".into(), 1), ("authz".into(), 1)])
        );
        assert_eq!(got.len(), 3);
    }
}

#[tokio::test]
async fn malformed_records_are_dead_lettered_with_their_reason() {
    let client = client();
    for source in ["sqs", "kinesis"] {
        let (w, tables) = counter_writer(client.clone()).await;
        let name = format!("counter-{source}-malformed.json");
        let (codes, _) = dead_letter_codes_of_fixture(&w, &name).await;

        assert_eq!(
            codes,
            [
                "bad_json",
                "invalid_add",
                "invalid_delta",
                "missing_idempotency_key",
                "reserved_attribute"
            ],
            "{source}"
        );
        let got = counters(&client, &tables["CounterTable"]).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got["acct#9|2024-11-22"]["logins"], 1);
    }
}

#[tokio::test]
async fn nothing_is_started_after_the_deadline() {
    let client = client();
    let (w, tables) = counter_writer(client.clone()).await;
    let batch = sqs_batch(&traffic(4, 2, 0, "late"), 0);

    let report = w
        .handle_batch(
            &batch,
            Deadline::from_epoch_ms(1_700_000_000_000, Duration::ZERO),
        )
        .await;

    assert_eq!(report.summary.count("deferred"), 4);
    assert_eq!(report.response.failed_ids().len(), 4);
    assert!(scan(&client, &tables["CounterTable"]).await.is_empty());
}

#[test]
fn counter_fixtures_decode_as_their_source() {
    for name in ["batch", "more", "malformed"] {
        for (source, kind) in [("sqs", "Sqs"), ("kinesis", "Kinesis")] {
            let batch = Batch::from_event(fixture(&format!("counter-{source}-{name}.json")))
                .expect("decodes");
            assert_eq!(format!("{:?}", batch.kind), kind);
            assert!(!batch.records.is_empty());
        }
    }
}
