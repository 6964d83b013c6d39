//! Create DynamoDB tables exactly as `template.yaml` declares them, so the demo and the tests
//! run against the same key schemas, indexes and TTL settings that SAM deploys (the template is
//! read, never repeated).
//!
//! The tables of the writer stacks a template composes (`AWS::Serverless::Application` with a
//! local `Location`, e.g. `stacks/ratchet.yaml`) count as its own, whatever their `Condition`:
//! a table a stack creates only when no existing one is given is still one the tests need.
//!
//! Supported table properties: `KeySchema`, `AttributeDefinitions`, `GlobalSecondaryIndexes`
//! (with `Projection`), `BillingMode`, `StreamSpecification` and `TimeToLiveSpecification`.
//! Intrinsic functions are
//! not evaluated: a table's properties must not depend on them (the table names come from the
//! logical id, with an optional prefix).

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::path::Path;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType, TableStatus,
    TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;
use serde::Deserialize;
use serde_json::Value;

use dynamodb_exactly_once::StoreError;

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

/// The `AWS::DynamoDB::Table` resources of a template and of the stacks it nests from local
/// files: logical id → properties. One logical id declared twice (the dead-letter table a
/// writer stack creates when none is given, and the demo's) must have the same properties.
pub fn template_tables(path: &Path) -> Result<BTreeMap<String, TableSpec>, ProvisionError> {
    let mut tables = BTreeMap::new();
    collect_tables(path, 0, &mut tables)?;
    Ok(tables)
}

/// Nesting deeper than this is a cycle of `Location`s.
const MAX_NESTING: usize = 8;

