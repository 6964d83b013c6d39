use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    dynamodb_exactly_once_lambda::telemetry::init();
    let client = dynamodb_exactly_once_lambda::client::client_from_env().await?;
    let deps = dynamodb_exactly_once_lambda::settings::sweeper_from_env(client)?;
    run(service_fn(|event: LambdaEvent<Value>| {
        tx_sweeper::handler(event, &deps)
    }))
    .await
}
