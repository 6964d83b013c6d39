//! One idempotency table shared by a Python function on aws-lambda-powertools (the real
//! package from PyPI, `tests/powertools/idempotent_function.py`, running
//! `@idempotent_function`) and a Rust function on this layer with
//! `DynamoDbPersistence::builder(..).powertools()`: each replays the other's completed
//! records, sees the other's in-progress records as in progress, and refuses the other's
//! key with another payload (the validation hashes agree).
//!
//! `scripts/tools.sh` installs the package; without it the test says so and passes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use dev_testing::client;
use dynamodb_exactly_once::__private::epoch_millis;
use dynamodb_exactly_once_lambda::idempotency::{
    DynamoDbPersistence, Idempotency, IdempotencyConfig, IdempotencyError, IdempotencyLayer,
    KeySource, RecordFormat, Run,
};
use dynamodb_exactly_once_lambda::processor::Record;
use serde_json::{json, Value};
use tower_layer::Layer as _;

/// Powertools' key prefix for `charge` in a script run as `__main__`:
/// `<AWS_LAMBDA_FUNCTION_NAME>.<module>.<qualname>`.
const FUNCTION: &str = "payments";
const OPERATION: &str = "__main__.charge";

/// A table as Powertools' docs create it: partition key `id` (S), and a sort key when given.
async fn powertools_table(client: &Client, sort_key: Option<&str>) -> String {
    crate::common::string_key_table(client, "Powertools", "id", sort_key).await
}

/// The Python function, one process answering a JSON line per command.
struct Python {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Python {
    fn start(table: &str, sort_key: Option<&str>) -> Python {
        Python::start_with(table, sort_key, None)
    }

    /// With the decorator's `key_prefix`, when given.
    fn start_with(table: &str, sort_key: Option<&str>, key_prefix: Option<&str>) -> Python {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/powertools/idempotent_function.py"
        );
        let mut child = Command::new("python3")
            .arg(script)
            .env("TABLE", table)
            .env("SORT_KEY_ATTR", sort_key.unwrap_or_default())
            .env("KEY_PREFIX", key_prefix.unwrap_or_default())
            .env("AWS_ENDPOINT_URL_DYNAMODB", dev_testing::endpoint())
            .env("AWS_ACCESS_KEY_ID", "local")
            .env("AWS_SECRET_ACCESS_KEY", "local")
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_LAMBDA_FUNCTION_NAME", FUNCTION)
            .env_remove("POWERTOOLS_IDEMPOTENCY_DISABLED")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONWARNINGS", "ignore")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 starts");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Python {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write to python");
        self.stdin.flush().expect("flush");
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read from python");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("python answered {line:?}: {e}"))
    }

    /// `charge(order=...)` in Python: its answer.
    fn charge(&mut self, order: &Value) -> Value {
        self.send(&json!({ "order": order }).to_string());
        self.read()
    }
}

