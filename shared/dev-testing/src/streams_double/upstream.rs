//! The double's feed: DynamoDB Local's own stream, read with raw JSON POSTs so that its records
//! pass through untouched except the fields the double rewrites.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use super::error::ApiError;
use super::model::StreamMeta;

/// DynamoDB Local accepts any signature; it wants the header's shape.
const AUTHORIZATION: &str = "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=x";

/// Pages read from one upstream shard per pull at most (1,000 records each).
const MAX_PAGES_PER_PULL: usize = 100;

/// Upstream `GetRecords` errors answered by a new iterator after the last record read.
const RENEW: [&str; 2] = ["ExpiredIteratorException", "TrimmedDataAccessException"];

/// A JSON client of DynamoDB Local.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    endpoint: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// Where the double is in one upstream shard.
#[derive(Debug)]
struct Cursor {
    shard: String,
    iterator: Option<String>,
    last_sequence: Option<String>,
}

/// Where the double is in one upstream stream.
#[derive(Debug)]
pub(crate) struct Feed {
    arn: String,
    cursors: Vec<Cursor>,
}

/// The table name in a stream ARN `arn:aws:dynamodb:REGION:ACCOUNT:table/NAME/stream/LABEL`.
pub(crate) fn table_of(arn: &str) -> Option<&str> {
    let rest = arn.split_once(":table/")?.1;
    Some(rest.split_once("/stream/")?.0)
}

