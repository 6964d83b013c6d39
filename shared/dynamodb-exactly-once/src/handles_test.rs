//! Every protocol handle is built infallibly from a built (so valid) configuration, with no
//! network call: `X::new(client, config)`, and generically through [`Configured::new`].

use crate::config::Configured;
use crate::counter::{Counter, CounterConfig};
use crate::document::{Document, DocumentConfig};
use crate::lease::{Lease, LeaseConfig};
use crate::ratchet::{Ratchet, RatchetConfig};
use crate::txn::sweep::{SweepConfig, Sweeper};
use crate::txn::{Coordinator, TxConfig};
use crate::versioning::{Versioning, VersioningConfig};

/// A client that never reaches a network: building a handle must not call DynamoDB.
fn offline() -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build(),
    )
}

#[test]
fn ratchet_is_built_from_a_built_config() {
    let config = RatchetConfig::builder("items").build().expect("valid");
    let ratchet = Ratchet::new(offline(), config);
    assert_eq!(ratchet.config().table(), "items");
}

#[test]
fn counter_is_built_from_a_built_config() {
    let config = CounterConfig::builder("counters").build().expect("valid");
    let counter = Counter::new(offline(), config);
    assert_eq!(counter.config().table(), "counters");
}

#[test]
fn document_is_built_from_a_built_config() {
    let config = DocumentConfig::builder("docs").build().expect("valid");
    let document = Document::new(offline(), config);
    assert_eq!(document.config().table(), "docs");
}

#[test]
fn versioning_is_built_from_a_built_config() {
    let config = VersioningConfig::builder("latest", "history")
        .build()
        .expect("valid");
    let versioning = Versioning::new(offline(), config);
    assert_eq!(versioning.config().table(), "latest");
}

#[test]
fn lease_is_built_from_a_built_config() {
    let config = LeaseConfig::builder("locks").build().expect("valid");
    let lease = Lease::new(offline(), config);
    assert_eq!(lease.config().table(), "locks");
}

#[test]
fn coordinator_is_built_from_a_built_config() {
    let config = TxConfig::builder("tx", ["accounts"])
        .build()
        .expect("valid");
    let coordinator = Coordinator::new(offline(), config);
    assert_eq!(coordinator.config().table(), "tx");
}

#[test]
fn sweeper_is_built_from_a_built_config() {
    let config = SweepConfig::builder("tx").build().expect("valid");
    let sweeper = Sweeper::new(offline(), config);
    assert_eq!(sweeper.config().table(), "tx");
}

#[test]
fn configured_builds_every_handle_infallibly() {
    fn build<P: Configured>(config: P::Config) -> P {
        P::new(offline(), config)
    }
    let _: Ratchet = build(RatchetConfig::builder("items").build().expect("valid"));
    let _: Counter = build(CounterConfig::builder("counters").build().expect("valid"));
    let _: Document = build(DocumentConfig::builder("docs").build().expect("valid"));
    let _: Coordinator = build(TxConfig::builder("tx", ["a"]).build().expect("valid"));
    let _: Sweeper = build(SweepConfig::builder("tx").build().expect("valid"));
}
