//! The ratchet writer's dead letters: each malformed kind kept with its reason, replayed
//! after a fix and removed, oversized items and schema mismatches kept.

use super::*;

#[tokio::test]
async fn each_malformed_kind_is_rejected_with_its_reason_and_kept() {
    let client = client();
    for source in ["sqs", "kinesis"] {
        let (w, tables) = ratchet_writer(client.clone()).await;
        let name = format!("ratchet-{source}-malformed.json");
        let (codes, batch) = dead_letter_codes_of_fixture(&w, &name).await;

        assert_eq!(
            codes,
            [
                "bad_json",
                "invalid_timestamp",
                "key_mismatch",
                "missing_timestamp",
                "reserved_attribute",
                "unknown_op"
            ],
            "{source}"
        );
        let items = scan(&client, &tables["RatchetTable"]).await;
        assert_eq!(
            items.keys().collect::<Vec<_>>(),
            ["User#4|Movie#D"],
            "the valid record was applied"
        );

        // Redelivery overwrites the same dead letters instead of piling up copies.
        let _ = w.handle_batch(&batch, Deadline::none()).await;
        assert_eq!(
            w.dead_letter_table()
                .expect("a dead-letter table")
                .list()
                .await
                .expect("list")
                .len(),
            codes.len()
        );
    }
}

#[tokio::test]
async fn dead_letters_are_replayed_after_a_fix_and_removed() {
    // Given a writer configured with `Version` as its timestamp attribute: a payload setting
    // `Version` is rejected as reserved, and garbage is rejected as bad JSON.
    let client = client();
    let tables = dev_testing::template_tables(&client, &["RatchetTable", "DeadLetterTable"]).await;
    let mut misconfigured = ratchet_writer_on(client.clone(), &tables);
    misconfigured = crate::common::with_protocol(
        &misconfigured,
        dynamodb_exactly_once::ratchet::Ratchet::new(
            client.clone(),
            dynamodb_exactly_once::ratchet::RatchetConfig::builder(&tables["RatchetTable"])
                .ts_attribute("Version")
                .build()
                .expect("valid configuration"),
        ),
    );
    let batch = sqs_batch(
        &[put("u", "a", 1, json!({"Version": 3})), json!("garbage")],
        0,
    );
    let _ = misconfigured.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(
        misconfigured
            .dead_letter_table()
            .expect("a dead-letter table")
            .list()
            .await
            .expect("list")
            .len(),
        2
    );

    // When the configuration is fixed and the dead letters are replayed
    let fixed = ratchet_writer_on(client.clone(), &tables);
    let report = fixed
        .replay_dead_letters(
            fixed.dead_letter_table().expect("a dead-letter table"),
            &dynamodb_exactly_once_lambda::ReplayScope::all(),
        )
        .await
        .expect("replay");

    // Then the fixed record is applied and its dead letter removed; the garbage stays.
    assert_eq!(
        report.replayed,
        ["ratchet-writer|sqs|arn:aws:sqs:us-east-1:1:q|m0"]
    );
    assert_eq!(report.still_rejected.len(), 1);
    assert_eq!(report.still_rejected[0].1.code, "not_an_object");
    let left = fixed
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("list");
    assert_eq!(
        left.iter()
            .map(|l| l.position.id.as_str())
            .collect::<Vec<_>>(),
        ["m1"]
    );
    let item = fixed
        .protocol()
        .get_json(&key("u", "a"), dynamodb_exactly_once::Read::Consistent)
        .await
        .expect("get")
        .expect("applied");
    assert_eq!(item["Version"], json!(3));
}

#[tokio::test]
async fn oversized_item_and_schema_mismatch_are_dead_lettered() {
    let client = client();
    let (w, _) = ratchet_writer(client.clone()).await;
    let big = put("u", "big", 1, json!({"blob": "x".repeat(410 * 1024)}));
    let big_body = big.clone();
    // The table's key is PK+SK: the writer refuses this key before writing (invalid_key).
    let wrong_schema = json!({"op":"put","key":{"PK":"u"},"ts":1,"item":{"v":1}});
    let fine = put("u", "ok", 1, json!({"v":1}));

    let report = w
        .handle_batch(&sqs_batch(&[big, wrong_schema, fine], 0), Deadline::none())
        .await;

    assert!(report.response.failed_ids().is_empty());
    let labels: Vec<&str> = report.results.iter().map(|r| r.label()).collect();
    assert_eq!(labels, ["invalid", "invalid", "applied"]);
    let letters = w
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("list");
    let mut codes: Vec<&str> = letters.iter().map(|l| l.reason.code.as_str()).collect();
    codes.sort();
    assert_eq!(codes, ["invalid_key", "item_too_large"]);
    let kept = letters
        .iter()
        .find(|l| l.reason.code == "item_too_large")
        .expect("kept");
    assert_eq!(
        kept.payload,
        report_body(&big_body),
        "a payload over one item is kept whole, in parts"
    );
    assert!(kept.parts > 1);
}
