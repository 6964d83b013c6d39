//! A DynamoDB Streams test double: an HTTP server on loopback speaking the
//! DynamoDBStreams_20120810 JSON protocol, fed by DynamoDB Local's own stream, serving it the
//! way DynamoDB Streams does and DynamoDB Local does not (its stream has one shard that never
//! rolls over, splits or trims).
//!
//! * **Fed by the real stream.** The code under test calls `DescribeStream`,
//!   `GetShardIterator` and `GetRecords` with the `LatestStreamArn` that DynamoDB Local's
//!   `DescribeTable` gave it. On first sight of an ARN the double reads that upstream stream
//!   (every shard, from `TRIM_HORIZON`) and the table's partition key (`DescribeTable` of the
//!   table named in the ARN); on every request for the stream (and on [`StreamsDouble::sync`])
//!   it first pulls what upstream wrote since. Records pass through as JSON, with
//!   `dynamodb.SequenceNumber` (one counter per stream, 21+ digits, strictly increasing: a
//!   child's numbers are above its parent's) and `dynamodb.ApproximateCreationDateTime` (the
//!   double's clock at ingest, epoch seconds) rewritten.
//! * **Partitions.** [`Shape::shards`] partitions own equal ranges of a 64-bit hash (the first 8
//!   bytes of SHA-256 of the partition key value's JSON, e.g. `{"S":"k1"}`): the records of one
//!   key value always land in one shard lineage, in write order.
//! * **Lineage.** [`Shape::rollover`]: at each multiple of the period of the clock since the
//!   double started, every open shard closes (`EndingSequenceNumber`: its last record's number,
//!   or its `StartingSequenceNumber` when it holds none, below the child's) and a child opens
//!   with `ParentShardId`. [`Shape::split_every`]: one partition (round robin) closes and its
//!   range halves into two children. Both are evaluated lazily from the clock on every request:
//!   a jump of several periods makes the whole chain.
//! * **Trimming.** Records older than [`Shape::retention`] (clock) are gone: an
//!   `AT_`/`AFTER_SEQUENCE_NUMBER` iterator at or before the newest trimmed record, or a
//!   `GetRecords` whose position is before it, answer `TrimmedDataAccessException`;
//!   `TRIM_HORIZON` starts at the oldest kept record. A closed shard with nothing kept that
//!   closed more than the retention ago leaves `DescribeStream`; `GetShardIterator` on it
//!   answers `ResourceNotFoundException`.
//! * **Iterators** are opaque (base64 of JSON) and expire after 15 minutes of clock
//!   (`ExpiredIteratorException`). A fresh one answers [`Shape::empty_pages`] empty pages
//!   first. `GetRecords` serves at most `Limit` (1–1000) records and about 1 MB; its
//!   `NextShardIterator` is absent only once a closed shard is read to its end.
//! * **Throttling.** [`Shape::throttle_percent`] of `GetShardIterator`/`GetRecords` calls
//!   (seeded), and a third concurrent `GetRecords` of one shard, answer
//!   `LimitExceededException`. The SDK classifies that code as a throttling error and retries
//!   it (`aws-runtime`'s `THROTTLING_ERRORS`), with the retry quota's throttling cost. The
//!   SDK's model lists `LimitExceededException` for `GetRecords` only: on `GetShardIterator`
//!   it is an unmodeled error whose `code()` is `"LimitExceededException"` (still retried).
//! * Errors are HTTP 400 with `{"__type": "com.amazonaws.dynamodb.v20120810#Kind",
//!   "message": …}`, which the SDK decodes into its typed errors
//!   (`is_trimmed_data_access_exception()`, `is_expired_iterator_exception()`, …). `ListStreams`
//!   is passed through to DynamoDB Local.
//!
//! * **Disable and re-enable** ([`StreamsDouble::disable_and_enable_stream`]): a new stream
//!   (new ARN and label), the old one's shards closed and readable until trimmed.
//!
//! Records are timed when the double ingests them: a test that writes and then moves the
//! clock calls [`StreamsDouble::sync`] in between (any request for the stream does too).
//!
//! DynamoDB Local quirk handled upstream: a `TRIM_HORIZON` iterator taken while its shard is
//! empty answers `TrimmedDataAccessException` once other tables' writes have moved DynamoDB
//! Local's global sequence counter before the shard's first record; the double then takes a
//! new iterator (code reading DynamoDB Local's stream directly may meet it too).
//!
//! Known gaps: upstream shards are listed once when a stream is first seen (and again on
//! [`StreamsDouble::sync`]), which suffices for DynamoDB Local's single shard; records are
//! re-timed at ingest, so a record written before the double first saw its stream counts as
//! written then; the upstream must be DynamoDB Local (requests are not really signed); a clock
//! jump over many periods makes every intermediate shard (fine for hours of minute periods).
//!
//! # Layout
//!
//! * `mod.rs`: [`Shape`], [`StreamsDouble`], [`Stats`], [`ShardView`].
//! * `server.rs`: the HTTP server and the operations.
//! * `model.rs`: partitions, shards, lineage, trimming, ingest.
//! * `reads.rs`: iterators, `GetRecords` pages, `DescribeStream` pages.
//! * `state.rs`: what the server and the handle share; the throttle and the per-shard readers.
//! * `upstream.rs`: DynamoDB Local's stream read with raw JSON.
//! * `error.rs`: the error answers.

