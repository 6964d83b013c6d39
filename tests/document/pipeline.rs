//! The document writer in the pipeline: bad paths and reserved attributes kept as dead
//! letters, a transient failure holding back its item's later records, the handler on the
//! `events/` fixtures, a Kinesis shard stopped at a failure.

use super::*;
#[tokio::test]
async fn bad_paths_and_reserved_attributes_are_rejected_and_kept_as_dead_letters() {
    let client = client();
    let (w, tables) = writer(&client).await;
    let bodies: Vec<Value> = [
        ("list_append", json!({"path": "friends", "values": ["zoe"]})),
        (
            "list_append",
            json!({"path": "friends..best", "values": ["x"]}),
        ),
        ("list_append", json!({"path": "friends[", "values": ["x"]})),
        ("set_add", json!({"path": "SK", "values": ["x"]})),
        ("set_add", json!({"path": "PK.nested", "values": ["x"]})),
        ("list_remove", json!({"path": "doc_version", "value": 1})),
        ("set_add", json!({"path": "doc_op2", "values": ["forged"]})),
        ("replace", json!({"document": {"doc_version": 99}})),
        // `friends` is a list: DynamoDB refuses a set operation on it.
        ("set_add", json!({"path": "friends", "values": ["x"]})),
    ]
    .into_iter()
    .map(|(op, fields)| rec(op, "u", fields))
    .collect();

    let report = w
        .handle_batch(&sqs_batch(&bodies, 0), Deadline::none())
        .await;

    assert!(
        report.response.failed_ids().is_empty(),
        "nothing blocks the source"
    );
    let labels: Vec<&str> = report.results.iter().map(|r| r.label()).collect();
    assert_eq!(labels[0], "applied");
    assert!(labels[1..].iter().all(|l| *l == "invalid"), "{labels:?}");
    assert_eq!(
        dead_letter_codes(&w).await,
        [
            "invalid_path",
            "invalid_path",
            "key_path",
            "key_path",
            "rejected_by_dynamodb",
            "reserved_attribute",
            "reserved_path",
            "reserved_path"
        ]
    );
    let item = &scan(&client, &tables["DocumentTable"]).await["u|d"];
    assert_eq!(item["friends"], json!(["zoe"]));
    assert_eq!(
        item["doc_version"],
        json!(1),
        "no protocol attribute was forged"
    );
    assert_ne!(item.get("doc_op2"), Some(&json!(["forged"])));
}

/// The reason codes of the writer's dead letters, sorted.
async fn dead_letter_codes(w: &Writer<Document>) -> Vec<String> {
    let letters = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    let mut codes: Vec<String> = letters.iter().map(|l| l.reason.code.to_string()).collect();
    codes.sort();
    codes
}

