//! `dead-letters list|export|replay`: inspect and replay what the writers kept.

use serde_json::{json, Value};
use shared::dead_letter::{DeadLetter, DeadLetters};
use shared::pipeline::{Protocol, RecordResult};
use shared::source::{Batch, Deadline, SourceKind, SourceRecord};
use shared::writer::Writer;

use crate::args::Args;

pub async fn run(mut args: Args) -> Result<(), String> {
    let action = args
        .next_positional()
        .ok_or("dead-letters: list, export or replay?")?;
    let table = args.required("table")?;
    let function = args.required("function")?;
    let client = shared::store::client_from_env().await;
    let letters = DeadLetters::new(client.clone(), &table, &function);
    let kept = letters.list().await.map_err(|e| e.to_string())?;
    match action.as_str() {
        "list" => {
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
        "export" => {
            println!(
                "{}",
                serde_json::to_string_pretty(&sqs_event(&kept)).map_err(|e| e.to_string())?
            );
            Ok(())
        }
        "replay" => match function.as_str() {
            "ratchet-writer" => {
                let mut writer =
                    shared::writer::ratchet_writer_from_env(client).map_err(|e| e.to_string())?;
                writer.dead_letters = letters.clone();
                replay(&writer, &letters, kept).await
            }
            other => Err(format!("replay does not know the function {other:?}")),
        },
        other => Err(format!("unknown action {other:?}")),
    }
}

/// An SQS-shaped event holding the kept payloads (for `cargo lambda invoke --data-file`).
fn sqs_event(letters: &[DeadLetter]) -> Value {
    let records: Vec<Value> = letters
        .iter()
        .map(|l| {
            json!({
                "eventSource": "aws:sqs",
                "messageId": format!("replay-{}", l.position.id),
                "body": String::from_utf8_lossy(&l.payload),
                "eventSourceARN": l.position.source_arn,
            })
        })
        .collect();
    json!({ "Records": records })
}

async fn replay<P: Protocol>(
    writer: &Writer<P>,
    letters: &DeadLetters,
    kept: Vec<DeadLetter>,
) -> Result<(), String> {
    let (mut done, mut still) = (0, 0);
    for kind in [SourceKind::Kinesis, SourceKind::Sqs] {
        let group: Vec<&DeadLetter> = kept.iter().filter(|l| l.position.kind == kind).collect();
        if group.is_empty() {
            continue;
        }
        let batch = Batch {
            kind,
            records: group
                .iter()
                .map(|l| SourceRecord {
                    position: l.position.clone(),
                    body: l.payload.clone(),
                })
                .collect(),
        };
        let report = writer.handle_batch(&batch, Deadline::none()).await;
        for (letter, result) in group.iter().zip(&report.results) {
            match result {
                RecordResult::Done(_) => {
                    letters.remove(letter).await.map_err(|e| e.to_string())?;
                    println!("replayed {} ({})", letter.id, result.label());
                    done += 1;
                }
                RecordResult::Rejected(reason) => {
                    println!("still rejected {}: {reason}", letter.id);
                    still += 1;
                }
                other => {
                    println!("not replayed {} ({}); try again", letter.id, other.label());
                    still += 1;
                }
            }
        }
    }
    println!("{done} replayed, {still} kept");
    Ok(())
}
