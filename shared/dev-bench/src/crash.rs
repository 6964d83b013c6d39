//! `bench crash-tx`: run the first message of an SQS event with a coordinator that dies after
//! its K-th DynamoDB call (a refused connection from then on, through the fault injector), so
//! that the demo can show the sweeper finishing or rolling back what it left.

use std::path::Path;

use dev_testing::{client_with, FaultInjector};
use dynamodb_exactly_once::txn::Coordinator;
use dynamodb_exactly_once::Deadline;
use dynamodb_exactly_once_lambda::settings::functions::TX_COORDINATOR;
use dynamodb_exactly_once_lambda::Batch;

pub async fn run(fail_after: usize, event: &Path) -> Result<(), String> {
    let k = fail_after;
    let path = event.display();
    let text = std::fs::read_to_string(event).map_err(|e| format!("{path}: {e}"))?;
    let event: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let batch = Batch::from_event(event).map_err(|e| e.to_string())?;
    let record = batch.records.first().ok_or("the event has no record")?;
    let client = client_with(Some(FaultInjector::fail_from(k)), 1);
    let coordinator = TX_COORDINATOR
        .from_env::<Coordinator>(client)
        .map_err(|e| e.to_string())?;
    let message = coordinator
        .parse_message(&record.body)
        .map_err(|e| e.to_string())?;
    match coordinator.run(&message, Deadline::none()).await {
        Ok(report) => println!(
            "transaction {} finished before call {k}: {:?}",
            message.tx_id, report.outcome
        ),
        Err(err) => println!(
            "coordinator of transaction {} died after {k} DynamoDB calls ({err})",
            message.tx_id
        ),
    }
    Ok(())
}
