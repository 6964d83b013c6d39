//! CloudWatch metrics in the Embedded Metric Format (EMF): one JSON line per batch (and per
//! sweep) on stdout, which Lambda's log pipeline turns into metrics without any API call.
//!
//! * Namespace from `METRICS_NAMESPACE` (default `DynamoDbExactlyOnce`; `off` disables).
//! * Dimensions `Function` (the deployed function's name, `AWS_LAMBDA_FUNCTION_NAME`, so two
//!   stacks in one account never share a series) and `Protocol` (`ratchet-writer`,
//!   `counter-writer`, `document-writer`, `tx-coordinator`, `tx-sweeper`).
//! * One count per summary field (`Records`, `WriteCalls`, `ReportedFailures`) and per outcome
//!   label (`Applied`, `Stale`, `Invalid`, `HeldBack`, `Deferred`, ...; `Invalid` counts every
//!   record kept as a dead letter, `too_old` ones included: the reason is in the dead letter,
//!   not in the metric); the sweeper's `Stale`, `RolledBack`,
//!   `Finished`, `AlreadyCompleted`, `Errors`, `StoppedEarly`, `WriteCalls` and
//!   `OldestStaleSeconds` (its lag: the oldest stale transaction's time without a heartbeat);
//!   the counter journal's roll-up (`counter-rollup`, one line per batch of the journal's
//!   stream, whatever its outcome): `Records`, `Keys`, `Applied`, `Duplicates`, `ItemUpdates`,
//!   `WriteCalls`, `WriteUnits`, `FailedItems`, `DeadLetters` (journal records not counted,
//!   kept with their reason), `RetriedBatches` (1 when the batch answered a failure: the
//!   mapping delivers it again from there), `CutOff` (1 when the invocation's deadline cut it
//!   off), `Errors` (1 when the invocation failed as a whole: an event it cannot read, no
//!   `shardId`, a journal table of another layout), `BatchAgeMilliseconds` (the age of the
//!   batch's oldest record: how far the counters lag; Lambda's own `IteratorAge` is the
//!   newest's) and `WindowStateBytes` (the size of the tumbling window's state answered, which
//!   Lambda caps at 1 MB per shard: larger ends the window early).
//! * The idempotency layer's `IdempotencyResultNotStored` (`Protocol` = `idempotency`): a run
//!   whose result could not be stored, the one case in which it gives up "once".
//! * **They survive any application log level**: with Lambda's advanced logging controls a
//!   JSON line without a `level` counts as INFO and is dropped under `ApplicationLogLevel: WARN`;
//!   EMF lines carry the configured level itself (`AWS_LAMBDA_LOG_LEVEL`), so they always pass.

use serde_json::{json, Map, Value};

use dynamodb_exactly_once::__private::epoch_millis;
#[cfg(feature = "journal")]
use dynamodb_exactly_once::counter::journal::RollupBatchReport;
use dynamodb_exactly_once::txn::sweep::SweepSummary;

use crate::summary::BatchSummary;

/// Default metrics namespace.
pub(crate) const DEFAULT_NAMESPACE: &str = "DynamoDbExactlyOnce";

/// An EMF document: `values` as counts under the dimensions `Function` and `Protocol`.
pub(crate) fn emf_document(
    namespace: &str,
    function: &str,
    protocol: &str,
    values: &[(String, f64)],
    level: Option<&str>,
) -> Value {
    let mut doc = Map::new();
    doc.insert(
        "_aws".into(),
        json!({
            "Timestamp": epoch_millis(),
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [["Function", "Protocol"]],
                "Metrics": values.iter().map(|(name, _)| json!({"Name": name, "Unit": "Count"})).collect::<Vec<_>>(),
            }],
        }),
    );
    if let Some(level) = level {
        doc.insert("level".into(), json!(level));
    }
    doc.insert("Function".into(), json!(function));
    doc.insert("Protocol".into(), json!(protocol));
    for (name, value) in values {
        doc.insert(name.clone(), json!(value));
    }
    Value::Object(doc)
}