impl Upstream {
    /// A client of the DynamoDB Local at `endpoint` (`http://host:port`).
    pub fn new(endpoint: &str) -> Upstream {
        Upstream {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// POST `body` as `target` (e.g. `DynamoDBStreams_20120810.GetRecords`).
    async fn call(&self, target: &str, body: Value) -> Result<Value, ApiError> {
        let request = hyper::Request::post(format!("{}/", self.endpoint))
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", target)
            .header("authorization", AUTHORIZATION)
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| ApiError::internal(format!("upstream request: {e}")))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| ApiError::internal(format!("upstream {target}: {e}")))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| ApiError::internal(format!("upstream {target} body: {e}")))?
            .to_bytes();
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::internal(format!("upstream {target}: {e}: {bytes:?}")))?;
        if status.is_success() {
            return Ok(value);
        }
        let kind = value["__type"].as_str().unwrap_or("");
        let kind = kind.rsplit('#').next().unwrap_or(kind);
        let message = value["message"]
            .as_str()
            .or(value["Message"].as_str())
            .unwrap_or("");
        Err(match kind {
            "ResourceNotFoundException" => ApiError::not_found(message),
            "ExpiredIteratorException" => ApiError::expired(message),
            "TrimmedDataAccessException" => ApiError::trimmed(message),
            _ => ApiError::internal(format!("upstream {target}: {kind}: {message}")),
        })
    }

    async fn streams(&self, operation: &str, body: Value) -> Result<Value, ApiError> {
        self.call(&format!("DynamoDBStreams_20120810.{operation}"), body)
            .await
    }

    /// `ListStreams` of DynamoDB Local, passed through.
    pub async fn list_streams(&self, body: Value) -> Result<Value, ApiError> {
        self.streams("ListStreams", body).await
    }

    /// The stream's description (without its shards) and its table's partition key, and a
    /// feed reading every upstream shard from `TRIM_HORIZON`.
    pub async fn open(&self, arn: &str) -> Result<(StreamMeta, Feed), ApiError> {
        let table = table_of(arn)
            .ok_or_else(|| ApiError::validation(format!("Invalid StreamArn {arn}")))?;
        let described = self
            .call(
                "DynamoDB_20120810.DescribeTable",
                json!({ "TableName": table }),
            )
            .await?;
        let hash_key = described["Table"]["KeySchema"]
            .as_array()
            .and_then(|keys| keys.iter().find(|k| k["KeyType"] == "HASH"))
            .and_then(|k| k["AttributeName"].as_str())
            .ok_or_else(|| ApiError::internal(format!("no HASH key in {described}")))?
            .to_string();
        let mut description = self
            .streams("DescribeStream", json!({ "StreamArn": arn }))
            .await?["StreamDescription"]
            .take();
        if let Some(obj) = description.as_object_mut() {
            obj.remove("Shards");
            obj.remove("LastEvaluatedShardId");
        }
        let mut feed = Feed {
            arn: arn.to_string(),
            cursors: Vec::new(),
        };
        self.refresh(&mut feed).await?;
        Ok((
            StreamMeta {
                description,
                hash_key,
            },
            feed,
        ))
    }

    /// Learn upstream shards the feed does not read yet (from `TRIM_HORIZON`).
    pub async fn refresh(&self, feed: &mut Feed) -> Result<(), ApiError> {
        let mut start: Option<String> = None;
        loop {
            let mut body = json!({ "StreamArn": feed.arn });
            if let Some(s) = &start {
                body["ExclusiveStartShardId"] = json!(s);
            }
            let answer = self.streams("DescribeStream", body).await?;
            let description = &answer["StreamDescription"];
            for shard in description["Shards"].as_array().into_iter().flatten() {
                let Some(id) = shard["ShardId"].as_str() else {
                    continue;
                };
                if feed.cursors.iter().any(|c| c.shard == id) {
                    continue;
                }
                let iterator = self.iterator(&feed.arn, id, None).await?;
                feed.cursors.push(Cursor {
                    shard: id.to_string(),
                    iterator: Some(iterator),
                    last_sequence: None,
                });
            }
            match description["LastEvaluatedShardId"].as_str() {
                Some(s) => start = Some(s.to_string()),
                None => return Ok(()),
            }
        }
    }

    async fn iterator(
        &self,
        arn: &str,
        shard: &str,
        after: Option<&str>,
    ) -> Result<String, ApiError> {
        let mut body =
            json!({ "StreamArn": arn, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON" });
        if let Some(seq) = after {
            body["ShardIteratorType"] = json!("AFTER_SEQUENCE_NUMBER");
            body["SequenceNumber"] = json!(seq);
        }
        let answer = self.streams("GetShardIterator", body).await?;
        answer["ShardIterator"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| ApiError::internal(format!("no ShardIterator in {answer}")))
    }

    /// Every record upstream wrote since the last pull, shard by shard.
    pub async fn pull(&self, feed: &mut Feed) -> Result<Vec<Value>, ApiError> {
        let mut records = Vec::new();
        for cursor in &mut feed.cursors {
            let mut renewed = 0;
            for _ in 0..MAX_PAGES_PER_PULL {
                let Some(iterator) = cursor.iterator.clone() else {
                    break;
                };
                let body = json!({ "ShardIterator": iterator, "Limit": 1000 });
                let page = match self.streams("GetRecords", body).await {
                    // Expired: DynamoDB Local's iterators live 15 minutes of real time.
                    // Trimmed: DynamoDB Local answers it to a TRIM_HORIZON iterator taken while
                    // the shard was empty once other tables' writes moved its global sequence
                    // counter before this shard's first record. Either way, start again after
                    // the last record read (or at the horizon).
                    Err(e) if renewed < 3 && RENEW.contains(&e.kind) => {
                        renewed += 1;
                        let last = cursor.last_sequence.as_deref();
                        cursor.iterator =
                            Some(self.iterator(&feed.arn, &cursor.shard, last).await?);
                        continue;
                    }
                    other => other?,
                };
                cursor.iterator = page["NextShardIterator"].as_str().map(str::to_string);
                let batch = page["Records"].as_array().cloned().unwrap_or_default();
                if let Some(last) = batch.last() {
                    let seq = last["dynamodb"]["SequenceNumber"].as_str();
                    cursor.last_sequence = seq.map(str::to_string);
                }
                let done = batch.is_empty();
                records.extend(batch);
                if done {
                    break;
                }
            }
        }
        Ok(records)
    }
}
