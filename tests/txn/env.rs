//! What the transaction test binaries share: the tables of a test, message builders, seeds,
//! raw reads of the table and the clean-table assertion.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::txn::sweep::{SweepConfig, SweepSummary, Sweeper};
use dynamodb_exactly_once::txn::TxMessage;
use dynamodb_exactly_once::txn::{Coordinator, TxConfig, TxConfigBuilder};
use dynamodb_exactly_once::Deadline;
use serde_json::{json, Map, Value};

use crate::common::scan;
use dev_testing::client;
use dynamodb_exactly_once_lambda::dead_letter::DeadLetters;
use dynamodb_exactly_once_lambda::Writer;

/// Tables of one test: logical id → name.
#[derive(Clone)]
pub struct Env {
    pub tables: BTreeMap<String, String>,
    /// `Some(d)`: coordinators heartbeat every `d` (tests that count writes exactly set
    /// an hour: no heartbeat).
    pub heartbeat_every: Option<Duration>,
    /// Whether coordinators take the fast path (one `TransactWriteItems` per transaction).
    /// Off by default here: most tests of this suite pin the lock path's schedules (large
    /// transactions and the fast path's fallback take it); `TX_TEST_FAST_PATH=1` turns it on
    /// for every test that does not choose (a run of the whole suite through the fast path).
    pub fast_path: bool,
}

impl Env {
    pub async fn new(client: &Client) -> Env {
        let tables =
            dev_testing::template_tables(client, &["TxTable", "AccountsTable", "DeadLetterTable"])
                .await;
        Env {
            tables,
            heartbeat_every: None,
            fast_path: std::env::var("TX_TEST_FAST_PATH").is_ok_and(|v| v == "1"),
        }
    }

    /// Coordinators that never heartbeat (for tests that count write requests exactly;
    /// heartbeats are the subject of `tests/txn/long.rs`).
    pub fn without_heartbeats(mut self) -> Env {
        self.heartbeat_every = Some(Duration::ZERO);
        self
    }

    /// Coordinators that take the fast path.
    pub fn fast(mut self) -> Env {
        self.fast_path = true;
        self
    }

    /// The same tables, coordinators taking the fast path or not.
    pub fn clone_with_fast_path(&self, on: bool) -> Env {
        let mut env = self.clone();
        env.fast_path = on;
        env
    }

    /// Coordinators that always take the lock path.
    pub fn lock_path(mut self) -> Env {
        self.fast_path = false;
        self
    }

    pub fn accounts(&self) -> &str {
        &self.tables["AccountsTable"]
    }

    pub fn tx(&self) -> &str {
        &self.tables["TxTable"]
    }

    /// The settings of this suite's coordinators, to change before they are built.
    pub fn builder(&self) -> TxConfigBuilder {
        // Heartbeats off unless a test sets them (tests count their calls; heartbeats are the
        // subject of tests/txn/long.rs): a short patience alone decides contention.
        let heartbeat_every = self.heartbeat_every.unwrap_or(Duration::ZERO);
        TxConfig::builder(self.tx(), [self.accounts()])
            .max_attempts(50)
            .heartbeat_every(heartbeat_every)
            .lock_patience(Duration::from_millis(300).max(heartbeat_every * 2))
            .fast_path(self.fast_path)
            // Item by item unless a test asks for chunks: the schedules of this suite name the
            // lock path's calls one item at a time (`TX_TEST_LOCK_CHUNK` runs them chunked).
            .lock_chunk(
                std::env::var("TX_TEST_LOCK_CHUNK")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1),
            )
            // Reads one item at a time after the record, and finalize after a read, unless a
            // test asks otherwise: the schedules name those calls (`TX_TEST_READ_AHEAD=1` runs
            // them with the reads ahead).
            .read_ahead(std::env::var("TX_TEST_READ_AHEAD").is_ok_and(|v| v == "1"))
    }

    pub fn config(&self) -> TxConfig {
        self.builder().build().expect("valid configuration")
    }

    pub fn coordinator(&self, client: Client) -> Coordinator {
        Coordinator::new(client, self.config())
    }

    /// A coordinator that makes one call at a time (reads in lock order, one item write at a
    /// time): its call indices are fixed, which interleaving tests rely on.
    pub fn sequential(&self, client: Client) -> Coordinator {
        let c = self.builder().concurrency(1).build();
        Coordinator::new(client, c.expect("valid configuration"))
    }

    pub fn sweeper(&self, client: Client, stale_after_secs: u64, retain_secs: u64) -> Sweeper {
        let c = SweepConfig::builder(self.tx())
            .stale_after(Duration::from_secs(stale_after_secs))
            .retain(Duration::from_secs(retain_secs))
            // Tests sweep at once and keep records briefly: no redelivery to wait for.
            .redelivery_gap(Duration::ZERO)
            .redelivery_horizon(Duration::ZERO)
            .build();
        Sweeper::new(client, c.expect("valid configuration"))
    }
}

