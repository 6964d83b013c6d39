//! Correct DynamoDB writes from AWS Lambda stream processors.
//!
//! Every protocol here keeps the table correct under what real delivery does: SDK retries,
//! duplicated and hedged writes, out-of-order arrival, redelivered batches and concurrent
//! writers. Expected results of conditional writes are *outcomes* (`Applied`, `Stale`,
//! `Duplicate`, ...), never errors; [`error::StoreError`] is reserved for infrastructure
//! failures and says whether a retry can help.
//!
//! # Layout
//!
//! * [`ratchet`]: timestamp-ratchet writes (newest version wins, tombstones with TTL, reads that
//!   hide tombstones, per-batch coalescing).
//! * [`counter`]: idempotent counters (deltas added exactly once per idempotency key, keys kept
//!   in a bounded time-bucketed window inside the item, coalesced conditional updates) and
//!   optimistic versioned writes.
//! * [`txn`]: multi-item transactions (TX records split over items, per-item locks with saved
//!   images, one commit point, 2N + 3 writes), honoured request conditions, `txId`
//!   idempotency, reads at three isolation levels.
//! * [`sweep`]: the sweeper that finishes or rolls back stale transactions through a sparse
//!   index and deletes finished records after their retention.
//! * [`pipeline`]: the batch pipeline every writer shares (parse → apply → dead-letter →
//!   partial batch response → summary log).
//! * [`writer`]: a protocol plus its dead letters behind one Lambda handler; settings from env.
//! * [`source`]: Kinesis/SQS event detection, source positions, partial batch responses,
//!   invocation deadlines.
//! * [`dead_letter`]: the dead-letter table (keep, list, remove) for records that can never
//!   succeed.
//! * [`item`]: JSON ↔ attribute values, canonical keys, DynamoDB item sizes.
//! * [`error`]: infrastructure errors and their classification.
//! * [`config`]: environment settings with errors that name the variable.
//! * [`store`]: the DynamoDB client from the standard AWS environment.
//! * [`provision`]: create tables exactly as `template.yaml` declares them.
//! * [`telemetry`]: JSON logs through `tracing`.
//! * [`metrics`]: CloudWatch metrics per batch in the Embedded Metric Format.
//! * `testing` (feature `testing`): the DynamoDB Local harness and the fault-injecting SDK
//!   interceptor used by tests and benchmarks.

pub mod config;
pub mod counter;
pub mod dead_letter;
pub mod error;
pub mod item;
pub mod metrics;
pub mod pipeline;
pub mod provision;
pub mod ratchet;
pub mod source;
pub mod store;
pub mod sweep;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod txn;
pub mod writer;
