//! The integration tests against DynamoDB Local, one module per protocol or concern, in one
//! test binary (one compilation and one link instead of one per file). `make test` runs them
//! with cargo-nextest, one process per test, against one shared DynamoDB Local.
//!
//! `traces.rs` stays a binary of its own: it installs the process-wide tracer.

mod checker;
mod common;
mod sqs_support;

mod counter;
mod dead_letters;
mod deadline;
mod document;
mod examples;
mod idempotency;
mod interleave;
mod kafka;
mod key_limits;
mod kpl;
mod layout;
mod lease;
mod ledger;
mod mapping;
mod mapping_emulator;
mod numbers;
mod processor;
mod ratchet;
mod replay;
mod replica_attributes;
mod sources;
mod streams;
mod streams_double;
mod telemetry;
mod ttl;
mod txn;
mod versioning;
mod window_raise;
mod writer_sinks;