fn collect_tables(
    path: &Path,
    depth: usize,
    tables: &mut BTreeMap<String, TableSpec>,
) -> Result<(), ProvisionError> {
    let err = |message: String| ProvisionError::Template {
        path: path.display().to_string(),
        message,
    };
    if depth > MAX_NESTING {
        return Err(err(format!("nested more than {MAX_NESTING} levels deep")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let yaml: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).map_err(|e| err(e.to_string()))?;
    let json = yaml_to_json(yaml);
    let resources = json
        .get("Resources")
        .and_then(Value::as_object)
        .ok_or_else(|| err("no Resources".into()))?;
    for (id, r) in resources {
        match r.get("Type").and_then(Value::as_str) {
            Some("AWS::DynamoDB::Table") => {
                let properties = r.get("Properties").cloned().unwrap_or(Value::Null);
                let spec: TableSpec = serde_json::from_value(properties)
                    .map_err(|e| err(format!("table {id}: {e}")))?;
                match tables.get(id) {
                    Some(seen) if *seen != spec => {
                        return Err(err(format!(
                            "table {id} is declared again with other properties \
                             ({spec:?}, before: {seen:?})"
                        )))
                    }
                    Some(_) => {}
                    None => {
                        tables.insert(id.clone(), spec);
                    }
                }
            }
            Some("AWS::Serverless::Application") => {
                if let Some(location) = local_location(r) {
                    let nested = path.parent().unwrap_or(Path::new(".")).join(location);
                    collect_tables(&nested, depth + 1, tables)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A nested application's `Location` when it is a file path relative to its template (not
/// an S3 URL or a Serverless Application Repository application).
fn local_location(resource: &Value) -> Option<&str> {
    let location = resource.get("Properties")?.get("Location")?.as_str()?;
    let remote = ["s3://", "https://", "http://"];
    (!remote.iter().any(|p| location.starts_with(p))).then_some(location)
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

/// The properties of an `AWS::DynamoDB::Table` this crate reproduces.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TableSpec {
    /// `KeySchema`.
    pub key_schema: Vec<KeyElement>,
    /// `AttributeDefinitions`.
    #[serde(default)]
    pub attribute_definitions: Vec<AttributeSpec>,
    /// `BillingMode` (default `PAY_PER_REQUEST`).
    pub billing_mode: Option<String>,
    /// `GlobalSecondaryIndexes`.
    #[serde(default)]
    pub global_secondary_indexes: Vec<IndexSpec>,
    /// `TimeToLiveSpecification`.
    pub time_to_live_specification: Option<TtlSpec>,
    /// `StreamSpecification`.
    pub stream_specification: Option<StreamSpec>,
}

/// One `KeySchema` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeyElement {
    /// `AttributeName`.
    pub attribute_name: String,
    /// `HASH` or `RANGE`.
    pub key_type: String,
}

/// One `AttributeDefinitions` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributeSpec {
    /// `AttributeName`.
    pub attribute_name: String,
    /// `S`, `N` or `B`.
    pub attribute_type: String,
}

/// One `GlobalSecondaryIndexes` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct IndexSpec {
    /// `IndexName`.
    pub index_name: String,
    /// `KeySchema`.
    pub key_schema: Vec<KeyElement>,
    /// `Projection` (default `ALL`).
    pub projection: Option<ProjectionSpec>,
}

/// An index's `Projection`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ProjectionSpec {
    /// `ALL`, `KEYS_ONLY` or `INCLUDE`.
    pub projection_type: Option<String>,
    /// `NonKeyAttributes` of an `INCLUDE` projection.
    #[serde(default)]
    pub non_key_attributes: Vec<String>,
}

/// `TimeToLiveSpecification`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TtlSpec {
    /// `AttributeName`.
    pub attribute_name: String,
    /// `Enabled`.
    pub enabled: bool,
}

/// `StreamSpecification`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct StreamSpec {
    /// `StreamViewType`: `NEW_IMAGE`, `OLD_IMAGE`, `NEW_AND_OLD_IMAGES` or `KEYS_ONLY`.
    pub stream_view_type: String,
}

fn built<T>(result: Result<T, aws_sdk_dynamodb::error::BuildError>) -> Result<T, StoreError> {
    result.map_err(|e| StoreError::Inconsistent(e.to_string()))
}

fn key_schema(elements: &[KeyElement]) -> Result<Vec<KeySchemaElement>, StoreError> {
    elements
        .iter()
        .map(|k| {
            built(
                KeySchemaElement::builder()
                    .attribute_name(&k.attribute_name)
                    .key_type(KeyType::from(k.key_type.as_str()))
                    .build(),
            )
        })
        .collect()
}

fn index(gsi: &IndexSpec) -> Result<GlobalSecondaryIndex, StoreError> {
    let projection = gsi.projection.as_ref();
    let kind = projection
        .and_then(|p| p.projection_type.as_deref())
        .unwrap_or("ALL");
    let projection = Projection::builder()
        .projection_type(ProjectionType::from(kind))
        .set_non_key_attributes(
            projection
                .filter(|p| !p.non_key_attributes.is_empty())
                .map(|p| p.non_key_attributes.clone()),
        )
        .build();
    built(
        GlobalSecondaryIndex::builder()
            .index_name(&gsi.index_name)
            .set_key_schema(Some(key_schema(&gsi.key_schema)?))
            .projection(projection)
            .build(),
    )
}

/// Create the template's table as `name` (indexes, stream and TTL included), and wait until
/// it is ACTIVE.
pub async fn create_table(client: &Client, name: &str, spec: &TableSpec) -> Result<(), StoreError> {
    let billing = spec.billing_mode.as_deref().unwrap_or("PAY_PER_REQUEST");
    let mut req = client
        .create_table()
        .table_name(name)
        .set_key_schema(Some(key_schema(&spec.key_schema)?))
        .billing_mode(BillingMode::from(billing));
    for def in &spec.attribute_definitions {
        req = req.attribute_definitions(built(
            AttributeDefinition::builder()
                .attribute_name(&def.attribute_name)
                .attribute_type(ScalarAttributeType::from(def.attribute_type.as_str()))
                .build(),
        )?);
    }
    for gsi in &spec.global_secondary_indexes {
        req = req.global_secondary_indexes(index(gsi)?);
    }
    if let Some(stream) = &spec.stream_specification {
        req = req.stream_specification(built(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::from(stream.stream_view_type.as_str()))
                .build(),
        )?);
    }
    let created = req
        .send()
        .await
        .map_err(|e| StoreError::from_sdk("CreateTable", e))?;
    // DynamoDB Local answers ACTIVE; DynamoDB answers CREATING, and refuses TTL and writes
    // until the table is ACTIVE.
    let status = created.table_description().and_then(|d| d.table_status());
    if status != Some(&TableStatus::Active) {
        wait_active(client, name).await?;
    }
    match &spec.time_to_live_specification {
        Some(ttl) if ttl.enabled => enable_ttl(client, name, &ttl.attribute_name).await,
        _ => Ok(()),
    }
}