impl Drop for Python {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn powertools_installed() -> bool {
    Command::new("python3")
        .args(["-c", "import aws_lambda_powertools, boto3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

type Layer = Arc<Idempotency<DynamoDbPersistence>>;
type Outcome = Result<Run<Value>, IdempotencyError<String>>;

fn rust_layer(table: &str, sort_key: Option<&str>) -> Layer {
    let mut persistence = DynamoDbPersistence::builder(client(), table).powertools();
    if let Some(sort) = sort_key {
        persistence = persistence
            .sort_key_attr(sort)
            .static_partition_key(format!("idempotency#{FUNCTION}"));
    }
    let persistence = persistence.build().expect("layout");
    let config = IdempotencyConfig::builder(FUNCTION)
        .validate_payload_at(["/amount"])
        .cache_keys(0)
        .build()
        .expect("config");
    Arc::new(Idempotency::new(persistence, config))
}

/// `charge` in Rust: the key `orderId`, the payload the order, `amount` validated.
async fn rust_charge(layer: &Layer, order: &Value, runs: &AtomicUsize) -> Outcome {
    let key = order["orderId"].as_str().expect("orderId");
    layer
        .call(OPERATION, key)
        .payload(order)
        .deadline_ms(epoch_millis() + 30_000)
        .run(|| async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(json!({"chargeId": format!("rs-{key}"), "amount": order["amount"]}))
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_powertools_function_and_a_rust_function_share_one_table_both_ways() {
    if !powertools_installed() {
        eprintln!("SKIPPED: python3 has no aws_lambda_powertools (run scripts/tools.sh)");
        return;
    }
    let table = powertools_table(&client(), None).await;
    let mut python = Python::start(&table, None);
    let rust = rust_layer(&table, None);
    let runs = AtomicUsize::new(0);
    completed_records_both_ways(&mut python, &rust, &runs).await;
    python_in_progress(&mut python, &rust, &runs).await;
    rust_in_progress(&mut python, &rust).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    number_keys(&mut python, &rust).await;
}

/// Each replays the other's completed record; another amount is refused on both sides.
async fn completed_records_both_ways(python: &mut Python, rust: &Layer, runs: &AtomicUsize) {
    // Python completes o-1; Rust replays Python's result without running.
    let o1 = json!({"orderId": "o-1", "amount": 250});
    let first = python.charge(&o1);
    assert_eq!(first["ran"], json!(true), "{first}");
    let replayed = rust_charge(rust, &o1, runs).await;
    let want = json!({"chargeId": "py-o-1", "amount": 250});
    assert_eq!(replayed.ok(), Some(Run::Replayed(want)));
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // Rust completes o-2; Python replays Rust's result without running.
    let o2 = json!({"orderId": "o-2", "amount": 100});
    let ran = rust_charge(rust, &o2, runs).await;
    assert!(matches!(ran, Ok(Run::Ran(_))), "{ran:?}");
    let again = python.charge(&o2);
    assert_eq!(again["ran"], json!(false), "{again}");
    assert_eq!(
        again["result"],
        json!({"chargeId": "rs-o-2", "amount": 100})
    );

    // Another amount under a key the other completed: refused on both sides.
    let py_other = python.charge(&json!({"orderId": "o-2", "amount": 999}));
    assert_eq!(
        py_other["error"],
        json!("IdempotencyValidationError"),
        "{py_other}"
    );
    let rs_other = rust_charge(rust, &json!({"orderId": "o-1", "amount": 999}), runs).await;
    assert!(
        matches!(rs_other, Err(IdempotencyError::PayloadMismatch { .. })),
        "{rs_other:?}"
    );
}

/// Python holds o-3 in progress: Rust is refused InProgress, then replays.
async fn python_in_progress(python: &mut Python, rust: &Layer, runs: &AtomicUsize) {
    python.send(&json!({"order": {"orderId": "o-3", "amount": 5, "hold": true}}).to_string());
    assert_eq!(python.read(), json!({"holding": true}));
    let o3 = json!({"orderId": "o-3", "amount": 5});
    let held = rust_charge(rust, &o3, runs).await;
    assert!(
        matches!(held, Err(IdempotencyError::InProgress { .. })),
        "{held:?}"
    );
    python.send("");
    assert_eq!(python.read()["ran"], json!(true));
    let after = rust_charge(rust, &o3, runs).await;
    assert!(after.is_ok_and(|r| r.is_replayed()));
}

/// Rust holds o-4 in progress: Python is refused, then replays Rust's result.
async fn rust_in_progress(python: &mut Python, rust: &Layer) {
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let started = Arc::new(tokio::sync::Notify::new());
    let holder = {
        let (rust, started) = (Arc::clone(rust), Arc::clone(&started));
        tokio::spawn(async move {
            let o4 = json!({"orderId": "o-4", "amount": 7});
            rust.call(OPERATION, "o-4")
                .payload(&o4)
                .deadline_ms(epoch_millis() + 30_000)
                .run(|| async {
                    started.notify_one();
                    let _ = released.await;
                    Ok::<_, String>(json!({"chargeId": "rs-o-4"}))
                })
                .await
        })
    };
    tokio::time::timeout(Duration::from_secs(10), started.notified())
        .await
        .expect("the Rust run claimed o-4");
    let o4 = json!({"orderId": "o-4", "amount": 7});
    let refused = python.charge(&o4);
    assert_eq!(
        refused["error"],
        json!("IdempotencyAlreadyInProgressError"),
        "{refused}"
    );
    let _ = release.send(());
    let done = holder.await.expect("joined");
    assert!(matches!(done, Ok(Run::Ran(_))), "{done:?}");
    let replayed = python.charge(&o4);
    assert_eq!(
        (replayed["ran"].clone(), replayed["result"].clone()),
        (json!(false), json!({"chargeId": "rs-o-4"}))
    );
}

/// A number as the key: Python hashes `json.dumps(5)`, the Rust record's key source reads
/// the same JSON value.
async fn number_keys(python: &mut Python, rust: &Layer) {
    let o5 = json!({"orderId": 5, "amount": 1});
    assert_eq!(python.charge(&o5)["ran"], json!(true));
    let batch = dev_testing::events::sqs_batch(std::slice::from_ref(&o5), 0);
    let record = Record::new(
        o5.clone(),
        batch.records[0].position.clone(),
        o5.to_string().into_bytes(),
    );
    let keys = KeySource::pointer("/orderId").expect("pointer");
    let replayed = rust
        .run_record(OPERATION, &keys, &record, || async {
            Ok::<Value, String>(json!("rs"))
        })
        .await;
    assert_eq!(
        replayed.ok(),
        Some(Run::Replayed(json!({"chargeId": "py-5", "amount": 1})))
    );
    // The tower layer reads the same JSON value: Python's record, the service not called.
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let inner = lambda_runtime::service_fn(move |_: Record<Value>| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Ok::<Value, String>(json!("rs")) }
    });
    let mut service = IdempotencyLayer::new(Arc::clone(rust), OPERATION, keys).layer(inner);
    std::future::poll_fn(|cx| tower_service::Service::poll_ready(&mut service, cx))
        .await
        .expect("ready");
    let answer = tower_service::Service::call(&mut service, record).await;
    assert_eq!(answer.ok(), Some(json!({"chargeId": "py-5", "amount": 1})));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_python_key_prefix_is_met_by_a_rust_operation_used_as_the_whole_prefix() {
    if !powertools_installed() {
        eprintln!("SKIPPED: python3 has no aws_lambda_powertools (run scripts/tools.sh)");
        return;
    }
    let table = powertools_table(&client(), None).await;
    let mut python = Python::start_with(&table, None, Some("orders"));
    let persistence = DynamoDbPersistence::builder(client(), &table)
        .powertools()
        .build()
        .expect("layout");
    let config = IdempotencyConfig::builder(FUNCTION)
        .operation_as_key_prefix(true)
        .validate_payload_at(["/amount"])
        .cache_keys(0)
        .build()
        .expect("config");
    let rust = Idempotency::new(persistence, config);
    let o7 = json!({"orderId": "o-7", "amount": 3});
    assert_eq!(python.charge(&o7)["ran"], json!(true));
    let replayed = rust
        .call("orders", "o-7")
        .payload(&o7)
        .run(|| async { Ok::<Value, String>(json!("rs")) })
        .await;
    assert_eq!(
        replayed.ok(),
        Some(Run::Replayed(json!({"chargeId": "py-o-7", "amount": 3})))
    );
}

#[tokio::test]
async fn in_powertools_sort_key_mode_each_replays_the_others_result() {
    if !powertools_installed() {
        eprintln!("SKIPPED: python3 has no aws_lambda_powertools (run scripts/tools.sh)");
        return;
    }
    let table = powertools_table(&client(), Some("sk")).await;
    let mut python = Python::start(&table, Some("sk"));
    let rust = rust_layer(&table, Some("sk"));
    let runs = AtomicUsize::new(0);
    let o1 = json!({"orderId": "o-1", "amount": 250});
    assert_eq!(python.charge(&o1)["ran"], json!(true));
    let replayed = rust_charge(&rust, &o1, &runs).await;
    assert!(replayed.is_ok_and(|r| r.is_replayed()));
    let o2 = json!({"orderId": "o-2", "amount": 100});
    assert!(matches!(
        rust_charge(&rust, &o2, &runs).await,
        Ok(Run::Ran(_))
    ));
    let again = python.charge(&o2);
    assert_eq!(
        again["result"],
        json!({"chargeId": "rs-o-2", "amount": 100}),
        "{again}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// JSON values whose Powertools hash (`md5(json.dumps(value, sort_keys=True))`) the Rust
/// side computes exactly: the bounds `docs/idempotency.md` states.
const SAME_HASH: &[&str] = &[
    r#""o-1""#,
    r#""é ü 中文 😀 \" \\ \n \t \u0001 \u007f ~""#,
    "0",
    "-0",
    "-17",
    "18446744073709551615",
    "-9223372036854775808",
    "1.0",
    "1e2",
    "1E2",
    "0.1",
    "123.456",
    "1e15",
    "1e16",
    "0.0001",
    "0.00001",
    "-2.5e-7",
    "1.5e300",
    "0.30000000000000004",
    "true",
    "null",
    "[]",
    "{}",
    r#"[1, "a", [true, null], {"b": 2, "a": 1}]"#,
    r#"{"z": 1, "a": {"é": 1, "e": 2, "E": 3, "aa": [1.5]}, "_": null}"#,
];

#[test]
fn json_values_hash_as_python_json_dumps_hashes_them() {
    let mut python = match Command::new("python3")
        .args([
            "-c",
            "import hashlib, json, sys\n\
             for line in sys.stdin:\n    \
                 v = json.loads(line)\n    \
                 print(hashlib.md5(json.dumps(v, sort_keys=True).encode()).hexdigest())",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => panic!("python3 is needed: {e}"),
    };
    let mut stdin = python.stdin.take().expect("stdin");
    for text in SAME_HASH {
        let line: Value = serde_json::from_str(text).expect("json");
        writeln!(stdin, "{line}").expect("write");
    }
    drop(stdin);
    let out = python.wait_with_output().expect("python ran");
    let hashes: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(hashes.len(), SAME_HASH.len(), "python answered {hashes:?}");
    for (text, python_hash) in SAME_HASH.iter().zip(&hashes) {
        let value: Value = serde_json::from_str(text).expect("json");
        let rust_hash = RecordFormat::Powertools.payload_hash(&value);
        assert_eq!(&rust_hash, python_hash, "{text}");
    }
}