mod error;
mod model;
mod reads;
mod server;
mod state;
mod upstream;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodbstreams::config::retry::RetryConfig;
use aws_sdk_dynamodbstreams::config::{BehaviorVersion, Credentials, Region};
use dynamodb_exactly_once::Clock;
use serde_json::{json, Value};

use model::{Rules, Stream, StreamMeta};
use state::Shared;

/// The shape of the stream the double serves (builder style; [`Shape::default`] is one shard).
#[derive(Debug, Clone)]
pub struct Shape {
    shards: usize,
    rollover: Option<Duration>,
    split_every: Option<Duration>,
    retention: Duration,
    empty_pages: usize,
    throttle_percent: u32,
    latency: Duration,
    seed: u64,
}

impl Default for Shape {
    fn default() -> Self {
        Shape::shards(1)
    }
}

impl Shape {
    /// `n` partitions (each with one open shard) at the start (`n` below 1 counts as 1); no
    /// rollover or split, 24 h retention, no empty pages, throttling or latency, seed 0.
    pub fn shards(n: usize) -> Shape {
        Shape {
            shards: n.max(1),
            rollover: None,
            split_every: None,
            retention: Duration::from_secs(24 * 3600),
            empty_pages: 0,
            throttle_percent: 0,
            latency: Duration::ZERO,
            seed: 0,
        }
    }

    /// Every `every` of the double's clock, each open shard closes and a child opens.
    pub fn rollover(mut self, every: Duration) -> Shape {
        self.rollover = Some(every);
        self
    }

    /// Every `every` of the clock, one partition (round robin) closes its shard and splits its
    /// hash range into two children of it.
    pub fn split_every(mut self, every: Duration) -> Shape {
        self.split_every = Some(every);
        self
    }

    /// How long (of the clock) records are kept; 24 h by default.
    pub fn retention(mut self, d: Duration) -> Shape {
        self.retention = d;
        self
    }

    /// Every fresh iterator answers `k` empty pages (no records, a valid next iterator) before
    /// it reaches records, as AWS may.
    pub fn empty_pages(mut self, k: usize) -> Shape {
        self.empty_pages = k;
        self
    }

    /// That share (0–100) of `GetRecords`/`GetShardIterator` calls answers
    /// `LimitExceededException` (seeded by [`Shape::seed`]).
    pub fn throttle_percent(mut self, p: u32) -> Shape {
        self.throttle_percent = p.min(100);
        self
    }

    /// Each answer is delayed by `d` of real time.
    pub fn latency(mut self, d: Duration) -> Shape {
        self.latency = d;
        self
    }