/// The counts of one batch.
pub(crate) fn batch_values(summary: &BatchSummary) -> Vec<(String, f64)> {
    #[allow(clippy::cast_precision_loss)]
    let count = |n: usize| n as f64;
    let mut values = vec![
        ("Records".to_string(), count(summary.records)),
        ("WriteCalls".to_string(), count(summary.write_calls)),
        (
            "ReportedFailures".to_string(),
            count(summary.reported_failures),
        ),
    ];
    for (label, n) in &summary.outcomes {
        values.push((camel(label), count(*n)));
    }
    values
}

/// The counts of one sweep.
pub(crate) fn sweep_values(summary: &SweepSummary) -> Vec<(String, f64)> {
    #[allow(clippy::cast_precision_loss)]
    let count = |n: usize| n as f64;
    #[allow(clippy::cast_precision_loss)]
    let (calls, oldest_ms) = (summary.write_calls as f64, summary.oldest_stale_ms as f64);
    vec![
        ("Stale".into(), count(summary.stale)),
        ("RolledBack".into(), count(summary.rolled_back)),
        ("Finished".into(), count(summary.finished)),
        ("AlreadyCompleted".into(), count(summary.already_completed)),
        // Records retired on a key the table refuses, kept as the coordinator's dead letters.
        ("Invalid".into(), count(summary.dead_letters)),
        ("Errors".into(), count(summary.errors)),
        (
            "StoppedEarly".into(),
            f64::from(u8::from(summary.stopped_early)),
        ),
        ("WriteCalls".into(), calls),
        // The sweeper's lag: how long the oldest stale transaction went without a sign of life.
        ("OldestStaleSeconds".into(), oldest_ms / 1000.0),
    ]
}

/// How one invocation of the journal roll-up ended, beyond its batch's report.
#[cfg(feature = "journal")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RollupEnd {
    /// Cut off at the invocation's deadline.
    pub(crate) cut: bool,
    /// Failed as a whole: the invocation answered an error (Lambda invokes it again).
    pub(crate) error: bool,
    /// The age of its oldest record, when known.
    pub(crate) age_ms: Option<u64>,
    /// The size of the window state answered (JSON bytes).
    pub(crate) state_bytes: usize,
}

/// The counts of one journal roll-up invocation, whatever its outcome.
#[cfg(feature = "journal")]
pub(crate) fn rollup_values(report: &RollupBatchReport, end: RollupEnd) -> Vec<(String, f64)> {
    #[allow(clippy::cast_precision_loss)]
    let count = |n: usize| n as f64;
    #[allow(clippy::cast_precision_loss)]
    let calls = report.write_calls as f64;
    #[allow(clippy::cast_precision_loss)]
    let age = end.age_ms.unwrap_or(0) as f64;
    vec![
        ("Records".into(), count(report.records)),
        ("Keys".into(), count(report.keys)),
        ("Applied".into(), count(report.applied)),
        ("Duplicates".into(), count(report.duplicates)),
        ("ItemUpdates".into(), count(report.item_updates)),
        ("WriteCalls".into(), calls),
        ("WriteUnits".into(), report.write_units),
        ("FailedItems".into(), count(report.failed_items)),
        ("DeadLetters".into(), count(report.dead_letters)),
        (
            "RetriedBatches".into(),
            f64::from(u8::from(report.retry_from.is_some())),
        ),
        ("CutOff".into(), f64::from(u8::from(end.cut))),
        ("Errors".into(), f64::from(u8::from(end.error))),
        ("BatchAgeMilliseconds".into(), age),
        ("HeldKeys".into(), count(report.held)),
        ("WindowStateBytes".into(), count(end.state_bytes)),
    ]
}

/// Print one EMF line for `protocol` unless metrics are disabled.
pub(crate) fn emit(protocol: &str, values: &[(String, f64)]) {
    let namespace = std::env::var("METRICS_NAMESPACE").unwrap_or_else(|_| DEFAULT_NAMESPACE.into());
    if namespace.is_empty() || namespace == "off" {
        return;
    }
    let function = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| protocol.into());
    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .ok()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.to_uppercase());
    let doc = emf_document(&namespace, &function, protocol, values, level.as_deref());
    println!("{doc}");
}

