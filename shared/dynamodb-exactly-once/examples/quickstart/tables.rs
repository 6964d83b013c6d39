//! The quickstart's table: what a user's own setup (a template, a migration) would create.

use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use std::time::Duration;

pub type Error = Box<dyn std::error::Error>;

/// A table with the string hash key `PK`, on-demand, unless it exists; waits until it is active.
pub async fn create_table(client: &aws_sdk_dynamodb::Client, name: &str) -> Result<(), Error> {
    let created = client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("PK")
                .attribute_type(ScalarAttributeType::S)
                .build()?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("PK")
                .key_type(KeyType::Hash)
                .build()?,
        )
        .send()
        .await;
    if let Err(e) = created.map_err(|e| e.into_service_error()) {
        if !e.is_resource_in_use_exception() {
            return Err(e.into()); // not "created by an earlier run"
        }
    }
    client
        .wait_until_table_exists()
        .table_name(name)
        .wait(Duration::from_secs(120))
        .await?;
    Ok(())
}
