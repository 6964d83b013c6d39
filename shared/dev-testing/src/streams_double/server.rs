//! The HTTP side: an HTTP/1 server on loopback speaking the DynamoDBStreams_20120810 JSON
//! protocol (`X-Amz-Target: DynamoDBStreams_20120810.<Operation>`, a JSON body, answers in
//! `application/x-amz-json-1.0`, errors as HTTP 400 with `__type` and `message`).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::error::ApiError;
use super::reads::{self, Position};
use super::state::Shared;

/// Accept connections until the task is aborted.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of file descriptors or the like: try again shortly.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(Arc::clone(&shared), request));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

static REQUEST_IDS: AtomicU64 = AtomicU64::new(0);

async fn answer(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let target = request
        .headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let operation = target.rsplit('.').next().unwrap_or("").to_string();
    let result = match request.into_body().collect().await {
        Ok(body) => match parse(&body.to_bytes()) {
            Ok(body) => dispatch(&shared, &operation, &body).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(ApiError::validation(format!("unreadable body: {e}"))),
    };
    let (status, body) = match result {
        Ok(value) => (200, value.to_string()),
        Err(e) => (e.status, e.body()),
    };
    let id = REQUEST_IDS.fetch_add(1, Ordering::Relaxed);
    let response = Response::builder()
        .status(status)
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amzn-requestid", format!("double-{id:016}"))
        .body(Full::new(Bytes::from(body)));
    Ok(response.unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))))
}

fn parse(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(bytes).map_err(|e| ApiError::validation(format!("malformed JSON: {e}")))
}

async fn dispatch(shared: &Shared, operation: &str, body: &Value) -> Result<Value, ApiError> {
    {
        let mut state = shared.lock();
        *state.stats.calls.entry(operation.to_string()).or_insert(0) += 1;
    }
    if operation == "GetRecords" {
        return get_records(shared, body).await; // waits the latency in its reader's slot
    }
    if !shared.latency.is_zero() {
        tokio::time::sleep(shared.latency).await;
    }
    match operation {
        "DescribeStream" => describe_stream(shared, body).await,
        "GetShardIterator" => get_shard_iterator(shared, body).await,
        "ListStreams" => shared.upstream.list_streams(body.clone()).await,
        other => Err(ApiError::unknown_operation(other)),
    }
}

fn text<'a>(body: &'a Value, field: &str) -> Result<&'a str, ApiError> {
    body[field]
        .as_str()
        .ok_or_else(|| ApiError::validation(format!("{field} is required")))
}

fn limit(body: &Value, max: usize) -> Result<usize, ApiError> {
    match &body["Limit"] {
        Value::Null => Ok(max),
        value => value
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| ApiError::validation(format!("Limit must be within 1..={max}"))),
    }
}

async fn describe_stream(shared: &Shared, body: &Value) -> Result<Value, ApiError> {
    let arn = text(body, "StreamArn")?;
    let limit = limit(body, 100)?;
    let start = body["ExclusiveStartShardId"].as_str();
    shared.feed(arn, false).await?;
    shared.with_stream(arn, |stream, _, _| reads::describe(stream, limit, start))
}

async fn get_shard_iterator(shared: &Shared, body: &Value) -> Result<Value, ApiError> {
    let arn = text(body, "StreamArn")?;
    let shard = text(body, "ShardId")?;
    let kind = text(body, "ShardIteratorType")?;
    let sequence = body["SequenceNumber"].as_str();
    shared.throttle()?;
    shared.feed(arn, false).await?;
    let empty_pages = shared.lock().empty_pages;
    let position = shared.with_stream(arn, |stream, _, now| {
        reads::shard_iterator(stream, shard, kind, sequence, now, empty_pages)
    })?;
    Ok(json!({ "ShardIterator": position.encode() }))
}

async fn get_records(shared: &Shared, body: &Value) -> Result<Value, ApiError> {
    let position = Position::decode(text(body, "ShardIterator")?)?;
    let limit = limit(body, 1000)?;
    let entered = shared.enter(&position.stream, &position.shard);
    if !shared.latency.is_zero() {
        tokio::time::sleep(shared.latency).await;
    }
    let _reader = entered?;
    shared.throttle()?;
    shared.feed(&position.stream, false).await?;
    let page = shared.with_stream(&position.stream, |stream, stats, now| {
        let page = reads::get_records(stream, &position, limit, now)?;
        *stats
            .get_records_per_shard
            .entry(position.shard.clone())
            .or_insert(0) += 1;
        stats.records_served += page.records.len() as u64;
        if page.records.is_empty() && position.empty_pages > 0 {
            stats.empty_pages_served += 1;
        }
        Ok(page)
    })?;
    let mut out = json!({ "Records": page.records });
    if let Some(next) = page.next {
        out["NextShardIterator"] = json!(next.encode());
    }
    Ok(out)
}