/// Poll `DescribeTable` once a second until `name` is ACTIVE (at most 10 minutes).
async fn wait_active(client: &Client, name: &str) -> Result<(), StoreError> {
    for _ in 0..600 {
        let described = client
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("DescribeTable", e))?;
        if described.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    Err(StoreError::Sdk {
        operation: "DescribeTable",
        class: dynamodb_exactly_once::ErrorClass::Transient,
        code: "TableNotActive".into(),
        message: format!("table {name} is not ACTIVE after 10 minutes"),
        source: None,
    })
}

async fn enable_ttl(client: &Client, table: &str, attribute: &str) -> Result<(), StoreError> {
    let spec = built(
        TimeToLiveSpecification::builder()
            .attribute_name(attribute)
            .enabled(true)
            .build(),
    )?;
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(spec)
        .send()
        .await
        .map_err(|e| StoreError::from_sdk("UpdateTimeToLive", e))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace_template() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../template.yaml")
    }

    /// The tables the demo, `ops create-tables` and the integration tests create.
    #[test]
    fn template_yaml_declares_the_tables_the_tests_use() {
        let tables = template_tables(&workspace_template()).expect("template.yaml");
        let ids: Vec<&str> = tables.keys().map(String::as_str).collect();
        assert_eq!(
            ids,
            [
                "AccountsTable",
                "CounterJournalTable",
                "CounterTable",
                "DeadLetterTable",
                "DocumentTable",
                "LockTable",
                "OrdersReplicaTable",
                "OrdersTable",
                "OrdersTotalsTable",
                "RatchetHistoryTable",
                "RatchetLedgerTable",
                "RatchetTable",
                "TxTable",
                "VersionedHistoryTable",
                "VersionedTable",
            ]
        );
    }

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir.join("stacks")).expect("temp dir");
        std::fs::write(dir.join(name), text).expect("temp file");
    }

    const CHILD: &str = "Resources:
  Main:
    Type: AWS::DynamoDB::Table
    Condition: CreateTable
    Properties:
      KeySchema: [{AttributeName: PK, KeyType: HASH}]
  DeadLetterTable:
    Type: AWS::DynamoDB::Table
    Properties:
      KeySchema: [{AttributeName: Id, KeyType: HASH}]
";

    /// The journal table is created with its stream and TTL, as the roll-up reads it.
    #[test]
    fn the_counter_journal_has_a_stream_and_a_ttl() {
        let tables = template_tables(&workspace_template()).expect("template.yaml");
        let journal = &tables["CounterJournalTable"];
        assert_eq!(
            journal.stream_specification,
            Some(StreamSpec {
                stream_view_type: "NEW_IMAGE".into()
            })
        );
        assert_eq!(
            journal.time_to_live_specification,
            Some(TtlSpec {
                attribute_name: "ttl".into(),
                enabled: true
            })
        );
        assert_eq!(
            tables["OrdersTable"]
                .stream_specification
                .as_ref()
                .map(|s| s.stream_view_type.as_str()),
            Some("NEW_AND_OLD_IMAGES")
        );
    }

    /// A nested stack's tables count (conditional or not); a logical id declared twice must
    /// agree.
    #[test]
    fn nested_stacks_tables_count_and_must_agree() {
        let dir = std::env::temp_dir().join(format!("provision-nested-{}", std::process::id()));
        write(&dir, "stacks/child.yaml", CHILD);
        let parent = |key: &str| {
            format!(
                "Resources:
  DeadLetterTable:
    Type: AWS::DynamoDB::Table
    Properties:
      KeySchema: [{{AttributeName: {key}, KeyType: HASH}}]
  Child:
    Type: AWS::Serverless::Application
    Properties:
      Location: stacks/child.yaml
  Remote:
    Type: AWS::Serverless::Application
    Properties:
      Location: https://example.com/never-read.yaml
"
            )
        };
        write(&dir, "parent.yaml", &parent("Id"));
        let tables = template_tables(&dir.join("parent.yaml")).expect("tables");
        assert_eq!(
            tables.keys().collect::<Vec<_>>(),
            ["DeadLetterTable", "Main"]
        );
        write(&dir, "parent.yaml", &parent("Other"));
        let err = template_tables(&dir.join("parent.yaml")).expect_err("two DeadLetterTables");
        assert!(
            err.to_string()
                .contains("DeadLetterTable is declared again"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
