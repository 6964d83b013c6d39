//! Responses and failures: partial batch responses, bisect, retries and record age to the
//! on-failure destination, killed and timed-out invocations, lost responses, duplicates.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dev_testing::mapping::Fault;
use dev_testing::Shape;
use serde_json::{json, Value};

use super::{all_keys, config, env, events, handler, keys, seqs, MINUTE};

fn failure(seq: &str) -> Value {
    json!({"itemIdentifier": seq})
}

#[tokio::test]
async fn a_partial_batch_response_resumes_at_the_lowest_reported_record() {
    let e = env(Shape::shards(1)).await;
    e.insert(&["a", "b", "c", "d", "e"]);
    let mut m = e.mapping(config().report_batch_item_failures(true));
    let (log, h) = handler(|ev, n| match n {
        // d and b reported: the batch resumes at b.
        0 => Ok(json!({"batchItemFailures": [failure(&seqs(ev)[3]), failure(&seqs(ev)[1])]})),
        1 => Ok(json!({"batchItemFailures": []})),
        _ => Ok(json!({"batchItemFailures": null})),
    });
    m.run_until_idle(&h, 10).await.expect("run");
    let got: Vec<Vec<String>> = events(&log).iter().map(keys).collect();
    assert_eq!(
        got,
        [vec!["a", "b", "c", "d", "e"], vec!["b", "c", "d", "e"]]
    );
    assert_eq!(m.stats().records_succeeded, 5);
}

#[tokio::test]
async fn an_empty_or_unknown_item_identifier_fails_the_whole_batch() {
    for bad in [
        json!({"itemIdentifier": ""}),
        json!({"itemIdentifier": "42"}),
        json!({}),
    ] {
        let e = env(Shape::shards(1)).await;
        e.insert(&["a", "b"]);
        let mut m = e.mapping(config().report_batch_item_failures(true));
        let answer = bad.clone();
        let (log, h) = handler(move |_, n| match n {
            0 => Ok(json!({"batchItemFailures": [answer.clone()]})),
            _ => Ok(Value::Null),
        });
        m.run_until_idle(&h, 10).await.expect("run");
        let got: Vec<Vec<String>> = events(&log).iter().map(keys).collect();
        assert_eq!(got, [vec!["a", "b"], vec!["a", "b"]], "{bad}");
    }
}

#[tokio::test]
async fn without_report_batch_item_failures_any_answer_is_success() {
    let e = env(Shape::shards(1)).await;
    e.insert(&["a", "b"]);
    let mut m = e.mapping(config());
    let (log, h) = handler(|ev, _| Ok(json!({"batchItemFailures": [failure(&seqs(ev)[0])]})));
    m.run_until_idle(&h, 10).await.expect("run");
    assert_eq!(events(&log).len(), 1);
}

#[tokio::test]
async fn bisect_isolates_a_poison_record_and_spent_retries_send_it_to_the_destination() {
    let e = env(Shape::shards(1)).await;
    e.insert(&["a", "b", "c", "poison", "d", "e", "f", "g"]);
    let mut m = e.mapping(
        config()
            .bisect_batch_on_function_error(true)
            .maximum_retry_attempts(2),
    );
    let (log, h) = handler(|ev, _| {
        if keys(ev).iter().any(|k| k == "poison") {
            Err("poison".into())
        } else {
            Ok(Value::Null)
        }
    });
    m.run_until_idle(&h, 50).await.expect("run");
    let sizes: Vec<usize> = events(&log).iter().map(|e| keys(e).len()).collect();
    // 8 fails: halves of 4; [a b c poison] fails: halves of 2; [a b] succeeds; [c poison]
    // fails: halves of 1; [c] succeeds; [poison] fails 3 times (2 retries) and is discarded;
    // [d e f g] succeeds.
    assert_eq!(
        sizes,
        [8, 4, 2, 2, 1, 1, 1, 1, 4],
        "halved down to the poison record"
    );
    let delivered: Vec<String> = all_keys(&log)
        .into_iter()
        .filter(|k| k != "poison")
        .collect();
    for k in ["a", "b", "c", "d", "e", "f", "g"] {
        assert!(delivered.contains(&k.to_string()), "{k} delivered");
    }
    let msgs = m.on_failure_messages();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    let info = &msgs[0]["DDBStreamBatchInfo"];
    assert_eq!(
        msgs[0]["requestContext"]["condition"],
        "RetryAttemptsExhausted"
    );
    assert_eq!(msgs[0]["requestContext"]["approximateInvokeCount"], 3);
    assert_eq!(info["batchSize"], 1);
    assert_eq!(info["startSequenceNumber"], info["endSequenceNumber"]);
    assert_eq!(info["streamArn"], json!(e.arn));
    let shard = &e.double.listed_shards(&e.arn)[0].shard_id;
    assert_eq!(info["shardId"], json!(shard));
    assert!(info["approximateArrivalOfFirstRecord"].is_string());
    assert_eq!(m.stats().records_discarded, 1);
}