/// Print the batch's EMF line unless metrics are disabled.
pub(crate) fn emit_batch_metrics(protocol: &str, summary: &BatchSummary) {
    emit(protocol, &batch_values(summary));
}

/// Print the sweep's EMF line unless metrics are disabled.
pub(crate) fn emit_sweep_metrics(summary: &SweepSummary) {
    emit("tx-sweeper", &sweep_values(summary));
}

/// Print the roll-up invocation's EMF line unless metrics are disabled.
#[cfg(feature = "journal")]
pub(crate) fn emit_rollup_metrics(report: &RollupBatchReport, end: RollupEnd) {
    emit("counter-rollup", &rollup_values(report, end));
}

/// Print the EMF line of a roll-up invocation that failed as a whole.
#[cfg(feature = "journal")]
pub(crate) fn emit_rollup_error_metrics() {
    let end = RollupEnd {
        error: true,
        ..RollupEnd::default()
    };
    emit_rollup_metrics(&RollupBatchReport::default(), end);
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
        let doc = emf_document(
            "Ns",
            "prod-ratchet-writer-A1B2",
            "ratchet-writer",
            &batch_values(&summary),
            Some("WARN"),
        );
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
        assert_eq!(doc["Function"], "prod-ratchet-writer-A1B2");
        assert_eq!(doc["Protocol"], "ratchet-writer");
        assert_eq!(doc["level"], "WARN", "passes Lambda's log-level filter");
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Function", "Protocol"]])
        );
    }

    #[test]
    fn sweep_metrics_count_what_the_sweep_did() {
        let mut summary = SweepSummary::default();
        summary.stale = 2;
        summary.rolled_back = 1;
        summary.finished = 1;
        summary.oldest_stale_ms = 1500;
        let doc = emf_document("Ns", "f", "tx-sweeper", &sweep_values(&summary), None);
        assert_eq!(doc["Stale"], 2.0);
        assert_eq!(doc["OldestStaleSeconds"], 1.5);
        assert_eq!(doc["RolledBack"], 1.0);
        assert!(doc.get("level").is_none());
    }

    #[cfg(feature = "journal")]
    #[test]
    fn rollup_metrics_count_what_the_batch_did_whatever_its_outcome() {
        let mut report = RollupBatchReport::default();
        report.keys = 3;
        report.applied = 2;
        report.duplicates = 1;
        report.write_units = 2.5;
        report.retry_from = Some("12".into());
        let end = RollupEnd {
            age_ms: Some(1500),
            ..RollupEnd::default()
        };
        let values = rollup_values(&report, end);
        let doc = emf_document("Ns", "f", "counter-rollup", &values, None);
        assert_eq!(doc["Keys"], 3.0);
        assert_eq!(doc["Applied"], 2.0);
        assert_eq!(doc["Duplicates"], 1.0);
        assert_eq!(doc["WriteUnits"], 2.5);
        assert_eq!(doc["RetriedBatches"], 1.0);
        assert_eq!(doc["CutOff"], 0.0);
        assert_eq!(doc["BatchAgeMilliseconds"], 1500.0);
        assert_eq!(doc["Errors"], 0.0);
        let end = RollupEnd {
            cut: true,
            ..RollupEnd::default()
        };
        let cut = rollup_values(&RollupBatchReport::default(), end);
        let doc = emf_document("Ns", "f", "counter-rollup", &cut, None);
        assert_eq!(doc["CutOff"], 1.0);
        assert_eq!(doc["FailedItems"], 0.0);
        let end = RollupEnd {
            error: true,
            state_bytes: 2048,
            ..RollupEnd::default()
        };
        let doc = emf_document(
            "Ns",
            "f",
            "counter-rollup",
            &rollup_values(&report, end),
            None,
        );
        assert_eq!(
            (doc["Errors"].as_f64(), doc["CutOff"].as_f64()),
            (Some(1.0), Some(0.0))
        );
        assert_eq!(doc["WindowStateBytes"], 2048.0);
    }
}
