//! Races on one transaction: coordinators and sweepers driving it at once apply it once;
//! lock writes that straggle past the decision never land.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_coordinators_and_sweepers_on_one_transaction_apply_it_once() {
    let base = client();
    let env = Arc::new(Env::new(&base).await);
    let table = env.accounts().to_string();
    for round in 0..15 {
        let (a, b) = (format!("r{round}a"), format!("r{round}b"));
        seed(&base, &table, &a, 100).await;
        seed(&base, &table, &b, 0).await;
        let body = transfer(&table, &format!("race{round}"), &a, &b, 25);
        // Given 3 coordinators delivering the same message at once, and 2 sweepers with a
        // stale threshold of 0 rolling back whatever is pending,
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let (env, body) = (env.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                let c = env.coordinator(client());
                loop {
                    match c.run(&message(&c, &body), Deadline::none()).await {
                        Ok(r) => return Some(r.outcome),
                        Err(TxError::Contention { .. }) => continue,
                        Err(e) => panic!("{e}"),
                    }
                }
            }));
        }
        for _ in 0..2 {
            let env = env.clone();
            tasks.push(tokio::spawn(async move {
                sweep_all(&env, client()).await;
                None
            }));
        }
        for t in tasks {
            if let Some(outcome) = t.await.expect("task") {
                assert!(outcome.is_committed(), "round {round}: {outcome:?}");
            }
        }
        // then the transfer is applied exactly once.
        let now = items(&base, &table).await;
        assert_eq!(
            (balance(&now, &a), balance(&now, &b)),
            (Some(75), Some(25)),
            "round {round}"
        );
    }
    sweep_all(&env, client()).await;
    assert_clean(&base, &env).await;
}

/// A coordinator whose `slow_call`-th DynamoDB request is held back for `delay` before it is
/// sent (a straggling write), all other calls normal.
fn slow_coordinator(env: &Env, slow_call: usize, delay: Duration) -> Coordinator {
    let plan = FaultInjector::new(move |i, op| {
        if i == slow_call {
            // Hand this worker's drivers over, then hold the request back.
            tokio::task::block_in_place(|| std::thread::sleep(delay));
        }
        let _ = op;
        Fault::None
    });
    env.coordinator(client_with(Some(plan), 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn straggling_lock_writes_never_apply_after_the_decision() {
    let base = client();
    let env = Arc::new(Env::new(&base).await.lock_path());
    let table = env.accounts().to_string();
    // Calls of the slow coordinator: DescribeTable 0, create 1, reads 2-3, lock a 4, lock b 5.
    const LOCK_B: usize = 5;
    for (round, decider) in ["coordinator", "sweeper"].into_iter().enumerate() {
        let (a, b) = (format!("s{round}a"), format!("s{round}b"));
        seed(&base, &table, &a, 100).await;
        seed(&base, &table, &b, 0).await;
        let body = transfer(&table, &format!("straggler{round}"), &a, &b, 30);
        // Given a coordinator whose lock write on b is held back for 2.5 s,
        let slow = slow_coordinator(&env, LOCK_B, Duration::from_millis(2500));
        let slow_body = body.clone();
        let slow_task = tokio::spawn(async move {
            slow.run(&message(&slow, &slow_body), Deadline::none())
                .await
                .map(|r| r.outcome)
        });
        // (once it has locked a and is holding back its write on b)
        let waiting = Instant::now();
        while !items(&base, &table)
            .await
            .get(&a)
            .is_some_and(|i| i.contains_key("_txLock"))
        {
            assert!(waiting.elapsed() < Duration::from_secs(2), "a never locked");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // when meanwhile another coordinator commits the transaction, or the sweeper rolls it
        // back, and the held-back write lands afterwards,
        if decider == "coordinator" {
            let other = env.coordinator(client());
            let report = other
                .run(&message(&other, &body), Deadline::none())
                .await
                .expect("other coordinator");
            assert_eq!(report.outcome, TxOutcome::Committed);
        } else {
            let summary = sweep_all(&env, client()).await;
            assert_eq!(summary.rolled_back, 1, "{summary:?}");
        }
        let slow_outcome = slow_task.await.expect("task").expect("slow coordinator");
        assert!(slow_outcome.is_committed(), "{decider}: {slow_outcome:?}");

        // then the transfer is applied exactly once and no lock is left.
        let now = items(&base, &table).await;
        assert_eq!(
            (balance(&now, &a), balance(&now, &b)),
            (Some(70), Some(30)),
            "{decider}"
        );
        assert_clean(&base, &env).await;
    }
}