    /// The seed of the throttling draws.
    pub fn seed(mut self, s: u64) -> Shape {
        self.seed = s;
        self
    }
}

/// What the double served so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls per operation (`GetRecords`, `GetShardIterator`, …), throttled ones included.
    pub calls: BTreeMap<String, u64>,
    /// Calls answered `LimitExceededException`.
    pub throttled: u64,
    /// Answered `GetRecords` calls per shard id.
    pub get_records_per_shard: BTreeMap<String, u64>,
    /// Records served by `GetRecords`.
    pub records_served: u64,
    /// Empty pages served to fresh iterators ([`Shape::empty_pages`]).
    pub empty_pages_served: u64,
    /// Records kept (from upstream and [`StreamsDouble::inject`]).
    pub records_ingested: u64,
}

/// A shard as the double lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardView {
    /// `shardId-…`.
    pub shard_id: String,
    /// The shard it continues (rollover) or was split from.
    pub parent_shard_id: Option<String>,
    /// Whether it is closed (has an `EndingSequenceNumber`).
    pub closed: bool,
    /// Records it still keeps (not trimmed).
    pub records: usize,
    /// `SequenceNumberRange.StartingSequenceNumber`.
    pub starting_sequence_number: String,
    /// `SequenceNumberRange.EndingSequenceNumber` once closed.
    pub ending_sequence_number: Option<String>,
}

/// Stops the server when the last handle is dropped.
#[derive(Debug)]
struct Server {
    task: tokio::task::AbortHandle,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The running double (cheap to clone; the server stops when the last clone is dropped).
#[derive(Clone, Debug)]
pub struct StreamsDouble {
    shared: Arc<Shared>,
    endpoint: String,
    _server: Arc<Server>,
}

impl StreamsDouble {
    /// Bind 127.0.0.1:0 and serve, fed by the test endpoint ([`crate::endpoint`], DynamoDB
    /// Local). `clock` is the injectable clock the tests share with the code under test.
    pub async fn start(shape: Shape, clock: Clock) -> Result<StreamsDouble, String> {
        let upstream = crate::local::endpoint();
        StreamsDouble::start_with_upstream(shape, clock, &upstream).await
    }

    /// Like [`StreamsDouble::start`], fed by the DynamoDB Local at `upstream` (`http://…`).
    pub async fn start_with_upstream(
        shape: Shape,
        clock: Clock,
        upstream: &str,
    ) -> Result<StreamsDouble, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("binding the double: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let rules = Rules {
            origin_ms: clock.now_ms(),
            partitions: shape.shards,
            rollover_ms: shape.rollover.map(millis),
            split_ms: shape.split_every.map(millis),
            retention_ms: millis(shape.retention),
        };
        let upstream = upstream::Upstream::new(upstream);
        let shared = Arc::new(Shared::new(
            clock,
            rules,
            shape.latency,
            upstream,
            shape.seed,
        ));
        {
            let mut state = shared.lock();
            state.throttle_percent = shape.throttle_percent;
            state.empty_pages = shape.empty_pages;
        }
        let task = tokio::spawn(server::serve(listener, Arc::clone(&shared)));
        Ok(StreamsDouble {
            shared,
            endpoint: format!("http://127.0.0.1:{port}"),
            _server: Arc::new(Server {
                task: task.abort_handle(),
            }),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// An SDK client of the double: dummy credentials, us-east-1, plain HTTP, standard retry
    /// with 3 attempts (5 ms initial backoff).
    pub fn client(&self) -> aws_sdk_dynamodbstreams::Client {
        self.client_with_attempts(3)
    }

    /// Like [`StreamsDouble::client`] with `max_attempts` (1 = no SDK retry).
    pub fn client_with_attempts(&self, max_attempts: u32) -> aws_sdk_dynamodbstreams::Client {
        let config = aws_sdk_dynamodbstreams::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .http_client(aws_smithy_http_client::Builder::new().build_http())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("local", "local", None, None, "tests"))
            .endpoint_url(self.endpoint())
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(max_attempts.max(1))
                    .with_initial_backoff(Duration::from_millis(5)),
            )
            .build();
        aws_sdk_dynamodbstreams::Client::from_conf(config)
    }

