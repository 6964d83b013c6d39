use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    dynamo_lambda::telemetry::init();
    let client = dynamo_lambda::client::client_from_env().await?;
    let deps = dynamo_lambda::settings::sweeper_from_env(client)?;
    run(service_fn(|event: LambdaEvent<Value>| {
        tx_sweeper::handler(event, &deps)
    }))
    .await
}