pub fn update(table: &str, pk: &str, delta: i64) -> Value {
    json!({"Update":{"TableName":table,"Key":{"PK":pk},
        "UpdateExpression":"SET #b = #b + :d","ExpressionAttributeNames":{"#b":"balance"},
        "ExpressionAttributeValues":{":d":delta}}})
}

pub fn debit(table: &str, pk: &str, amount: i64) -> Value {
    json!({"Update":{"TableName":table,"Key":{"PK":pk},
        "UpdateExpression":"SET #b = #b - :a","ConditionExpression":"#b >= :a",
        "ExpressionAttributeNames":{"#b":"balance"},"ExpressionAttributeValues":{":a":amount}}})
}

pub fn transfer(table: &str, tx_id: &str, from: &str, to: &str, amount: i64) -> Value {
    json!({"txId":tx_id,"requests":[debit(table, from, amount), update(table, to, amount)]})
}

pub fn message(c: &Coordinator, body: &Value) -> TxMessage {
    c.parse_message(body.to_string().as_bytes())
        .expect("valid message")
}

pub async fn seed(client: &Client, table: &str, pk: &str, balance: i64) {
    client
        .put_item()
        .table_name(table)
        .item("PK", AttributeValue::S(pk.into()))
        .item("balance", AttributeValue::N(balance.to_string()))
        .send()
        .await
        .expect("seed");
}

/// Every item of a table by `PK`.
pub async fn items(client: &Client, table: &str) -> BTreeMap<String, Map<String, Value>> {
    scan(client, table)
        .await
        .into_iter()
        .map(|(k, v)| (k.trim_end_matches('|').to_string(), v))
        .collect()
}

pub fn balance(items: &BTreeMap<String, Map<String, Value>>, pk: &str) -> Option<i64> {
    items
        .get(pk)
        .and_then(|i| i.get("balance"))
        .and_then(Value::as_i64)
}

/// No lock, image or transient marker anywhere; every TX header completed.
pub async fn assert_clean(client: &Client, env: &Env) {
    for (pk, item) in items(client, env.accounts()).await {
        for name in ["_txLock", "_txImage", "_txDelete", "_txTransient"] {
            assert!(!item.contains_key(name), "{pk} still has {name}: {item:?}");
        }
    }
    for (_, item) in scan(client, env.tx()).await {
        if item.get("Part").and_then(Value::as_str) == Some("#") {
            assert_eq!(
                item.get("State").and_then(Value::as_str),
                Some("completed"),
                "TX record not final: {item:?}"
            );
            // Out of the sweep index, expiring through TTL.
            assert!(!item.contains_key("SweepKey"), "{item:?}");
            assert!(item.contains_key("ExpiresAt"), "{item:?}");
        }
    }
}

pub async fn sweep_all(env: &Env, client: Client) -> SweepSummary {
    env.sweeper(client, 0, 3600)
        .sweep(Deadline::none())
        .await
        .expect("sweep")
}

/// A lock-path coordinator of `env` locking `chunk` items per call, reading ahead or not.
pub fn lock_path_coordinator(
    env: &Env,
    client: Client,
    chunk: usize,
    read_ahead: bool,
) -> Coordinator {
    let config = env
        .builder()
        .fast_path(false)
        .lock_chunk(chunk)
        .read_ahead(read_ahead)
        .build();
    Coordinator::new(client, config.expect("valid configuration"))
}

