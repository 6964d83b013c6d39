//! A loopback TCP proxy that delays each response DynamoDB Local sends back by a fixed time.
//!
//! * A few milliseconds stand in for the network round trip to a regional endpoint, which
//!   DynamoDB Local on the same machine does not have (the benchmarks show what concurrency
//!   across keys buys where calls wait on the network).
//! * Many seconds make a *stalled* response (the request reached DynamoDB and was applied; the
//!   answer does not come back in time): tests of the invocation deadline use it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Start the proxy in front of `upstream` (a `host:port`); returns its address.
pub async fn start(upstream: SocketAddr, delay: Duration) -> Result<SocketAddr, String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                // Bytes of requests sent upstream so far: a response starts after its request.
                let sent = Arc::new(AtomicU64::new(0));
                let up = {
                    let sent = Arc::clone(&sent);
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n @ 1..) = client_read.read(&mut buf).await {
                            if server_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                            sent.fetch_add(n as u64, Ordering::SeqCst);
                        }
                    })
                };
                let mut buf = vec![0u8; 64 * 1024];
                let mut answered = 0;
                loop {
                    match server_read.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            // Delay the start of each response once (the first chunk after a
                            // request went up), not each of its chunks.
                            let requested = sent.load(Ordering::SeqCst);
                            if requested != answered {
                                answered = requested;
                                tokio::time::sleep(delay).await;
                            }
                            if client_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    }
                }
                up.abort();
            });
        }
    });
    Ok(addr)
}

/// A proxy in front of the test endpoint ([`crate::endpoint`]); returns its URL.
pub async fn delaying(delay: Duration) -> Result<String, String> {
    let endpoint = crate::endpoint();
    let upstream: SocketAddr = endpoint
        .trim_start_matches("http://")
        .parse()
        .map_err(|e| format!("endpoint {endpoint}: {e}"))?;
    Ok(format!("http://{}", start(upstream, delay).await?))
}
