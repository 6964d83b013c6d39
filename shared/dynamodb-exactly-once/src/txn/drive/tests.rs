use super::*;

#[test]
fn restart_waits_are_bounded() {
    let policy = Backoff::new(RESTART_FIRST, RESTART_MAX, 50);
    let delays: Vec<Duration> = policy.delays().collect();
    assert_eq!(delays.len(), 50, "one wait per restart at most");
    assert!(delays.iter().all(|d| *d < Duration::from_millis(500)));
    assert!(delays[0] >= RESTART_FIRST);
}
