use super::*;
use crate::ddb::clock::epoch_millis;

#[test]
fn context_without_deadline_never_expires() {
    assert!(!Deadline::from_epoch_ms(0, Duration::from_secs(1)).expired());
    assert!(Deadline::from_epoch_ms(1_700_000_000_000, Duration::from_secs(1)).expired());
    assert!(!Deadline::from_epoch_ms(epoch_millis() + 60_000, Duration::from_secs(1)).expired());
    // `cargo lambda watch` sends the timeout, not an epoch time.
    assert!(!Deadline::from_epoch_ms(600_000, Duration::from_secs(1)).expired());
    assert!(Deadline::from_epoch_ms(500, Duration::from_secs(1)).expired());
}

#[test]
fn the_cutoff_is_the_answer_margin_before_the_deadline() {
    let at = 1_900_000_000_000;
    let deadline = Deadline::from_epoch_ms(at, Duration::from_secs(2));
    let margin = u64::try_from(ANSWER_MARGIN.as_millis()).unwrap_or(0);
    assert_eq!(deadline.cutoff_epoch_ms(), Some(at - margin));
    assert_eq!(Deadline::none().cutoff_epoch_ms(), None);
    assert_eq!(
        Deadline::after(Duration::from_secs(1)).cutoff_epoch_ms(),
        None
    );
}

#[test]
fn pipeline_states_are_transient_failures_and_a_shared_error_keeps_its_class() {
    let held = RecordResult::<Labelled>::Failed(RecordFailure::HeldBack { after: "m0".into() });
    assert_eq!(held.label(), "held_back");
    let RecordResult::Failed(held) = held else {
        unreachable!()
    };
    assert!(held.is_retryable());
    assert!(held.store_error().is_none());
    assert_eq!(
        held.to_string(),
        "held back behind record m0 of the same ordering key, which was not applied"
    );
    let cut = RecordFailure::CutOff("dead letter PutItem");
    assert_eq!(cut.class(), ErrorClass::Transient);

    let err = Arc::new(StoreError::ReservedAttribute("pk".into()));
    let shared = err.shared();
    assert_eq!(shared.class(), ErrorClass::InvalidRequest);
    assert_eq!(
        shared.to_string(),
        format!("the write this record shares failed: {err}")
    );
    let shared = shared.into_store_error().expect_err("still held by `err`");
    drop(err);
    assert!(matches!(
        shared.into_store_error(),
        Ok(StoreError::ReservedAttribute(_))
    ));

    let own = RecordFailure::from(StoreError::Inconsistent("x".into()));
    assert_eq!(own.to_string(), "inconsistent item in table: x");
    assert_eq!(RecordResult::<Labelled>::Failed(own).label(), "failed");
}

#[derive(Debug)]
struct Labelled;

impl Outcome for Labelled {
    fn label(&self) -> &'static str {
        "applied"
    }
}

#[tokio::test]
async fn work_in_flight_is_cut_off_before_the_deadline() {
    let soon = Deadline::from_epoch_ms(epoch_millis() + 400, Duration::from_secs(2));
    assert!(soon.expired(), "no new work 2 s before");
    let slow = tokio::time::sleep(Duration::from_secs(5));
    let started = std::time::Instant::now();
    assert!(soon.bound(slow).await.is_none());
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(Deadline::none().bound(async { 7 }).await, Some(7));
}