#[tokio::test]
async fn records_older_than_the_maximum_age_are_discarded_before_an_invoke() {
    let e = env(Shape::shards(1)).await;
    e.insert(&["a", "b"]);
    let mut m = e.mapping(config().maximum_record_age_secs(60));
    let (log, h) = handler(|_, _| Err("down".into()));
    m.step(&h).await.expect("step");
    m.step(&h).await.expect("step");
    e.clock.advance(2 * MINUTE);
    e.insert(&["c"]);
    let (log2, ok) = handler(|_, _| Ok(Value::Null));
    m.run_until_idle(&ok, 10).await.expect("run");
    assert_eq!(events(&log).len(), 2);
    assert_eq!(all_keys(&log2), ["c"], "a and b aged out");
    let msgs = m.on_failure_messages();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0]["requestContext"]["condition"], "RecordAgeExceeded");
    assert_eq!(msgs[0]["DDBStreamBatchInfo"]["batchSize"], 2);
}

/// A handler that awaits twice (a real handler's DynamoDB calls) and counts finished runs.
fn slow_handler() -> (
    Arc<AtomicUsize>,
    super::Log,
    impl dev_testing::mapping::Handler,
) {
    let finished = Arc::new(AtomicUsize::new(0));
    let f = Arc::clone(&finished);
    let log: super::Log = Arc::default();
    let l = Arc::clone(&log);
    let h = move |ev: Value| {
        // Logged when the mapping invokes the handler, not at the future's first poll: on a
        // loaded machine a 5 ms time-out can fire before the invocation is first polled.
        l.lock().expect("log").push(ev);
        let f = Arc::clone(&f);
        async move {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            f.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(Value::Null)
        }
    };
    (finished, log, h)
}

#[tokio::test]
async fn a_killed_or_timed_out_invocation_is_retried() {
    for fault in [
        Fault::KillAfterPolls(1),
        Fault::Timeout(Duration::from_millis(5)),
    ] {
        let e = env(Shape::shards(1)).await;
        e.insert(&["a"]);
        let mut m = e.mapping(config());
        m.set_faults(move |info| if info.n == 0 { fault } else { Fault::None });
        let (finished, log, h) = slow_handler();
        m.run_until_idle(&h, 10).await.expect("run");
        assert_eq!(events(&log).len(), 2, "{fault:?}: delivered again");
        assert_eq!(
            finished.load(Ordering::SeqCst),
            1,
            "{fault:?}: the first run was cut"
        );
        assert_eq!(m.stats().failed_invocations, 1);
    }
}

#[tokio::test]
async fn a_lost_response_is_retried_and_a_duplicate_is_delivered_twice() {
    for (fault, runs) in [(Fault::LoseResponse, 2), (Fault::Duplicate, 2)] {
        let e = env(Shape::shards(1)).await;
        e.insert(&["a"]);
        let mut m = e.mapping(config());
        m.set_faults(move |info| if info.n == 0 { fault } else { Fault::None });
        let (finished, log, h) = slow_handler();
        m.run_until_idle(&h, 10).await.expect("run");
        assert_eq!(finished.load(Ordering::SeqCst), runs, "{fault:?}");
        assert_eq!(all_keys(&log), ["a", "a"], "{fault:?}");
        assert_eq!(m.stats().records_succeeded, 1);
    }
}
