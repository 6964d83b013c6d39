//! One idempotency table shared by a Node function on TypeScript Powertools (the real
//! `@aws-lambda-powertools/idempotency@2.35.0` from npm, `tests/powertools/idempotent_function.cjs`,
//! running `makeIdempotent`) and a Rust function on this layer with
//! `DynamoDbPersistence::builder(..).powertools_typescript()`: the keys and validation hashes
//! agree (checked on a corpus of values), each replays the other's completed records, sees
//! the other's in-progress records as in progress, refuses the other's key with another
//! payload, in the default layout and in sort-key mode; in a race on one key exactly one side
//! runs.
//!
//! `scripts/tools.sh` installs the package under `.tools/node_modules`; without it (or
//! without Node) the test says so and passes.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use dev_testing::client;
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once_lambda::idempotency::{
    DynamoDbPersistence, Idempotency, IdempotencyConfig, IdempotencyError, KeySource, RecordFormat,
    Run,
};
use dynamodb_exactly_once_lambda::processor::Record;
use serde_json::{json, Value};

/// The TypeScript function's `AWS_LAMBDA_FUNCTION_NAME`: its keys' prefix, and the
/// operation on the Rust side.
const FUNCTION: &str = "orders-api";

fn node_modules() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../.tools/node_modules"
    ))
}

fn installed() -> bool {
    let package = node_modules().join("@aws-lambda-powertools/idempotency/package.json");
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    node && package.exists()
}

