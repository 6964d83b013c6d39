//! The DynamoDB client, configured from the standard AWS environment (`AWS_REGION`,
//! credentials, and `AWS_ENDPOINT_URL_DYNAMODB` for a local endpoint such as DynamoDB Local).

use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::Client;

/// A client from the environment, with the SDK's standard retry policy.
pub async fn client_from_env() -> Client {
    let config = aws_config::load_defaults(BehaviorVersion::latest()).await;
    Client::new(&config)
}
