//! The counter and journal tables of one configuration, in DynamoDB Local, and the journal's
//! stream ARN.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    StreamSpecification, StreamViewType,
};
use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::ItemKey;

/// A configuration's tables.
#[derive(Debug, Clone)]
pub struct Tables {
    pub counters: String,
    pub journal: String,
    /// The journal table's `LatestStreamArn`.
    pub arn: String,
}

fn attribute(name: &str) -> Result<AttributeDefinition, String> {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(|e| e.to_string())
}

fn key(name: &str, kind: KeyType) -> Result<KeySchemaElement, String> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .map_err(|e| e.to_string())
}

/// The counter table (`PK`, `SK`) and the journal (`pk`, `sk`, a stream of new images), named
/// with a prefix unique to this process and call.
pub async fn create(ddb: &Client, tag: &str) -> Result<Tables, String> {
    let prefix = dev_testing::unique_prefix();
    let counters = format!("{prefix}{tag}counters");
    let journal = format!("{prefix}{tag}journal");
    ddb.create_table()
        .table_name(&counters)
        .attribute_definitions(attribute("PK")?)
        .attribute_definitions(attribute("SK")?)
        .key_schema(key("PK", KeyType::Hash)?)
        .key_schema(key("SK", KeyType::Range)?)
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .map_err(|e| format!("create {counters}: {e:?}"))?;
    let stream = StreamSpecification::builder()
        .stream_enabled(true)
        .stream_view_type(StreamViewType::NewImage)
        .build()
        .map_err(|e| e.to_string())?;
    let out = ddb
        .create_table()
        .table_name(&journal)
        .attribute_definitions(attribute("pk")?)
        .attribute_definitions(attribute("sk")?)
        .key_schema(key("pk", KeyType::Hash)?)
        .key_schema(key("sk", KeyType::Range)?)
        .billing_mode(BillingMode::PayPerRequest)
        .stream_specification(stream)
        .send()
        .await
        .map_err(|e| format!("create {journal}: {e:?}"))?;
    let arn = out
        .table_description()
        .and_then(|t| t.latest_stream_arn())
        .ok_or_else(|| format!("{journal}: no stream ARN"))?
        .to_string();
    Ok(Tables {
        counters,
        journal,
        arn,
    })
}

/// Counter item `i`: `PK = cust#<i>`, `SK = day`.
pub fn item_key(i: usize) -> Result<ItemKey, String> {
    ItemKey::partition("PK", format!("cust#{i:06}"))
        .and_then(|k| k.with_sort("SK", "day"))
        .map_err(|e| e.to_string())
}