/// The Node function, one process answering a JSON line per command.
struct Node {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Node {
    fn start(table: &str, sort_key: Option<&str>) -> Node {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/powertools/idempotent_function.cjs"
        );
        let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").unwrap_or_default();
        let mut child = Command::new("node")
            .arg(script)
            .env("NODE_PATH", node_modules())
            .env("TABLE", table)
            .env("SORT_KEY_ATTR", sort_key.unwrap_or_default())
            .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
            .env("AWS_ACCESS_KEY_ID", "local")
            .env("AWS_SECRET_ACCESS_KEY", "local")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_LAMBDA_FUNCTION_NAME", FUNCTION)
            .env_remove("POWERTOOLS_IDEMPOTENCY_DISABLED")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node starts");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Node {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write to node");
        self.stdin.flush().expect("flush");
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read from node");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("node answered {line:?}: {e}"))
    }

    /// `charge(order)` in Node: its answer.
    fn charge(&mut self, order: &Value) -> Value {
        self.send(&json!({ "order": order }).to_string());
        self.read()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type Layer = Arc<Idempotency<DynamoDbPersistence>>;
type Outcome = Result<Run<Value>, IdempotencyError<String>>;

async fn table(client: &Client, sort_key: Option<&str>) -> String {
    crate::common::string_key_table(client, "PowertoolsTs", "id", sort_key).await
}

fn rust_layer(table: &str, sort_key: Option<&str>) -> Layer {
    let mut persistence = DynamoDbPersistence::builder(client(), table).powertools_typescript();
    if let Some(sort) = sort_key {
        persistence = persistence
            .sort_key_attr(sort)
            .static_partition_key(format!("idempotency#{FUNCTION}"));
    }
    let config = IdempotencyConfig::builder("rust-consumer")
        .validate_payload_at(["/amount"])
        .cache_keys(0)
        .build()
        .expect("config");
    Arc::new(Idempotency::new(
        persistence.build().expect("layout"),
        config,
    ))
}

/// `charge` in Rust, a record of a stream: the key `/orderId`, `amount` validated.
async fn rust_charge(layer: &Layer, order: &Value, runs: &AtomicUsize, work: Duration) -> Outcome {
    let batch = dev_testing::events::sqs_batch(std::slice::from_ref(order), 0);
    let record = Record::new(
        order.clone(),
        batch.records[0].position.clone(),
        order.to_string().into_bytes(),
    )
    .with_deadline_ms(Some(epoch_millis() + 20_000));
    let keys = KeySource::pointer("/orderId").expect("pointer");
    layer
        .run_record(FUNCTION, &keys, &record, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(work).await;
            let id = order["orderId"].as_str().unwrap_or("?");
            Ok::<_, String>(json!({"chargeId": format!("rs-{id}"), "amount": order["amount"]}))
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typescript_powertools_function_and_a_rust_function_share_one_table_both_ways() {
    if !installed() {
        eprintln!("SKIPPED: no node or no .tools/powertools-ts (run scripts/tools.sh)");
        return;
    }
    let table = table(&client(), None).await;
    let mut node = Node::start(&table, None);
    let rust = rust_layer(&table, None);
    keys_and_hashes_agree(&mut node);
    let runs = AtomicUsize::new(0);
    completed_records_both_ways(&mut node, &rust, &runs).await;
    node_in_progress(&mut node, &rust, &runs).await;
    rust_in_progress(&mut node, &rust).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "o-2 ran in Rust");
    a_race_on_one_key_runs_one_side(&mut node, &rust).await;
}

/// Node's key and validation hash of a corpus of values, and this layer's.
fn keys_and_hashes_agree(node: &mut Node) {
    let format = RecordFormat::PowertoolsTypeScript;
    let corpus = [
        json!("o-1"),
        json!(5),
        json!(-0.0),
        json!(1.5),
        serde_json::from_str::<Value>("1e21").expect("json"),
        serde_json::from_str::<Value>("0.0000001").expect("json"),
        serde_json::from_str::<Value>("12345678901234567890").expect("json"),
        json!("é \u{1F600} \" \\ \n \u{1} \u{7f}"),
        json!({"b": 1, "A": [true, null], "a": {"Z": 1, "y": 2}, "10": 1, "2": 2}),
        json!([{"orderId": "x"}, 3]),
    ];
    for value in corpus {
        node.send(&json!({ "hash": value }).to_string());
        let answer = node.read();
        let key = format.stored_key("unused", FUNCTION, "", &value);
        assert_eq!(answer["key"], json!(key), "key of {value}");
        assert_eq!(
            answer["validation"],
            json!(format.payload_hash(&value)),
            "validation of {value}"
        );
    }
}

/// Each replays the other's completed record; another amount is refused on both sides.
async fn completed_records_both_ways(node: &mut Node, rust: &Layer, runs: &AtomicUsize) {
    let o1 = json!({"orderId": "o-1", "amount": 250});
    let first = node.charge(&o1);
    assert_eq!(first["ran"], json!(true), "{first}");
    let replayed = rust_charge(rust, &o1, runs, Duration::ZERO).await;
    let want = json!({"chargeId": "ts-o-1", "amount": 250});
    assert_eq!(replayed.ok(), Some(Run::Replayed(want)));
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    let o2 = json!({"orderId": "o-2", "amount": 100});
    let ran = rust_charge(rust, &o2, runs, Duration::ZERO).await;
    assert!(matches!(ran, Ok(Run::Ran(_))), "{ran:?}");
    let again = node.charge(&o2);
    assert_eq!(again["ran"], json!(false), "{again}");
    assert_eq!(
        again["result"],
        json!({"chargeId": "rs-o-2", "amount": 100})
    );

    let ts_other = node.charge(&json!({"orderId": "o-2", "amount": 999}));
    assert_eq!(
        ts_other["error"],
        json!("IdempotencyValidationError"),
        "{ts_other}"
    );
    let rs_other = rust_charge(
        rust,
        &json!({"orderId": "o-1", "amount": 999}),
        runs,
        Duration::ZERO,
    )
    .await;
    assert!(
        matches!(rs_other, Err(IdempotencyError::PayloadMismatch { .. })),
        "{rs_other:?}"
    );
}

/// Node holds o-3 in progress (30 s, past the Rust record's deadline): Rust is refused, then
/// replays once Node completed.
async fn node_in_progress(node: &mut Node, rust: &Layer, runs: &AtomicUsize) {
    node.send(&json!({"order": {"orderId": "o-3", "amount": 5, "hold": true}}).to_string());
    assert_eq!(node.read(), json!({"holding": true}));
    let o3 = json!({"orderId": "o-3", "amount": 5, "hold": true});
    let held = rust_charge(rust, &o3, runs, Duration::ZERO).await;
    assert!(
        matches!(held, Err(IdempotencyError::InProgress { .. })),
        "{held:?}"
    );
    node.send("");
    assert_eq!(node.read()["ran"], json!(true));
    let after = rust_charge(rust, &o3, runs, Duration::ZERO).await;
    assert!(after.is_ok_and(|r| r.is_replayed()));
}

/// Rust holds o-4 in progress: Node is refused, then replays Rust's result.
async fn rust_in_progress(node: &mut Node, rust: &Layer) {
    let o4 = json!({"orderId": "o-4", "amount": 7});
    let holder = {
        let (rust, o4) = (Arc::clone(rust), o4.clone());
        tokio::spawn(async move {
            let runs = AtomicUsize::new(0);
            rust_charge(&rust, &o4, &runs, Duration::from_millis(1500)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refused = node.charge(&o4);
    assert_eq!(
        refused["error"],
        json!("IdempotencyAlreadyInProgressError"),
        "{refused}"
    );
    let done = holder.await.expect("joined");
    assert!(matches!(done, Ok(Run::Ran(_))), "{done:?}");
    let replayed = node.charge(&o4);
    assert_eq!(
        (replayed["ran"].clone(), replayed["result"].clone()),
        (json!(false), json!({"chargeId": "rs-o-4", "amount": 7}))
    );
}

/// Both start o-9 at once: exactly one of them runs it.
async fn a_race_on_one_key_runs_one_side(node: &mut Node, rust: &Layer) {
    let o9 = json!({"orderId": "o-9", "amount": 9});
    let rust_runs = Arc::new(AtomicUsize::new(0));
    let racer = {
        let (rust, o9, runs) = (Arc::clone(rust), o9.clone(), Arc::clone(&rust_runs));
        tokio::spawn(
            async move { rust_charge(&rust, &o9, &runs, Duration::from_millis(200)).await },
        )
    };
    let ts = node.charge(&o9);
    let rs = racer.await.expect("joined");
    let ts_ran = usize::from(ts["ran"] == json!(true));
    assert_eq!(
        ts_ran + rust_runs.load(Ordering::SeqCst),
        1,
        "node {ts}, rust {rs:?}"
    );
}

#[tokio::test]
async fn in_typescript_sort_key_mode_each_replays_the_others_result() {
    if !installed() {
        eprintln!("SKIPPED: no node or no .tools/powertools-ts (run scripts/tools.sh)");
        return;
    }
    let table = table(&client(), Some("sk")).await;
    let mut node = Node::start(&table, Some("sk"));
    let rust = rust_layer(&table, Some("sk"));
    let runs = AtomicUsize::new(0);
    let o1 = json!({"orderId": "o-1", "amount": 250});
    assert_eq!(node.charge(&o1)["ran"], json!(true));
    let replayed = rust_charge(&rust, &o1, &runs, Duration::ZERO).await;
    assert!(replayed.is_ok_and(|r| r.is_replayed()));
    let o2 = json!({"orderId": "o-2", "amount": 100});
    assert!(matches!(
        rust_charge(&rust, &o2, &runs, Duration::ZERO).await,
        Ok(Run::Ran(_))
    ));
    assert_eq!(node.charge(&o2)["ran"], json!(false));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