#[tokio::test]
async fn a_transient_failure_holds_back_the_items_later_records_until_redelivery() {
    // Given a client whose second UpdateItem is refused, items written one at a time
    let setup = client();
    let tables = tables(&setup).await;
    let faulty = client_with(Some(nth_update(1, Fault::Refuse)), 1);
    let config = DocumentConfig::builder(&tables["DocumentTable"])
        .concurrency(1)
        .build()
        .expect("valid configuration");
    let w = Writer::builder("document-writer", Document::new(faulty.clone(), config))
        .dead_letters(DeadLetters::new(
            faulty,
            &tables["DeadLetterTable"],
            "document-writer",
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer");
    let append = |pk: &str, v: &str| rec("list_append", pk, json!({"path": "l", "values": [v]}));
    let batch = sqs_batch(
        &[
            append("u", "a"),
            append("u", "b"),
            append("u", "c"),
            append("w", "z"),
        ],
        0,
    );

    // When the batch is applied
    let report = w.handle_batch(&batch, Deadline::none()).await;

    // Then b failed, c was held back behind it (not applied out of order), and so was w: the
    // document writer is not idempotent, so a batch stops at its first failure
    assert_eq!(report.response.failed_ids(), ["m1", "m2", "m3"]);
    for held in &report.results[2..] {
        assert!(
            matches!(held, RecordResult::Failed(RecordFailure::HeldBack { after }) if after == "m1"),
            "{held:?}"
        );
    }
    let items = scan(&setup, &tables["DocumentTable"]).await;
    assert_eq!(items["u|d"]["l"], json!(["a"]));
    assert!(!items.contains_key("w|d"));

    // And the redelivery applies them in order
    let retry = Batch::new(batch.kind, batch.records[1..].to_vec());
    assert!(w
        .handle_batch(&retry, Deadline::none())
        .await
        .response
        .failed_ids()
        .is_empty());
    let items = scan(&setup, &tables["DocumentTable"]).await;
    assert_eq!(items["u|d"]["l"], json!(["a", "b", "c"]));
    assert_eq!(items["w|d"]["l"], json!(["z"]));
}

#[tokio::test]
async fn handler_applies_the_sqs_and_kinesis_fixtures() {
    let client = client();
    for source in ["sqs", "kinesis"] {
        let (w, tables) = writer(&client).await;
        invoke(&w, &format!("document-{source}-batch.json")).await;
        let more = fixture(&format!("document-{source}-more.json"));
        let report = w
            .handle_batch(&Batch::from_event(more).expect("decodes"), Deadline::none())
            .await;
        let labels: Vec<&str> = report.results.iter().map(|r| r.label()).collect();
        assert_eq!(
            labels,
            ["applied", "absent", "applied", "conflict", "duplicate"]
        );

        let items = scan(&client, &tables["DocumentTable"]).await;
        let ann = &items["user#1|profile"];
        assert_eq!(ann["name"], json!("Ann"), "the stale replace conflicted");
        assert_eq!(ann["friends"], json!(["bob", "dave"]));
        assert_eq!(
            ann["profile"],
            json!({"city": "Lyon", "tags": ["aws", "rust"]})
        );
        assert_eq!(ann["doc_version"], json!(5));
        let two = &items["user#2|profile"];
        assert!(
            !two.contains_key("scores"),
            "the last score took the set with it"
        );
        assert_eq!(two["inbox"], json!([{"from": "ann", "text": "hi"}]));

        invoke(&w, &format!("document-{source}-malformed.json")).await;
        assert_eq!(
            dead_letter_codes(&w).await,
            [
                "bad_json",
                "invalid_path",
                "invalid_values",
                "key_path",
                "rejected_by_dynamodb",
                "reserved_attribute",
                "reserved_path",
                "unknown_op"
            ],
            "{source}"
        );
        let items = scan(&client, &tables["DocumentTable"]).await;
        assert_eq!(items["user#3|profile"]["friends"], json!(["zoe"]));
    }
}

/// Run a fixture through the handler; every record must be acknowledged.
async fn invoke(w: &Writer<Document>, name: &str) {
    let event = fixture(name);
    let kind = Batch::from_event(event.clone())
        .expect("fixture decodes")
        .kind;
    let expected = if name.contains("kinesis") {
        "Kinesis"
    } else {
        "Sqs"
    };
    assert_eq!(format!("{kind:?}"), expected, "{name}");
    let response = w
        .handle(LambdaEvent::new(event, Context::default()))
        .await
        .expect("handler");
    assert!(
        response.failed_ids().is_empty(),
        "{name}: {:?}",
        response.failed_ids()
    );
}

#[tokio::test]
async fn on_kinesis_a_failure_stops_the_shard_so_no_later_append_is_applied_twice() {
    // Given a Kinesis batch [u: append "a", w: append "z"] and DynamoDB refusing u's write
    let setup = client();
    let tables = tables(&setup).await;
    let refuse_u = FaultInjector::by_request(|op, body| {
        if op == "UpdateItem" && body.contains(r#"{"S":"u"}"#) {
            Fault::Refuse
        } else {
            Fault::None
        }
    });
    let faulty = writer_on(client_with(Some(refuse_u), 1), &tables);
    let append = |pk: &str, v: &str| rec("list_append", pk, json!({"path": "l", "values": [v]}));
    let batch = dev_testing::events::kinesis_batch(&[append("u", "a"), append("w", "z")]);

    // When the batch is handled, then delivered again as Kinesis does: from the lowest
    // reported sequence number on, every later record included
    let report = faulty.handle_batch(&batch, Deadline::none()).await;
    let failed = report.response.failed_ids();
    assert!(failed.contains(&batch.records[0].position.id), "{failed:?}");
    let lowest = failed.iter().min().cloned().unwrap_or_default();
    let again = Batch::new(
        batch.kind,
        batch
            .records
            .iter()
            .filter(|r| r.position.id >= lowest)
            .cloned()
            .collect(),
    );
    let healthy = writer_on(setup.clone(), &tables);
    assert!(healthy
        .handle_batch(&again, Deadline::none())
        .await
        .response
        .failed_ids()
        .is_empty());

    // Then each append is applied exactly once
    let items = scan(&setup, &tables["DocumentTable"]).await;
    assert_eq!(items["u|d"]["l"], json!(["a"]));
    assert_eq!(
        items["w|d"]["l"],
        json!(["z"]),
        "w's append was applied again by the redelivery"
    );
}