    /// Pull every new record of every upstream stream the double has been asked about (also
    /// looking for new upstream shards), now; returns how many records it kept.
    pub async fn sync(&self) -> Result<usize, String> {
        let mut total = 0;
        for arn in self.shared.fed_streams().await {
            total += self.shared.feed(&arn, true).await.map_err(|e| e.message)?;
        }
        Ok(total)
    }

    /// Like [`StreamsDouble::sync`] for one stream, registering it if it is new.
    pub async fn sync_stream(&self, stream_arn: &str) -> Result<usize, String> {
        self.shared
            .feed(stream_arn, true)
            .await
            .map_err(|e| format!("{}: {}", e.kind, e.message))
    }

    /// Declare a synthetic stream with no upstream (records only from
    /// [`StreamsDouble::inject`]), whose table's partition key is `hash_key`. The table name
    /// and label are read from the ARN when it has the usual form.
    pub fn add_stream(&self, stream_arn: &str, hash_key: &str) {
        let now = self.shared.clock.now_ms();
        let table = upstream::table_of(stream_arn).unwrap_or("synthetic");
        let label = stream_arn.rsplit("/stream/").next().unwrap_or("");
        let meta = StreamMeta {
            description: json!({
                "StreamLabel": label,
                "StreamViewType": "NEW_IMAGE",
                "TableName": table,
                "KeySchema": [{ "AttributeName": hash_key, "KeyType": "HASH" }],
                "CreationRequestDateTime": now as f64 / 1000.0,
            }),
            hash_key: hash_key.to_string(),
        };
        let stream = Stream::new(stream_arn, meta, &self.shared.rules, now);
        self.shared
            .lock()
            .streams
            .entry(stream_arn.to_string())
            .or_insert(stream);
    }

    /// Add synthetic records (stream-record JSON as `GetRecords` returns them, with
    /// `dynamodb.Keys` and `NewImage` set) to `stream_arn` as if the table wrote them now.
    /// Missing `eventID`, `eventName` (`INSERT`), `eventVersion`, `eventSource`, `awsRegion`,
    /// `dynamodb.StreamViewType` and `dynamodb.SizeBytes` are filled in. The stream must be
    /// known: asked about, [`StreamsDouble::sync_stream`]ed or [`StreamsDouble::add_stream`]ed.
    pub fn inject(&self, stream_arn: &str, records: Vec<Value>) -> Result<(), String> {
        let view_type = {
            let mut state = self.shared.lock();
            let view = state
                .streams
                .get(stream_arn)
                .map(|s| s.meta.description["StreamViewType"].clone())
                .ok_or_else(|| format!("unknown stream {stream_arn}"))?;
            state.injected += records.len() as u64;
            (view, state.injected - records.len() as u64)
        };
        let completed = records
            .into_iter()
            .zip(view_type.1..)
            .map(|(r, n)| complete(r, stream_arn, n, &view_type.0))
            .collect::<Result<Vec<_>, _>>()?;
        self.shared.ingest(stream_arn, completed)
    }

