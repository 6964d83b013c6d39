//! The ratchet's history mode against DynamoDB Local: every record lands in the history table
//! whatever the delivery (late, duplicated, deleted), a record is acknowledged only once its
//! history row and latest write are done, unprocessed rows are retried or reported, and the
//! history converges (property test).

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextMut,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use common::*;
use dev_testing::{client, client_with, Fault, FaultInjector};
use dynamodb_exactly_once::ratchet::{Ratchet, RatchetOp, RatchetOutcome};
use dynamodb_exactly_once::{Deadline, RecordResult};
use dynamodb_exactly_once_lambda::Batch;
use lambda_runtime::{Context, LambdaEvent};
use proptest::prelude::*;
use serde_json::{json, Value};

// ------------------------------------------------------------------------- history mode helpers

async fn history_tables(client: &Client) -> BTreeMap<String, String> {
    dev_testing::template_tables(
        client,
        &["RatchetTable", "RatchetHistoryTable", "DeadLetterTable"],
    )
    .await
}

/// Every history row, keyed by `ItemKey|RecordVersion`.
async fn history_rows(
    client: &Client,
    table: &str,
) -> BTreeMap<String, serde_json::Map<String, Value>> {
    crate::common::scan_keyed(client, table, ["ItemKey", "RecordVersion"]).await
}

// ------------------------------------------------------------------------- history mode

#[tokio::test]
async fn late_duplicate_and_deleted_records_all_land_in_history() {
    let client = client();
    let tables = history_tables(&client).await;
    let w = crate::common::ratchet_history_writer(client.clone(), &tables);
    let event = fixture("ratchet-history-sqs.json");

    let response = w
        .handle(LambdaEvent::new(event.clone(), Context::default()))
        .await
        .expect("handler");

    assert!(response.failed_ids().is_empty());
    let rows = history_rows(&client, &tables["RatchetHistoryTable"]).await;
    let key = r#"{"PK":"User#4","SK":"Movie#H"}"#;
    let mut seen: Vec<(i64, String, Value)> = rows
        .values()
        .map(|r| {
            assert_eq!(r["ItemKey"], json!(key));
            let rating = r
                .get("Item")
                .map(|i| i["Rating"].clone())
                .unwrap_or(Value::Null);
            (
                r["Timestamp"].as_i64().unwrap_or_default(),
                r["Op"].as_str().unwrap_or_default().into(),
                rating,
            )
        })
        .collect();
    seen.sort_by_key(|a| a.0);
    let ts = |s: i64| 1_721_770_000_000 + s;
    assert_eq!(seen.len(), 5, "six records, one duplicate: {seen:?}");
    assert_eq!(
        seen[0],
        (ts(90_000), "put".into(), json!(1)),
        "the late put"
    );
    assert_eq!(seen[1].0, ts(100_000));
    assert_eq!(
        seen[2].0,
        ts(100_000),
        "equal ts, other content: its own row"
    );
    assert_eq!(
        seen[3],
        (ts(105_000), "put".into(), json!(5)),
        "the put older than the delete"
    );
    assert_eq!(
        seen[4],
        (ts(110_000), "delete".into(), Value::Null),
        "the delete"
    );
    // Sort keys sort as versions do.
    let sort_keys: Vec<&String> = rows.keys().collect();
    let mut by_version = sort_keys.clone();
    by_version.sort();
    assert_eq!(sort_keys, by_version);
    // The latest table holds the tombstone; a redelivery changes nothing in either table.
    let latest = scan(&client, &tables["RatchetTable"]).await;
    assert_eq!(latest["User#4|Movie#H"]["Deleted"], json!(true));
    let report = w
        .handle_batch(&Batch::from_event(event).expect("event"), Deadline::none())
        .await;
    assert!(report.response.failed_ids().is_empty());
    assert_eq!(report.summary.count("applied"), 0);
    assert_eq!(
        history_rows(&client, &tables["RatchetHistoryTable"]).await,
        rows
    );
}

