//! SQS endpoints for the SQS dead-letter sink's tests: there is no SQS emulator from AWS.
//!
//! * [`FakeSqs`]: a loopback HTTP server that records each request and answers `SendMessage`
//!   in the AWS JSON protocol the SDK speaks (`X-Amz-Target: AmazonSQS.SendMessage`). It checks
//!   **our request and our handling of the answer, not SQS**: it accepts any message body and
//!   de-duplicates nothing.
//! * [`Moto`]: `moto_server` (PyPI `moto[server]`, a third-party emulator that enforces a
//!   queue's `MaximumMessageSize` and FIFO de-duplication) on a loopback port, when it is
//!   installed.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use md5::{Digest, Md5};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// An SQS client of `endpoint` with test credentials; `retries: false` makes one attempt per
/// call.
pub fn sqs_client(endpoint: &str, retries: bool) -> aws_sdk_sqs::Client {
    let retry = if retries {
        RetryConfig::standard()
    } else {
        RetryConfig::disabled()
    };
    let conf = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("x", "x", None, None, "test"))
        .endpoint_url(endpoint)
        .retry_config(retry)
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
}

// ------------------------------------------------------------------- the fake

/// How the fake answers `SendMessage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 200 with a message id, as SQS does for an accepted message.
    Accept,
    /// 400 `QueueDoesNotExist`, as SQS does for a deleted queue.
    Refuse,
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Request {
    /// `X-Amz-Target`.
    pub target: String,
    /// `Content-Type`.
    pub content_type: String,
    /// The JSON body.
    pub body: Value,
}

/// A loopback server answering like SQS (see the module documentation).
#[derive(Debug, Clone)]
pub struct FakeSqs {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    answers: Arc<Semaphore>,
}

impl FakeSqs {
    /// Start it; with `held`, each answer waits for [`FakeSqs::release`].
    pub async fn start(answer: Answer, held: bool) -> FakeSqs {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let fake = FakeSqs {
            addr: listener.local_addr().expect("its address"),
            requests: Arc::default(),
            answers: Arc::new(Semaphore::new(if held {
                0
            } else {
                Semaphore::MAX_PERMITS
            })),
        };
        let server = fake.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(server.clone().serve(stream, answer));
            }
        });
        fake
    }

    /// Its endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A queue URL on it (`name` ending in `.fifo` for a FIFO queue).
    pub fn queue_url(&self, name: &str) -> String {
        format!("{}/000000000000/{name}", self.endpoint())
    }

    /// The requests so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Let `n` held answers go.
    pub fn release(&self, n: usize) {
        self.answers.add_permits(n);
    }

    /// Wait (up to 10 s) until `n` requests have come.
    pub async fn wait_for(&self, n: usize) {
        let start = Instant::now();
        while self.requests().len() < n {
            assert!(start.elapsed() < Duration::from_secs(10), "no request came");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Answer the requests of one connection (the SDK keeps connections alive).
    async fn serve(self, mut stream: TcpStream, answer: Answer) {
        let mut buf = Vec::new();
        while let Some(request) = read_request(&mut stream, &mut buf).await {
            let send = request.target == "AmazonSQS.SendMessage";
            let body = request.body.clone();
            if let Ok(mut requests) = self.requests.lock() {
                requests.push(request);
            }
            let Ok(permit) = self.answers.acquire().await else {
                return;
            };
            permit.forget();
            let response = match (send, answer) {
                (true, Answer::Accept) => accepted(&body),
                (true, Answer::Refuse) => refused(),
                (false, _) => unknown(),
            };
            if stream.write_all(response.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

/// The next HTTP/1.1 request on `stream` (`None` when it closes).
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Request> {
    let mut chunk = [0u8; 64 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let length: usize = header("content-length").parse().unwrap_or(0);
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body: Vec<u8> = buf.drain(..head_end + length).skip(head_end).collect();
    Some(Request {
        target: header("x-amz-target"),
        content_type: header("content-type"),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn response(status: &str, extra: &str, body: &Value) -> String {
    let body = body.to_string();
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.0\r\nx-amzn-RequestId: fake\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// SQS's answer to an accepted `SendMessage`.
fn accepted(request: &Value) -> String {
    let message = request["MessageBody"].as_str().unwrap_or_default();
    let md5 = hex(&Md5::digest(message.as_bytes()));
    let mut answer = json!({"MessageId": format!("fake-{md5}"), "MD5OfMessageBody": md5});
    if request.get("MessageGroupId").is_some() {
        answer["SequenceNumber"] = json!("18880000000000000001");
    }
    response("200 OK", "", &answer)
}

/// SQS's answer to `SendMessage` to a queue that does not exist.
fn refused() -> String {
    response(
        "400 Bad Request",
        "x-amzn-query-error: AWS.SimpleQueueService.NonExistentQueue;Sender\r\n",
        &json!({"__type": "com.amazonaws.sqs#QueueDoesNotExist",
            "message": "The specified queue does not exist."}),
    )
}

fn unknown() -> String {
    response(
        "400 Bad Request",
        "",
        &json!({"__type": "com.amazonaws.sqs#InvalidAction", "message": "not faked"}),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ------------------------------------------------------------------- moto

/// `moto_server` on a loopback port, stopped when dropped.
#[derive(Debug)]
pub struct Moto {
    child: Child,
    /// Its endpoint URL.
    pub endpoint: String,
}

impl Moto {
    /// Start it, or say why it cannot be (not installed, did not answer in 30 s).
    pub fn start() -> Result<Moto, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| e.to_string())?;
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("moto_server: {e} (`python3 -m pip install 'moto[server]'` to run it)")
            })?;
        let mut moto = Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = moto.child.try_wait() {
                return Err(format!("moto_server exited: {status}"));
            }
            if start.elapsed() > Duration::from_secs(30) {
                return Err("moto_server did not listen within 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(moto)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
