//! `dead-letters list|export|replay`: inspect and replay what the writers kept.

use serde_json::{json, Value};
use shared::dead_letter::{DeadLetter, DeadLetters};
use shared::pipeline::Protocol;
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
                replay(&writer).await
            }
            "counter-writer" => {
                let mut writer =
                    shared::counter::counter_writer_from_env(client).map_err(|e| e.to_string())?;
                writer.dead_letters = letters.clone();
                replay(&writer).await
            }
            "tx-coordinator" => {
                let mut writer =
                    shared::txn::tx_writer_from_env(client).map_err(|e| e.to_string())?;
                writer.dead_letters = letters.clone();
                replay(&writer).await
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

async fn replay<P: Protocol>(writer: &Writer<P>) -> Result<(), String> {
    let report = writer
        .replay_dead_letters()
        .await
        .map_err(|e| e.to_string())?;
    for id in &report.replayed {
        println!("replayed        {id}");
    }
    for (id, reason) in &report.still_rejected {
        println!("still rejected  {id}: {reason}");
    }
    for id in &report.failed {
        println!("not replayed    {id} (transient failure; try again)");
    }
    println!(
        "{} replayed and removed, {} still rejected, {} to retry",
        report.replayed.len(),
        report.still_rejected.len(),
        report.failed.len()
    );
    Ok(())
}