#[tokio::test]
async fn a_record_is_acknowledged_only_when_its_history_row_and_latest_write_are_done() {
    let setup = client();
    let tables = history_tables(&setup).await;
    let refuse = |operation: &'static str| {
        FaultInjector::new(move |_, op| {
            if op == operation {
                Fault::Refuse
            } else {
                Fault::None
            }
        })
    };
    let bodies = [
        put("u", "a", 2, json!({"v": 2})),
        put("u", "a", 1, json!({"v": 1})),
        delete("u", "b", 1),
    ];
    let batch = sqs_batch(&bodies, 0);

    // History refused: nothing acknowledged, and the latest table is not written either.
    let no_history = crate::common::ratchet_history_writer(
        client_with(Some(refuse("BatchWriteItem")), 1),
        &tables,
    );
    let report = no_history.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(report.response.failed_ids(), ["m0", "m1", "m2"]);
    assert!(
        scan(&setup, &tables["RatchetTable"]).await.is_empty(),
        "latest never ahead of history"
    );

    // Latest refused: history rows are written, records still reported.
    let no_latest =
        crate::common::ratchet_history_writer(client_with(Some(refuse("PutItem")), 1), &tables);
    let report = no_latest.handle_batch(&batch, Deadline::none()).await;
    assert_eq!(report.response.failed_ids(), ["m0", "m1", "m2"]);
    let rows = history_rows(&setup, &tables["RatchetHistoryTable"]).await;
    assert_eq!(rows.len(), 3);

    // The redelivery completes both; the history is unchanged.
    let healthy = crate::common::ratchet_history_writer(setup.clone(), &tables);
    let report = healthy.handle_batch(&batch, Deadline::none()).await;
    assert!(report.response.failed_ids().is_empty());
    assert_eq!(
        history_rows(&setup, &tables["RatchetHistoryTable"]).await,
        rows
    );
    assert_eq!(
        scan(&setup, &tables["RatchetTable"]).await["u|a"]["v"],
        json!(2)
    );
}

#[tokio::test]
async fn unprocessed_history_rows_are_retried() {
    let setup = client();
    let tables = history_tables(&setup).await;
    // DynamoDB leaves 5 rows of each of the first three BatchWriteItem calls unprocessed.
    let unprocessed = Unprocessed::new(3, 5);
    let w = crate::common::ratchet_history_writer(unprocessed.client(), &tables);
    let bodies: Vec<Value> = (0..60)
        .map(|i| put("u", &format!("k{i}"), i, json!({"i": i})))
        .collect();

    let report = w
        .handle_batch(&sqs_batch(&bodies, 0), Deadline::none())
        .await;

    assert!(report.response.failed_ids().is_empty());
    assert_eq!(unprocessed.dropped(), 15);
    assert!(
        unprocessed.calls() > 3,
        "chunks of 25, 25, 10 and their retries: {}",
        unprocessed.calls()
    );
    assert_eq!(
        history_rows(&setup, &tables["RatchetHistoryTable"])
            .await
            .len(),
        60
    );
    assert_eq!(scan(&setup, &tables["RatchetTable"]).await.len(), 60);
}

#[tokio::test]
async fn rows_left_unprocessed_after_every_retry_are_reported_for_redelivery() {
    let setup = client();
    let tables = history_tables(&setup).await;
    // Every call leaves its last row unprocessed: the backoff runs out for one row per chunk.
    let unprocessed = Unprocessed::new(usize::MAX, 1);
    let w = crate::common::ratchet_history_writer(unprocessed.client(), &tables);
    let bodies = [
        put("u", "a", 1, json!({})),
        put("u", "b", 1, json!({})),
        put("u", "a", 2, json!({})),
    ];
    let batch = sqs_batch(&bodies, 0);

    let report = w.handle_batch(&batch, Deadline::none()).await;

    let failed = report.response.failed_ids();
    assert_eq!(failed.len(), 1, "one row never written: {failed:?}");
    assert_eq!(
        report
            .results
            .iter()
            .filter(|r| matches!(r, RecordResult::Failed(_)))
            .count(),
        1
    );
    // Lambda delivers it again to a healthy writer: every row and the winners are written.
    let healthy = crate::common::ratchet_history_writer(setup.clone(), &tables);
    let retry = Batch::new(
        batch.kind,
        batch
            .records
            .iter()
            .filter(|r| failed.contains(&r.position.id))
            .cloned()
            .collect(),
    );
    assert!(healthy
        .handle_batch(&retry, Deadline::none())
        .await
        .response
        .failed_ids()
        .is_empty());
    assert_eq!(
        history_rows(&setup, &tables["RatchetHistoryTable"])
            .await
            .len(),
        3
    );
    let latest = scan(&setup, &tables["RatchetTable"]).await;
    assert_eq!(latest["u|a"]["Timestamp"], json!(2));
}

