//! The interleaving harness itself (`dev_testing::Interleaving`): a release is never lost.

use std::time::Duration;

use dev_testing::{client_intercepted, At, Interleaving};

/// `release_all` while a call that `pause_after` is to hold is still in flight (its rule fired
/// when it was sent, its answer has not come): the answer must not be held. It was held until
/// `MAX_PAUSE` (120 s), and the randomized transaction checker lost 120 s in about one schedule
/// in 300 that way (an actor released while a call was in flight, then held "crashed").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_all_reaches_a_pause_decided_but_not_reached() {
    let il = Interleaving::new();
    let proxy = dev_testing::proxy::delaying(Duration::from_millis(500))
        .await
        .expect("a delaying proxy");
    let client = client_intercepted(&proxy, il.interceptor("a"), 1);
    il.pause_after("a", At::call(0));
    let call = tokio::spawn(async move { client.list_tables().send().await });
    // Sent (the rule fired), its answer still delayed by the proxy.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(il.calls("a").len(), 1, "the call was sent");
    il.release_all("a");
    let answered = tokio::time::timeout(Duration::from_secs(10), call).await;
    il.release_all("a"); // whatever happened, let the call finish
    let result = answered.expect("the answer was held after release_all");
    assert!(result.expect("task").is_ok(), "the call went through");
}
