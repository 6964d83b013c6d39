//! `dead-letters list|export|replay`: inspect and replay what the writers kept.

use aws_sdk_dynamodb::Client;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use dynamodb_exactly_once::config::Configured;
use dynamodb_exactly_once::counter::Counter;
use dynamodb_exactly_once::document::Document;
use dynamodb_exactly_once::ratchet::Ratchet;
use dynamodb_exactly_once::txn::Coordinator;
use dynamodb_exactly_once::Protocol;
use dynamodb_exactly_once_lambda::client::client_from_env;
use dynamodb_exactly_once_lambda::dead_letter::{DeadLetter, DeadLetters};
use dynamodb_exactly_once_lambda::settings::functions::{
    COUNTER_WRITER, DOCUMENT_WRITER, RATCHET_WRITER, TX_COORDINATOR,
};
use dynamodb_exactly_once_lambda::settings::FunctionSpec;
use dynamodb_exactly_once_lambda::{writer_from_env, Writer};
use serde_json::{json, Value};

/// What to do with the dead letters.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Action {
    /// Print them as JSON lines.
    List,
    /// Print an event of their payloads (for `cargo lambda invoke --data-file`): SQS when
    /// every payload is text, else Kinesis with base64 data (lossless either way).
    Export,
    /// Run them through the function's protocol again (settings from env); remove those that
    /// now succeed.
    Replay,
}

pub async fn run(action: Action, table: &str, function: &str, force: bool) -> Result<(), String> {
    let client = client_from_env().await.map_err(|e| e.to_string())?;
    let letters = DeadLetters::new(client.clone(), table, function);
    let kept = letters.list().await.map_err(|e| e.to_string())?;
    match action {
        Action::List => {
            for l in &kept {
                println!(
                    "{}",
                    json!({
                        "id": l.id, "reason": l.reason, "position": l.position, "rejectedAt": l.rejected_at,
                        "payload": l.payload_text().map(Value::from).unwrap_or_else(|| json!(format!("<{} binary bytes>", l.payload.len()))),
                    })
                );
            }
            eprintln!("{} dead letter(s) of {function} in {table}", kept.len());
            Ok(())
        }
        Action::Export => {
            println!(
                "{}",
                serde_json::to_string_pretty(&replay_event(&kept)).map_err(|e| e.to_string())?
            );
            Ok(())
        }
        Action::Replay => match function {
            f if f == RATCHET_WRITER.name => {
                replay::<Ratchet>(client, RATCHET_WRITER, letters, force).await
            }
            f if f == COUNTER_WRITER.name => {
                replay::<Counter>(client, COUNTER_WRITER, letters, force).await
            }
            f if f == TX_COORDINATOR.name => {
                replay::<Coordinator>(client, TX_COORDINATOR, letters, force).await
            }
            f if f == DOCUMENT_WRITER.name => {
                replay::<Document>(client, DOCUMENT_WRITER, letters, force).await
            }
            other => Err(format!("replay does not know the function {other:?}")),
        },
    }
}

/// The kept payloads as an event a writer accepts, without losing a byte: an SQS event when
/// every payload is text (SQS bodies are text), otherwise a Kinesis event whose `data` is the
/// base64 of the exact payload.
fn replay_event(letters: &[DeadLetter]) -> Value {
    if letters.iter().all(|l| l.payload_text().is_some()) {
        let records: Vec<Value> = letters
            .iter()
            .map(|l| {
                json!({
                    "eventSource": "aws:sqs",
                    // User records of one KPL aggregate share its sequence number.
                    "messageId": match &l.position.sub_record {
                        Some(sub) => format!("replay-{}:{}", l.position.id, sub.sub_sequence_number),
                        None => format!("replay-{}", l.position.id),
                    },
                    "body": l.payload_text().unwrap_or_default(),
                    "eventSourceARN": l.position.source_arn,
                })
            })
            .collect();
        return json!({ "Records": records });
    }
    let records: Vec<Value> = letters
        .iter()
        .enumerate()
        .map(|(i, l)| {
            json!({
                "eventSource": "aws:kinesis",
                "eventID": format!("shardId-replay:{i}"),
                "eventSourceARN": l.position.source_arn,
                "kinesis": {
                    "data": BASE64.encode(&l.payload),
                    "partitionKey": l.position.partition_key.clone().unwrap_or_else(|| "replay".into()),
                    "sequenceNumber": format!("{i:020}"),
                    "approximateArrivalTimestamp": 0.0,
                    "kinesisSchemaVersion": "1.0",
                },
            })
        })
        .collect();
    json!({ "Records": records })
}

async fn replay<P: Protocol + Configured>(
    client: Client,
    spec: FunctionSpec,
    letters: DeadLetters,
    force: bool,
) -> Result<(), String> {
    let writer: Writer<P> = Writer {
        dead_letters: letters,
        ..writer_from_env(client, spec).map_err(|e| e.to_string())?
    };
    let report = if force {
        writer.replay_dead_letters_forced().await
    } else {
        writer.replay_dead_letters().await
    };
    let report = report.map_err(|e| e.to_string())?;
    for id in &report.replayed {
        println!("replayed        {id}");
    }
    for (id, reason) in &report.still_rejected {
        println!("still rejected  {id}: {reason}");
    }
    for id in &report.failed {
        println!("not replayed    {id} (transient failure; try again)");
    }
    for id in &report.conflicted {
        println!("conflict        {id} (decided, not applied; kept)");
    }
    println!(
        "{} replayed and removed, {} still rejected, {} to retry, {} in conflict (kept)",
        report.replayed.len(),
        report.still_rejected.len(),
        report.failed.len(),
        report.conflicted.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use dynamodb_exactly_once::{Rejection, RejectionCode};
    use dynamodb_exactly_once_lambda::source::{SourceKind, SourcePosition};
    use dynamodb_exactly_once_lambda::Batch;

    use super::*;

    fn letter(payload: &[u8]) -> DeadLetter {
        DeadLetter {
            id: "f|kinesis|-|-|1".into(),
            function: "f".into(),
            reason: Rejection::new(RejectionCode::BadJson, "x"),
            position: SourcePosition {
                kind: SourceKind::Kinesis,
                source_arn: None,
                id: "1".into(),
                shard_id: None,
                partition_key: Some("p".into()),
                message_group_id: None,
                sub_record: None,
                event_id: None,
                arrived_at_ms: None,
            },
            rejected_at: 0,
            parts: 1,
            payload: payload.to_vec(),
        }
    }

    #[test]
    fn export_keeps_every_byte_of_binary_and_text_payloads() {
        for payloads in [
            vec![b"{\"op\":\"put\"}".to_vec(), "é text".as_bytes().to_vec()],
            vec![vec![0xff, 0x00, 0xfe, b'{'], b"text".to_vec()],
        ] {
            let letters: Vec<DeadLetter> = payloads.iter().map(|p| letter(p)).collect();
            let batch = Batch::from_event(replay_event(&letters)).expect("a writer accepts it");
            let bodies: Vec<Vec<u8>> = batch.records.into_iter().map(|r| r.body).collect();
            assert_eq!(bodies, payloads);
        }
    }
}