/// A key the latest table would refuse is found before any write: the record is an
/// `invalid_key` dead letter and its history holds no row of it.
#[tokio::test]
async fn a_key_the_latest_table_refuses_is_an_invalid_key_dead_letter_with_no_history_row() {
    let client = client();
    let tables = history_tables(&client).await;
    let w = crate::common::ratchet_history_writer(client.clone(), &tables);
    // Given a record whose PK is a number (the table's PK is a string) beside a valid one ...
    let bad = json!({"op":"put","key":{"PK":5,"SK":"x"},"ts":1,"item":{"v":1}});
    let batch = sqs_batch(&[bad, put("good", "x", 1, json!({"v": 1}))], 0);
    // ... when the batch is written in history mode ...
    let report = w.handle_batch(&batch, Deadline::none()).await;
    // ... then the bad one is kept as invalid_key, the good one applied, and only the good
    // one has a history row.
    let code = match &report.results[0] {
        RecordResult::Rejected(reason) => Some(reason.code),
        _ => None,
    };
    assert_eq!(
        code,
        Some(dynamodb_exactly_once::RejectionCode::InvalidKey),
        "{:?}",
        report.results[0].label()
    );
    assert_eq!(report.results[1].label(), "applied");
    let rows = history_rows(&client, &tables["RatchetHistoryTable"]).await;
    let keys: Vec<&str> = rows
        .values()
        .filter_map(|r| r["ItemKey"].as_str())
        .collect();
    assert_eq!(keys, [r#"{"PK":"good","SK":"x"}"#]);
}

#[tokio::test]
async fn ratchet_history_table_is_read_from_the_environment() {
    use dynamodb_exactly_once_lambda::settings::functions::RATCHET_WRITER;
    std::env::set_var("RATCHET_TABLE", "Latest");
    std::env::set_var("RATCHET_HISTORY_TABLE", "History");
    let ratchet = RATCHET_WRITER
        .from_env::<Ratchet>(client())
        .expect("settings");
    assert_eq!(ratchet.config().history_table(), Some("History"));
    std::env::set_var("RATCHET_HISTORY_TABLE", "Latest");
    assert!(
        RATCHET_WRITER.from_env::<Ratchet>(client()).is_err(),
        "history must be another table"
    );
    std::env::remove_var("RATCHET_HISTORY_TABLE");
    assert_eq!(
        RATCHET_WRITER
            .from_env::<Ratchet>(client())
            .expect("settings")
            .config()
            .history_table(),
        None
    );
}

// ------------------------------------------------------------------------- history convergence

#[derive(Debug, Clone)]
struct GenRecord {
    key: u8,
    ts: i64,
    delete: bool,
    value: u8,
}

fn body(case: usize, r: &GenRecord) -> Value {
    let (pk, sk) = (format!("hcase{case}"), format!("k{}", r.key));
    if r.delete {
        delete(&pk, &sk, r.ts)
    } else {
        put(&pk, &sk, r.ts, json!({"v": r.value}))
    }
}

fn records() -> impl Strategy<Value = Vec<GenRecord>> {
    prop::collection::vec(
        (0u8..3, -2i64..4, prop::bool::weighted(0.25), 0u8..3).prop_map(
            |(key, ts, delete, value)| GenRecord {
                key,
                ts,
                delete,
                value,
            },
        ),
        1..30,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The history is the set of distinct records: whatever duplication, order and batch split,
    /// every distinct record has exactly its row (equal timestamps with other content included),
    /// and the latest table still converges to the winner of each key.
    #[test]
    fn history_is_the_set_of_distinct_records_whatever_the_delivery(
        records in records(),
        dups in prop::collection::vec(0usize..1000, 0..15),
        splits in prop::collection::vec(1usize..10, 1..8),
        seed in any::<u64>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            use rand::seq::SliceRandom;
            use rand::SeedableRng;
            static CASE: AtomicUsize = AtomicUsize::new(0);
            let case = CASE.fetch_add(1, Ordering::SeqCst);
            let client = client();
            let tables = property_tables(&client).await;
            let w = crate::common::ratchet_history_writer(client.clone(), &tables);

            let mut delivered: Vec<usize> = (0..records.len()).collect();
            delivered.extend(dups.iter().map(|d| d % records.len()));
            delivered.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
            let bodies: Vec<Value> = delivered.iter().map(|&i| body(case, &records[i])).collect();
            let mut start = 0;
            let mut splits = splits.into_iter().cycle();
            while start < bodies.len() {
                let end = (start + splits.next().unwrap_or(1)).min(bodies.len());
                let report = w.handle_batch(&sqs_batch(&bodies[start..end], start), Deadline::none()).await;
                assert!(report.response.failed_ids().is_empty());
                start = end;
            }

            let (model, winners) = model(case, &records, w.protocol());
            let prefix = format!("{{\"PK\":\"hcase{case}\",");
            let history: BTreeMap<String, Value> = history_rows(&client, &tables["RatchetHistoryTable"]).await
                .into_iter()
                .filter(|(id, _)| id.starts_with(&prefix))
                .map(|(id, row)| (id, Value::Object(row)))
                .collect();
            assert_eq!(history, model);
            let latest: BTreeMap<String, (i128, String)> = scan(&client, &tables["RatchetTable"]).await
                .into_iter()
                .filter(|(k, _)| k.starts_with(&format!("hcase{case}|")))
                .map(|(k, item)| {
                    let ts = item["Timestamp"].as_i64().map(i128::from).unwrap_or_default();
                    (k, (ts, item["TieBreak"].as_str().unwrap_or_default().to_string()))
                })
                .collect();
            assert_eq!(latest, winners);
        });
    }
}

/// The model of a case: one history row per distinct record, built from the record alone, and
/// the winning version `(ts, tie-break)` of each key.
#[allow(clippy::type_complexity)]
fn model(
    case: usize,
    records: &[GenRecord],
    ratchet: &Ratchet,
) -> (BTreeMap<String, Value>, BTreeMap<String, (i128, String)>) {
    let mut rows = BTreeMap::new();
    let mut winners: BTreeMap<String, (i128, String)> = BTreeMap::new();
    for r in records {
        let parsed = ratchet
            .parse_record(body(case, r).to_string().as_bytes())
            .expect("valid");
        let item_key = parsed.key().canonical().to_string();
        let ts = parsed.ts().as_i128().expect("a number timestamp");
        let sort_key = match ts < 0 {
            true => format!("-{:020}#{}", ts + (1i128 << 63), parsed.token()),
            false => format!("{:020}#{}", ts, parsed.token()),
        };
        let mut row = json!({"ItemKey": item_key, "RecordVersion": sort_key,
            "Timestamp": i64::try_from(ts).expect("i64"), "TieBreak": parsed.token()});
        match parsed.op() {
            RatchetOp::Put(item) => {
                let item =
                    dynamodb_exactly_once::__private::item_to_json(item.clone()).expect("json");
                row["Op"] = json!("put");
                row["Item"] = Value::Object(item);
            }
            RatchetOp::Delete => row["Op"] = json!("delete"),
            other => panic!("an op the model does not know: {other:?}"),
        }
        rows.insert(format!("{item_key}|{sort_key}"), row);
        let id = format!("hcase{case}|k{}", r.key);
        if winners
            .get(&id)
            .is_none_or(|w| (ts, parsed.token()) > (w.0, w.1.as_str()))
        {
            winners.insert(id, (ts, parsed.token().to_string()));
        }
    }
    (rows, winners)
}

/// One set of history-mode tables shared by all property cases (cases use distinct keys).
async fn property_tables(client: &Client) -> BTreeMap<String, String> {
    static TABLES: Mutex<Option<BTreeMap<String, String>>> = Mutex::new(None);
    if let Some(t) = TABLES.lock().expect("lock").clone() {
        return t;
    }
    let t = history_tables(client).await;
    *TABLES.lock().expect("lock") = Some(t.clone());
    t
}

#[tokio::test]
async fn ratchet_without_history_writes_no_history() {
    let client = client();
    let tables = history_tables(&client).await;
    let w = ratchet_writer_on(client.clone(), &tables);
    assert_eq!(
        write_one(&w, put("u", "a", 1, json!({}))).await,
        RatchetOutcome::Applied
    );
    assert!(history_rows(&client, &tables["RatchetHistoryTable"])
        .await
        .is_empty());
}

// ------------------------------------------------------------------------- unprocessed rows

/// An SDK interceptor playing a throttled DynamoDB for `BatchWriteItem`: for the first `calls`
/// calls, the last `rows` put requests are taken out of the request before it is signed (so
/// they are not written) and returned in the response's `UnprocessedItems`.
#[derive(Debug, Clone)]
struct Unprocessed {
    remaining: Arc<AtomicUsize>,
    rows: usize,
    calls: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

/// What one `BatchWriteItem` call left unprocessed; `all`: the call was emptied (and sent as
/// a `ListTables`, since DynamoDB refuses an empty `BatchWriteItem`).
#[derive(Debug, Clone)]
struct Dropped {
    items: Value,
    all: bool,
}
impl Storable for Dropped {
    type Storer = StoreReplace<Self>;
}

impl Unprocessed {
    fn new(calls: usize, rows: usize) -> Self {
        Unprocessed {
            remaining: Arc::new(AtomicUsize::new(calls)),
            rows,
            calls: Arc::default(),
            dropped: Arc::default(),
        }
    }

    fn client(&self) -> Client {
        let config = client()
            .config()
            .to_builder()
            .interceptor(self.clone())
            .build();
        Client::from_conf(config)
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn dropped(&self) -> usize {
        self.dropped.load(Ordering::SeqCst)
    }

    /// Take the last `rows` requests of each table out of a `BatchWriteItem` body.
    fn split(&self, body: &mut Value) -> Dropped {
        let mut taken = serde_json::Map::new();
        if let Some(tables) = body["RequestItems"].as_object_mut() {
            for (table, requests) in tables.iter_mut() {
                let Some(requests) = requests.as_array_mut() else {
                    continue;
                };
                let rest = requests.split_off(requests.len().saturating_sub(self.rows));
                self.dropped.fetch_add(rest.len(), Ordering::SeqCst);
                taken.insert(table.clone(), Value::Array(rest));
            }
            tables.retain(|_, requests| requests.as_array().is_some_and(|r| !r.is_empty()));
        }
        let all = body["RequestItems"]
            .as_object()
            .is_none_or(|t| t.is_empty());
        Dropped {
            items: Value::Object(taken),
            all,
        }
    }
}

impl Intercept for Unprocessed {
    fn name(&self) -> &'static str {
        "Unprocessed"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let is_batch_write = request
            .headers()
            .get("x-amz-target")
            .is_some_and(|t| t.ends_with(".BatchWriteItem"));
        if !is_batch_write {
            return Ok(());
        }
        self.calls.fetch_add(1, Ordering::SeqCst);
        let take = self
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if take.is_err() {
            return Ok(());
        }
        let mut body: Value = serde_json::from_slice(request.body().bytes().unwrap_or_default())?;
        let dropped = self.split(&mut body);
        let bytes = match dropped.all {
            true => {
                let target = "DynamoDB_20120810.ListTables";
                request.headers_mut().insert("x-amz-target", target);
                b"{}".to_vec()
            }
            false => serde_json::to_vec(&body)?,
        };
        request
            .headers_mut()
            .insert("content-length", bytes.len().to_string());
        *request.body_mut() = SdkBody::from(bytes);
        cfg.interceptor_state().store_put(dropped);
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(dropped) = cfg.load::<Dropped>().cloned() else {
            return Ok(());
        };
        // The rows kept in the request were written; the answer lists the others.
        let response = context.response_mut();
        let bytes = serde_json::to_vec(&json!({ "UnprocessedItems": dropped.items }))?;
        response.headers_mut().remove("x-amz-crc32");
        response
            .headers_mut()
            .insert("content-length", bytes.len().to_string());
        *response.body_mut() = SdkBody::from(bytes);
        Ok(())
    }
}
