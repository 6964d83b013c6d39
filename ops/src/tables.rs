//! `create-tables`, `scan`, `show`.

use std::path::Path;

use dynamodb_exactly_once::__private::{canonical_json, item_to_json};
use dynamodb_exactly_once::StoreError;
use dynamodb_exactly_once_lambda::client::client_from_env;
use serde_json::Value;

pub async fn create(template: &Path, prefix: &str, only: &[String]) -> Result<(), String> {
    let only: Vec<&str> = only.iter().map(String::as_str).collect();
    let client = client_from_env().await.map_err(|e| e.to_string())?;
    let created = dynamo_provision::create_template_tables(&client, template, prefix, &only)
        .await
        .map_err(|e| e.to_string())?;
    for (logical, name) in created {
        println!("created {name} (template resource {logical})");
    }
    Ok(())
}

pub async fn scan(table: &str, readable: bool) -> Result<(), String> {
    let client = client_from_env().await.map_err(|e| e.to_string())?;
    let raw = client
        .scan()
        .table_name(table)
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| StoreError::from_sdk("Scan", e).to_string())?;
    let mut items = raw
        .into_iter()
        .map(item_to_json)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    items.sort_by_key(|i| canonical_json(&Value::Object(i.clone())));
    if !readable {
        for item in items {
            println!("{}", Value::Object(item));
        }
        return Ok(());
    }
    println!("{table}: {} item(s)", items.len());
    for item in items {
        let mut fields: Vec<String> = item
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let v = if v.len() > 40 {
                    format!(
                        "{}…",
                        &v[..v.char_indices().nth(39).map_or(v.len(), |(i, _)| i)]
                    )
                } else {
                    v
                };
                format!("{k}={v}")
            })
            .collect();
        fields.sort();
        println!("  {}", fields.join("  "));
    }
    Ok(())
}
