//! CloudWatch metrics in the Embedded Metric Format (EMF): one JSON line per batch on stdout,
//! which Lambda's log pipeline turns into metrics without any API call.
//!
//! Namespace from `METRICS_NAMESPACE` (default `DynamoStreamWrites`; `off` disables), one
//! dimension `Function`, one count metric per summary field (`Records`, `WriteCalls`,
//! `ReportedFailures`) and per outcome label (`Applied`, `Stale`, `Invalid`, ...).

use serde_json::{json, Map, Value};

use dynamo_protocols::ddb::clock::epoch_millis;

use crate::summary::BatchSummary;

/// Default metrics namespace.
pub const DEFAULT_NAMESPACE: &str = "DynamoStreamWrites";

/// The EMF document of one batch.
pub fn batch_metrics(namespace: &str, function: &str, summary: &BatchSummary) -> Value {
    let mut values: Vec<(String, usize)> = vec![
        ("Records".into(), summary.records),
        ("WriteCalls".into(), summary.write_calls),
        ("ReportedFailures".into(), summary.reported_failures),
    ];
    for (label, count) in &summary.outcomes {
        values.push((camel(label), *count));
    }
    let mut doc = Map::new();
    doc.insert(
        "_aws".into(),
        json!({
            "Timestamp": epoch_millis(),
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [["Function"]],
                "Metrics": values.iter().map(|(name, _)| json!({"Name": name, "Unit": "Count"})).collect::<Vec<_>>(),
            }],
        }),
    );
    doc.insert("Function".into(), json!(function));
    for (name, count) in values {
        doc.insert(name, json!(count));
    }
    Value::Object(doc)
}

/// Print the batch's EMF line unless metrics are disabled.
pub fn emit_batch_metrics(function: &str, summary: &BatchSummary) {
    let namespace = std::env::var("METRICS_NAMESPACE").unwrap_or_else(|_| DEFAULT_NAMESPACE.into());
    if namespace.is_empty() || namespace == "off" {
        return;
    }
    println!("{}", batch_metrics(&namespace, function, summary));
}

fn camel(label: &str) -> String {
    label
        .split('_')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emf_document_declares_every_value_it_carries() {
        let mut summary = BatchSummary {
            records: 3,
            write_calls: 2,
            ..BatchSummary::default()
        };
        summary.outcomes.insert("applied", 2);
        summary.outcomes.insert("rolled_back", 1);
        let doc = batch_metrics("Ns", "ratchet-writer", &summary);
        let declared: Vec<&str> = doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .map(|m| m.iter().filter_map(|x| x["Name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(
            declared,
            [
                "Records",
                "WriteCalls",
                "ReportedFailures",
                "Applied",
                "RolledBack"
            ]
        );
        for name in declared {
            assert!(doc[name].is_number(), "{name} has a value");
        }
        assert_eq!(doc["Function"], "ratchet-writer");
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Function"]])
        );
    }
}
