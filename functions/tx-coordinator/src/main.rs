use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let client = shared::store::client_from_env().await;
    let deps = shared::txn::tx_writer_from_env(client)?;
    run(service_fn(|event: LambdaEvent<Value>| {
        tx_coordinator::handler(event, &deps)
    }))
    .await
}
