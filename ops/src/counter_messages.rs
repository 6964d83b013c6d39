//! The on-failure destination's messages for `ops counter repair`: read from the queue
//! (`--from-queue`: received hidden for 12 hours, deleted only once the repair succeeded,
//! made visible again otherwise) or from a file (`--messages`).

use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
};
use dynamodb_exactly_once::counter::journal::StreamFailure;
use serde_json::Value;

/// How long received messages stay hidden while the repair runs (SQS's most: 12 hours).
const HIDDEN_SECS: i32 = 43_200;
/// Messages taken from the queue in one repair at most (the rest wait for the next one).
const MAX_MESSAGES: usize = 10_000;

/// One message: its name (SQS message id, or its place in the file), its description, and
/// its receipt handle when it came from the queue.
pub struct Message {
    pub name: String,
    pub failure: StreamFailure,
    pub receipt: Option<String>,
}

/// The messages of a file: a JSON array of message bodies, SQS's `receive-message` output
/// (`{"Messages": [{"MessageId", "Body"}, …]}`), or one body per line.
pub fn from_file(path: &str) -> Result<Vec<Message>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let bodies = bodies_of(&text).map_err(|e| format!("{path}: {e}"))?;
    bodies
        .into_iter()
        .map(|(name, body)| {
            let failure = StreamFailure::parse(&name, &body).map_err(|e| e.to_string())?;
            Ok(Message {
                name,
                failure,
                receipt: None,
            })
        })
        .collect()
}

/// The (name, body) of each message of a file's text.
fn bodies_of(text: &str) -> Result<Vec<(String, String)>, String> {
    let named = |i: usize| format!("#{} of the file", i + 1);
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => Ok(items
            .iter()
            .enumerate()
            .map(|(i, v)| (named(i), body_text(v)))
            .collect()),
        Ok(Value::Object(o)) if o.contains_key("Messages") => {
            let Some(Value::Array(items)) = o.get("Messages") else {
                return Err("\"Messages\" is not a list".into());
            };
            Ok(items
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let name = m
                        .get("MessageId")
                        .and_then(Value::as_str)
                        .map_or_else(|| named(i), str::to_string);
                    (name, m.get("Body").map(body_text).unwrap_or_default())
                })
                .collect())
        }
        Ok(one @ Value::Object(_)) => Ok(vec![(named(0), one.to_string())]),
        _ => Ok(text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (format!("line {} of the file", i + 1), l.to_string()))
            .collect()),
    }
}

/// A body as text: a JSON string is the body itself, anything else its JSON.
fn body_text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// The queue at `url`, through `sqs`.
pub struct Queue {
    sqs: aws_sdk_sqs::Client,
    url: String,
}

impl Queue {
    pub async fn from_env(url: &str) -> Result<Queue, String> {
        let config = dynamodb_exactly_once_lambda::__private::sdk_config_from_env()
            .await
            .map_err(|e| e.to_string())?;
        Ok(Queue {
            sqs: aws_sdk_sqs::Client::new(&config),
            url: url.to_string(),
        })
    }

    /// Every message of the queue (up to [`MAX_MESSAGES`]), hidden for [`HIDDEN_SECS`]. A
    /// malformed one is an error naming it; what was received is then made visible again.
    pub async fn receive(&self) -> Result<Vec<Message>, String> {
        let mut out = Vec::new();
        let mut receipts = Vec::new();
        while out.len() < MAX_MESSAGES {
            let page = self
                .sqs
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(10)
                .visibility_timeout(HIDDEN_SECS)
                .wait_time_seconds(1)
                .send()
                .await;
            let page = match page {
                Ok(p) => p,
                Err(e) => {
                    let error = format!("ReceiveMessage {}: {}", self.url, error_text(&e));
                    return Err(self.release_after(&receipts, error).await);
                }
            };
            if page.messages().is_empty() {
                break;
            }
            for m in page.messages() {
                let name = m.message_id().unwrap_or("(no id)").to_string();
                let receipt = m.receipt_handle().map(str::to_string);
                receipts.extend(receipt.clone());
                match StreamFailure::parse(&name, m.body().unwrap_or_default()) {
                    Ok(failure) => out.push(Message {
                        name,
                        failure,
                        receipt,
                    }),
                    Err(e) => return Err(self.release_after(&receipts, e.to_string()).await),
                }
            }
        }
        Ok(out)
    }

    async fn release_after(&self, receipts: &[String], error: String) -> String {
        match self.release(receipts).await {
            Ok(()) => error,
            Err(e) => format!("{error}; and {e}"),
        }
    }

    /// Make the messages of `receipts` visible again (the repair did not finish).
    pub async fn release(&self, receipts: &[String]) -> Result<(), String> {
        for (chunk_no, chunk) in receipts.chunks(10).enumerate() {
            let entries: Vec<_> = chunk
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(format!("m{}", chunk_no * 10 + i))
                        .receipt_handle(r)
                        .visibility_timeout(0)
                        .build()
                        .ok()
                })
                .collect();
            self.sqs
                .change_message_visibility_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| {
                    format!(
                        "the messages could not be made visible again (they will be in {HIDDEN_SECS} s): {}",
                        error_text(&e)
                    )
                })?;
        }
        Ok(())
    }

    /// Delete the messages of `receipts` (their days were repaired); how many SQS refused
    /// to delete.
    pub async fn delete(&self, receipts: &[String]) -> Result<usize, String> {
        let mut failed = 0;
        for (chunk_no, chunk) in receipts.chunks(10).enumerate() {
            let entries: Vec<_> = chunk
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(format!("m{}", chunk_no * 10 + i))
                        .receipt_handle(r)
                        .build()
                        .ok()
                })
                .collect();
            let out = self
                .sqs
                .delete_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| format!("DeleteMessageBatch: {}", error_text(&e)))?;
            failed += out.failed().len();
        }
        Ok(failed)
    }
}

fn error_text<E: std::error::Error + 'static>(e: &aws_sdk_sqs::error::SdkError<E>) -> String {
    aws_sdk_sqs::error::DisplayErrorContext(e).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_holds_bodies_as_a_list_as_sqs_prints_them_or_one_a_line() {
        let body = r#"{"DDBStreamBatchInfo":{}}"#;
        let list = format!("[{body}, {body}]");
        assert_eq!(bodies_of(&list).expect("list").len(), 2);
        let sqs = serde_json::json!({"Messages": [{"MessageId": "id-1", "Body": body}]});
        let got = bodies_of(&sqs.to_string()).expect("sqs");
        assert_eq!(got, [("id-1".to_string(), body.to_string())]);
        let lines = format!("{body}\n\n{body}\n");
        let got = bodies_of(&lines).expect("lines");
        assert_eq!(got[1].0, "line 3 of the file");
    }
}
