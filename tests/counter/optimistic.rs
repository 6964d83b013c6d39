//! Optimistic versioned writes on counter items (`versioning::optimistic`): two writers race
//! and one wins; read-modify-write retries its conflicts and gives up after its attempts.

use super::*;

#[tokio::test]
async fn two_optimistic_writers_race_one_wins_the_other_gets_a_conflict() {
    let client = client();
    let (w, tables) = counter_writer(client.clone()).await;
    let c = w.protocol();
    let key = item_key("acct#1", "profile");
    let created = c
        .put_versioned(
            &key,
            None,
            &Map::from_iter([("plan".into(), json!("free"))]),
        )
        .await
        .expect("create");
    assert_eq!(created, VersionOutcome::Written { version: 1 });

    // Both read version 1, both write.
    let pro = Map::from_iter([("plan".into(), json!("pro"))]);
    let team = Map::from_iter([("plan".into(), json!("team"))]);
    let a = c.put_versioned(&key, Some(1), &pro);
    let b = c.put_versioned(&key, Some(1), &team);
    let (a, b) = futures::join!(a, b);
    let outcomes = [a.expect("a"), b.expect("b")];

    let wins = outcomes
        .iter()
        .filter(|o| matches!(o, VersionOutcome::Written { version: 2 }))
        .count();
    assert_eq!(wins, 1, "{outcomes:?}");
    let conflict = outcomes
        .iter()
        .find(|o| matches!(o, VersionOutcome::Conflict { .. }))
        .expect("one conflict");
    assert_eq!(*conflict, VersionOutcome::Conflict { current: Some(2) });
    assert_eq!(conflict.http_status(), 412);
    // Creating an item that exists is a conflict too.
    assert!(matches!(
        c.put_versioned(&key, None, &Map::new())
            .await
            .expect("write"),
        VersionOutcome::Conflict { current: Some(2) }
    ));
    let item = scan(&client, &tables["CounterTable"]).await;
    assert_eq!(item["acct#1|profile"]["ctr_version"], json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_modify_write_retries_conflicts_and_loses_no_update() {
    let client = client();
    let (w, _) = counter_writer(client.clone()).await;
    let w = Arc::new(w);
    let key = item_key("acct#1", "settings");
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let w = Arc::clone(&w);
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            w.protocol()
                .read_modify_write(&key, 30, |current| {
                    let seen = current
                        .and_then(|c| c.get("edits"))
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    Map::from_iter([("edits".into(), json!(seen + 1))])
                })
                .await
                .expect("rmw")
        }));
    }
    let mut attempts = 0;
    for t in tasks {
        match t.await.expect("task") {
            RmwOutcome::Written { attempts: a, .. } => attempts += a,
            RmwOutcome::GaveUp { .. } => panic!("gave up"),
            other => panic!("unexpected {other:?}"),
        }
    }

    let item = w
        .protocol()
        .get_json(&key)
        .await
        .expect("get")
        .expect("item");
    assert_eq!(item["edits"], json!(6));
    assert_eq!(item["ctr_version"], json!(6));
    assert!(attempts >= 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_modify_write_gives_up_after_its_bounded_attempts() {
    let client = client();
    let (w, _) = counter_writer(client.clone()).await;
    let key = item_key("acct#1", "busy");
    let c = w.protocol();
    c.put_versioned(&key, None, &Map::new())
        .await
        .expect("create");
    let racer = c.clone();
    let racer_key = key.clone();
    let runtime = tokio::runtime::Handle::current();
    let mut changes = 0;

    // Given a competing writer that bumps the version between every read and our write ...
    let outcome = c
        .read_modify_write(&key, 3, move |current| {
            changes += 1;
            let seen = current
                .and_then(|m| m.get("ctr_version"))
                .and_then(Value::as_u64);
            let (racer, racer_key, runtime) = (racer.clone(), racer_key.clone(), runtime.clone());
            std::thread::spawn(move || {
                runtime.block_on(racer.put_versioned(&racer_key, seen, &Map::new()))
            })
            .join()
            .expect("racer thread")
            .expect("racer write");
            Map::from_iter([("changes".into(), json!(changes))])
        })
        .await
        .expect("rmw");

    // ... every attempt conflicts, and the helper stops after its bound.
    assert_eq!(outcome, RmwOutcome::GaveUp { attempts: 3 });
    let item = c.get_json(&key).await.expect("get").expect("item");
    assert!(!item.contains_key("changes"), "none of our writes landed");
    assert_eq!(item["ctr_version"], json!(4));
}