/// Run `body` on the lock path by a coordinator that dies after 6 DynamoDB calls (describe,
/// create, two reads, two lock writes): a two-item transaction left holding both items,
/// pending.
pub async fn abandon(env: &Env, body: &Value) {
    let config = env
        .builder()
        .fast_path(false)
        .lock_chunk(1) // the 6 calls above: one lock write per item
        .read_ahead(false)
        .build()
        .expect("valid configuration");
    let client = dev_testing::client_with(Some(dev_testing::FaultInjector::fail_from(6)), 1);
    let dying = Coordinator::new(client, config);
    assert!(dying
        .run(&message(&dying, body), Deadline::none())
        .await
        .is_err());
}

/// Set one attribute of a TX header directly (what another host or version would have written).
pub async fn set_header(
    client: &Client,
    env: &Env,
    tx_id: &str,
    name: &str,
    value: AttributeValue,
) {
    client
        .update_item()
        .table_name(env.tx())
        .key("TxId", AttributeValue::S(tx_id.into()))
        .key("Part", AttributeValue::S("#".into()))
        .update_expression("SET #a = :v")
        .expression_attribute_names("#a", name)
        .expression_attribute_values(":v", value)
        .send()
        .await
        .expect("set a header attribute");
}

/// Write the header of a pending TX record directly, as a version that recorded the
/// transaction and stopped left it (requests inline, attempt 1, in a sweep shard, last
/// touched now, no `RequestsHash`: the protocol page's layout). The sweeper drives it.
pub async fn put_pending(client: &Client, env: &Env, tx_id: &str, requests_json: &str) {
    let now = dynamodb_exactly_once::__private::epoch_millis();
    client
        .put_item()
        .table_name(env.tx())
        .item("TxId", AttributeValue::S(tx_id.into()))
        .item("Part", AttributeValue::S("#".into()))
        .item("State", AttributeValue::S("pending".into()))
        .item("Version", AttributeValue::N("1".into()))
        .item("Attempt", AttributeValue::N("1".into()))
        .item("Requests", AttributeValue::S(requests_json.into()))
        .item("SweepKey", AttributeValue::S("open#00".into()))
        .item("LastTouched", AttributeValue::N(now.to_string()))
        .send()
        .await
        .expect("a pending record");
}

/// The `tx-coordinator` function over `protocol`, its dead letters in the test's table.
pub fn coordinator_writer(env: &Env, protocol: Coordinator) -> Writer<Coordinator> {
    Writer::builder("tx-coordinator", protocol)
        .dead_letters(DeadLetters::new(
            client(),
            &env.tables["DeadLetterTable"],
            "tx-coordinator",
        ))
        .deadline_margin(Duration::from_secs(1))
        .build()
        .expect("valid writer")
}

/// Rewrite the keep lock (`txId#attempt#k`) on item `pk`, if any, as the release before keep
/// locks wrote it: the plain lock `txId#attempt`, and the item's values saved as its image
/// unless the lock inserted the item (a check or delete of an absent item: `_txTransient`).
/// Markers and token stay. Returns whether a lock was rewritten.
pub async fn downgrade_keep_lock(client: &Client, table: &str, pk: &str) -> bool {
    let Ok(out) = client
        .get_item()
        .table_name(table)
        .key("PK", AttributeValue::S(pk.into()))
        .consistent_read(true)
        .send()
        .await
    else {
        return false;
    };
    let Some(item) = out.item().cloned() else {
        return false;
    };
    let Some(lock) = item.get("_txLock").and_then(|v| v.as_s().ok()).cloned() else {
        return false;
    };
    let Some(plain) = lock.strip_suffix("#k") else {
        return false;
    };
    let mut old = item.clone();
    old.insert("_txLock".into(), AttributeValue::S(plain.to_string()));
    if !matches!(item.get("_txTransient"), Some(AttributeValue::Bool(true))) {
        let protocol = dynamodb_exactly_once::txn::ITEM_PROTOCOL_ATTRIBUTES;
        let values: std::collections::HashMap<String, AttributeValue> = item
            .iter()
            .filter(|(k, _)| !protocol.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        old.insert("_txImage".into(), AttributeValue::M(values));
    }
    client
        .put_item()
        .table_name(table)
        .set_item(Some(old))
        .condition_expression("#l = :keep")
        .expression_attribute_names("#l", "_txLock")
        .expression_attribute_values(":keep", AttributeValue::S(lock.clone()))
        .send()
        .await
        .is_ok()
}