    /// Disable and re-enable the stream of `table` (on DynamoDB Local, through `ddb`), as an
    /// operator changing the stream's settings does; returns the new stream's ARN.
    ///
    /// As on AWS: the old stream's open shards close (no rollover or split after), its records
    /// stay readable until trimmed ([`Shape::retention`]), then `DescribeStream` of it answers
    /// `ResourceNotFoundException`; `DescribeTable`'s `LatestStreamArn` (DynamoDB Local's) is
    /// the new stream, which starts empty with shards of its own. What upstream wrote to the
    /// old stream before the call is ingested first. Writes while the stream is off are not
    /// modelled (the switch is instant).
    pub async fn disable_and_enable_stream(
        &self,
        ddb: &aws_sdk_dynamodb::Client,
        table: &str,
    ) -> Result<String, String> {
        let old = latest_stream_arn(ddb, table).await?;
        self.shared
            .disable(&old)
            .await
            .map_err(|e| format!("{}: {}", e.kind, e.message))?;
        for enabled in [false, true] {
            let mut spec =
                aws_sdk_dynamodb::types::StreamSpecification::builder().stream_enabled(enabled);
            if enabled {
                spec = spec.stream_view_type(aws_sdk_dynamodb::types::StreamViewType::NewImage);
            }
            ddb.update_table()
                .table_name(table)
                .stream_specification(spec.build().map_err(|e| e.to_string())?)
                .send()
                .await
                .map_err(|e| format!("UpdateTable {table} (stream enabled {enabled}): {e:?}"))?;
        }
        let new = latest_stream_arn(ddb, table).await?;
        if new == old {
            return Err(format!("{table}: the stream kept its ARN {old}"));
        }
        self.sync_stream(&new).await?;
        Ok(new)
    }

    /// What the double served so far.
    pub fn stats(&self) -> Stats {
        self.shared.lock().stats.clone()
    }

    /// The shards `DescribeStream` lists now for `stream_arn` (empty when unknown), in
    /// creation order.
    pub fn listed_shards(&self, stream_arn: &str) -> Vec<ShardView> {
        let listed = self.shared.with_stream(stream_arn, |stream, _, _| {
            Ok(stream.listed().map(view).collect::<Vec<_>>())
        });
        listed.unwrap_or_default()
    }

    /// Change the share of throttled calls.
    pub fn set_throttle_percent(&self, p: u32) {
        self.shared.lock().throttle_percent = p.min(100);
    }

    /// Change the empty pages of iterators issued from now on.
    pub fn set_empty_pages(&self, k: usize) {
        self.shared.lock().empty_pages = k;
    }
}

async fn latest_stream_arn(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Result<String, String> {
    let out = ddb
        .describe_table()
        .table_name(table)
        .send()
        .await
        .map_err(|e| format!("DescribeTable {table}: {e:?}"))?;
    out.table()
        .and_then(|t| t.latest_stream_arn())
        .map(str::to_string)
        .ok_or_else(|| format!("{table} has no stream"))
}

fn view(shard: &model::Shard) -> ShardView {
    ShardView {
        shard_id: shard.id.clone(),
        parent_shard_id: shard.parent.clone(),
        closed: shard.end.is_some(),
        records: shard.records.len(),
        starting_sequence_number: shard.start.to_string(),
        ending_sequence_number: shard.end.map(|e| e.to_string()),
    }
}

/// An injected record with the fields a real one has filled in.
fn complete(mut record: Value, arn: &str, n: u64, view_type: &Value) -> Result<Value, String> {
    let Some(obj) = record.as_object_mut() else {
        return Err(format!("a record must be a JSON object: {record}"));
    };
    let id = model::key_hash(&json!(format!("{arn}/{n}")));
    obj.entry("eventID")
        .or_insert_with(|| json!(format!("{id:016x}{n:016x}")));
    obj.entry("eventName").or_insert_with(|| json!("INSERT"));
    obj.entry("eventVersion").or_insert_with(|| json!("1.1"));
    obj.entry("eventSource")
        .or_insert_with(|| json!("aws:dynamodb"));
    obj.entry("awsRegion").or_insert_with(|| json!("ddblocal"));
    let Some(dynamodb) = obj.get_mut("dynamodb").and_then(Value::as_object_mut) else {
        return Err(format!("a record needs a dynamodb object: {record}"));
    };
    let size = dynamodb.get("Keys").map_or(0, |k| k.to_string().len())
        + dynamodb.get("NewImage").map_or(0, |i| i.to_string().len());
    dynamodb
        .entry("StreamViewType")
        .or_insert_with(|| view_type.clone());
    dynamodb.entry("SizeBytes").or_insert_with(|| json!(size));
    Ok(record)
}
