//! The `tx-coordinator` and `tx-sweeper` handlers on the `events/` fixtures.

use super::*;

fn fixture_for(env: &Env, name: &str) -> Value {
    let text = fixture(name).to_string();
    serde_json::from_str(&text.replace("AccountsTable", env.accounts())).expect("json")
}

#[tokio::test]
async fn coordinator_handler_on_the_fixtures() {
    let base = client();
    let env = Env::new(&base).await.without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "alice", 100).await;
    seed(&base, &table, "bob", 20).await;
    let writer = coordinator_writer(&env, env.coordinator(client()));
    let run = |name: &str| {
        let event = LambdaEvent::new(fixture_for(&env, name), Context::default());
        let writer = &writer;
        async move { serde_json::to_value(writer.handle(event).await.expect("handler")).expect("json") }
    };
    let no_failures = json!({"batchItemFailures":[]});
    assert_eq!(run("tx-transfer.json").await, no_failures);
    let now = items(&base, &table).await;
    assert_eq!(
        (balance(&now, "alice"), balance(&now, "bob")),
        (Some(70), Some(50))
    );
    assert_eq!(run("tx-overdraft.json").await, no_failures);
    let after = items(&base, &table).await;
    assert_eq!(
        (balance(&after, "alice"), balance(&after, "bob")),
        (Some(70), Some(50)),
        "the overdraft rolled back"
    );
    assert_eq!(run("tx-malformed.json").await, no_failures);
    let letters = writer
        .dead_letter_table()
        .expect("a dead-letter table")
        .list()
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason.code, "bad_json");
    // Redelivery of the transfer: idempotent.
    assert_eq!(run("tx-transfer.json").await, no_failures);
    assert_eq!(items(&base, &table).await, after);
    assert_clean(&base, &env).await;
}

#[tokio::test]
async fn sweeper_handler_on_the_schedule_fixture() {
    let base = client();
    let env = Env::new(&base).await.lock_path().without_heartbeats();
    let table = env.accounts().to_string();
    seed(&base, &table, "a", 10).await;
    let dying = env.coordinator(client_with(Some(FaultInjector::fail_from(3)), 1));
    let body = json!({"txId":"abandoned","requests":[update(&table, "a", 1)]});
    let _ = dying.run(&message(&dying, &body), Deadline::none()).await;
    let sweeper = env.sweeper(client(), 0, 3600);
    let event = LambdaEvent::new(fixture("tx-sweeper-schedule.json"), Context::default());
    let function = dynamodb_exactly_once_lambda::SweeperFunction::new("tx-sweeper", sweeper);
    let summary = function.handle(event).await.expect("sweep");
    assert_eq!(summary.rolled_back, 1);
    let json = serde_json::to_value(&summary).expect("json");
    assert_eq!(json["rolled_back"], json!(1));
    assert_clean(&base, &env).await;
    let items: BTreeSet<String> = items(&base, &table).await.into_keys().collect();
    assert_eq!(items, BTreeSet::from(["a".to_string()]));
    let _ = item_to_json;
}
