//! The integration tests against DynamoDB Local, one module per protocol or concern, in one
//! test binary (one compilation and one link instead of one per file). `make test` runs them
//! with cargo-nextest, one process per test, against one shared DynamoDB Local.
//!
//! `traces.rs` stays a binary of its own: it installs the process-wide tracer.

mod checker;
mod common;
mod sqs_support;
mod txn_env;

mod counter;
mod counter_check;
mod counter_journal;
mod counter_journal_check;
mod counter_journal_hold;
mod counter_journal_migrate;
mod counter_journal_reenable;
mod counter_journal_repair;
mod counter_journal_shapes;
mod dead_letters;
mod dead_letters_sqs;
mod deadline;
mod document;
mod document_once;
mod document_property;
mod idempotency;
mod idempotency_boundaries;
mod idempotency_check;
mod idempotency_interleave;
mod idempotency_large;
mod idempotency_powertools;
mod interleave;
mod key_limits;
mod kpl;
mod layout;
mod lease;
mod mapping;
mod numbers;
mod processor;
mod processor_check;
mod processor_edges;
mod ratchet;
mod ratchet_cache;
mod ratchet_check;
mod ratchet_history;
mod replay;
mod replica_attributes;
mod sources;
mod streams;
mod streams_double;
mod telemetry;
mod ttl;
mod txn;
mod txn_check;
mod txn_chunks;
mod txn_conflicts;
mod txn_cost;
mod txn_fast;
mod txn_fast_edges;
mod txn_fast_self;
mod txn_interleave;
mod txn_issued;
mod txn_keys;
mod txn_locked_read;
mod txn_logs;
mod txn_long;
mod txn_missing_old;
mod txn_numbers;
mod txn_own_lock;
mod txn_part_pace;
mod txn_read_ahead;
mod txn_redrive;
mod txn_sizes;
mod txn_sweep;
mod versioning;
mod versioning_check;
mod window_raise;
