//! Create DynamoDB tables exactly as `template.yaml` declares them, so the demo and the tests
//! run against the same key schemas, indexes and TTL settings that SAM deploys (the template is
//! read, never repeated).
//!
//! Supported table properties: `KeySchema`, `AttributeDefinitions`, `GlobalSecondaryIndexes`
//! (with `Projection`), `BillingMode` and `TimeToLiveSpecification`. Intrinsic functions are
//! not evaluated: a table's properties must not depend on them (the table names come from the
//! logical id, with an optional prefix).

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::path::Path;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;
use serde_json::Value;

use dynamo_protocols::StoreError;

/// The template could not be read or a table could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// Reading or parsing the template failed.
    #[error("template {path}: {message}")]
    Template {
        /// The template file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// DynamoDB refused a call.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The `AWS::DynamoDB::Table` resources of a template: logical id → properties (as JSON).
pub fn template_tables(path: &Path) -> Result<BTreeMap<String, Value>, ProvisionError> {
    let err = |message: String| ProvisionError::Template {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let yaml: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).map_err(|e| err(e.to_string()))?;
    let json = yaml_to_json(yaml);
    let resources = json
        .get("Resources")
        .and_then(Value::as_object)
        .ok_or_else(|| err("no Resources".into()))?;
    Ok(resources
        .iter()
        .filter(|(_, r)| r.get("Type").and_then(Value::as_str) == Some("AWS::DynamoDB::Table"))
        .map(|(id, r)| {
            (
                id.clone(),
                r.get("Properties").cloned().unwrap_or(Value::Null),
            )
        })
        .collect())
}

/// YAML to JSON; a tagged value (`!Ref x`) becomes `{"!Ref": x}`.
fn yaml_to_json(value: serde_yaml_ng::Value) -> Value {
    use serde_yaml_ng::Value as Y;
    match value {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => serde_json::to_value(n).unwrap_or(Value::Null),
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(yaml_to_json).collect()),
        Y::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Y::String(s) => s,
                        other => serde_yaml_ng::to_string(&other)
                            .unwrap_or_default()
                            .trim()
                            .to_string(),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        Y::Tagged(tagged) => {
            let mut obj = serde_json::Map::new();
            obj.insert(tagged.tag.to_string(), yaml_to_json(tagged.value));
            Value::Object(obj)
        }
    }
}

fn str_field<'a>(v: &'a Value, name: &str) -> Result<&'a str, StoreError> {
    v.get(name).and_then(Value::as_str).ok_or_else(|| {
        StoreError::Inconsistent(format!("table property `{name}` missing or not a string"))
    })
}

fn key_schema(v: &Value) -> Result<Vec<KeySchemaElement>, StoreError> {
    let build = |e: aws_sdk_dynamodb::error::BuildError| StoreError::Inconsistent(e.to_string());
    v.as_array()
        .ok_or_else(|| StoreError::Inconsistent("KeySchema must be a list".into()))?
        .iter()
        .map(|k| {
            KeySchemaElement::builder()
                .attribute_name(str_field(k, "AttributeName")?)
                .key_type(KeyType::from(str_field(k, "KeyType")?))
                .build()
                .map_err(build)
        })
        .collect()
}

/// Create the template's table `logical_id` under the name `name` (TTL included) and wait until
/// it is active.
pub async fn create_table(
    client: &Client,
    name: &str,
    properties: &Value,
) -> Result<(), StoreError> {
    let build = |e: aws_sdk_dynamodb::error::BuildError| StoreError::Inconsistent(e.to_string());
    let mut req = client
        .create_table()
        .table_name(name)
        .set_key_schema(Some(key_schema(
            properties.get("KeySchema").unwrap_or(&Value::Null),
        )?))
        .billing_mode(BillingMode::from(
            properties
                .get("BillingMode")
                .and_then(Value::as_str)
                .unwrap_or("PAY_PER_REQUEST"),
        ));
    for def in properties
        .get("AttributeDefinitions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        req = req.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(str_field(def, "AttributeName")?)
                .attribute_type(ScalarAttributeType::from(str_field(def, "AttributeType")?))
                .build()
                .map_err(build)?,
        );
    }
    for gsi in properties
        .get("GlobalSecondaryIndexes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let projection = gsi.get("Projection").unwrap_or(&Value::Null);
        let mut p = Projection::builder().projection_type(ProjectionType::from(
            projection
                .get("ProjectionType")
                .and_then(Value::as_str)
                .unwrap_or("ALL"),
        ));
        for attr in projection
            .get("NonKeyAttributes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(a) = attr.as_str() {
                p = p.non_key_attributes(a);
            }
        }
        req = req.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(str_field(gsi, "IndexName")?)
                .set_key_schema(Some(key_schema(
                    gsi.get("KeySchema").unwrap_or(&Value::Null),
                )?))
                .projection(p.build())
                .build()
                .map_err(build)?,
        );
    }
    req.send()
        .await
        .map_err(|e| StoreError::from_sdk("CreateTable", e))?;

    if let Some(ttl) = properties.get("TimeToLiveSpecification") {
        if ttl.get("Enabled").and_then(Value::as_bool) == Some(true) {
            client
                .update_time_to_live()
                .table_name(name)
                .time_to_live_specification(
                    TimeToLiveSpecification::builder()
                        .attribute_name(str_field(ttl, "AttributeName")?)
                        .enabled(true)
                        .build()
                        .map_err(build)?,
                )
                .send()
                .await
                .map_err(|e| StoreError::from_sdk("UpdateTimeToLive", e))?;
        }
    }
    Ok(())
}

/// Create the given tables of the template (all of them when `only` is empty), each named
/// `prefix + logical id`. Returns logical id → table name.
pub async fn create_template_tables(
    client: &Client,
    template: &Path,
    prefix: &str,
    only: &[&str],
) -> Result<BTreeMap<String, String>, ProvisionError> {
    let mut created = BTreeMap::new();
    for (id, props) in template_tables(template)? {
        if !only.is_empty() && !only.contains(&id.as_str()) {
            continue;
        }
        let name = format!("{prefix}{id}");
        create_table(client, &name, &props).await?;
        created.insert(id, name);
    }
    Ok(created)
}
